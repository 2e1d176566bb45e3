import Foundation

/// An HTTP/1.1 request as the server read it.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The request target without the query, e.g. `/v1/purchases`.
    public var path: String
    public var query: String?
    /// Header names lower-cased.
    public var headers: [String: String]
    public var body: Data
    /// `HTTP/1.1` or `HTTP/1.0`.
    public var version = "HTTP/1.1"

    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// An HTTP/1.1 response.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [String: String]
    public var body: Data

    public init(status: Int, headers: [String: String] = [:], body: Data = Data()) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public init(status: Int, contentType: String, body: String) {
        self.init(status: status, headers: ["Content-Type": contentType], body: Data(body.utf8))
    }

    static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 410: "Gone"
        case 413: "Content Too Large"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 503: "Service Unavailable"
        default: "Status"
        }
    }

    /// - Parameter keepAlive: whether the server reads another request on this connection after this response.
    func serialized(keepAlive: Bool = false) -> Data {
        var head = "HTTP/1.1 \(status) \(Self.reason(status))\r\n"
        var headers = self.headers
        headers["Content-Length"] = String(body.count)
        headers["Connection"] = keepAlive ? "keep-alive" : "close"
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { head += "\(name): \(value)\r\n" }
        head += "\r\n"
        return Data(head.utf8) + body
    }
}

/// A non-negative decimal integer as HTTP headers carry them: ASCII digits only (no sign, no spaces), at most 12.
public func headerDecimal(_ text: String) -> Int64? {
    guard !text.isEmpty, text.utf8.count <= 12, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
    return Int64(text)
}
