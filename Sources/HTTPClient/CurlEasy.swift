import CCurl
import Foundation

/// One libcurl easy handle: one transfer at a time, set up by `prepare` and run by a `CurlMulti`; reused from request
/// to request (`curl_easy_reset` keeps nothing of the last one but the handle). Owns the handle and what its transfer
/// points at, and frees them in `deinit`. Used by `HTTPClient`'s thread alone.
final class CurlEasy {
    let handle: UnsafeMutableRawPointer
    /// The request's header lines, which libcurl reads during the transfer (it copies the other options).
    private var headers: UnsafeMutablePointer<curl_slist>?
    /// Where the write callback puts the answer's body, during a transfer.
    private var body: ResponseBody?

    /// `curl_global_init`, once per process, before the first handle.
    static let globalInit: CURLcode = curl_global_init(Int(CURL_GLOBAL_DEFAULT))

    init() throws(HTTPClient.Failure) {
        guard Self.globalInit == CURLE_OK else { throw HTTPClient.Failure("libcurl did not initialise: \(Self.describe(Self.globalInit))") }
        guard let handle = curl_easy_init() else { throw HTTPClient.Failure("libcurl could not make a handle") }
        self.handle = handle
    }

    deinit {
        curl_easy_cleanup(handle)
        curl_slist_free_all(headers)
    }

    /// Sets the handle up for `request` (at most `limits.maxBodyBytes` of answer); nil, or why it cannot be sent.
    func prepare(_ request: HTTPClient.Request, limits: HTTPClient.Limits) -> HTTPClient.Failure? {
        curl_easy_reset(handle)
        release()
        let body = ResponseBody(limit: limits.maxBodyBytes, truncates: limits.truncatesBody)
        self.body = body
        // No "Expect: 100-continue" round trip before a body, and no Content-Type libcurl would make up for one.
        var lines = request.headers.map { "\($0.name): \($0.value)" } + ["Expect:"]
        if !request.headers.contains(where: { $0.name.lowercased() == "content-type" }) { lines.append("Content-Type:") }
        for line in lines {
            guard let appended = curl_slist_append(headers, line) else { return HTTPClient.Failure("out of memory for the headers") }
            headers = appended
        }
        var code = CURLE_OK
        func set(_ option: CURLoption, _ value: Int) { if code == CURLE_OK { code = iap_curl_setopt_long(handle, option, value) } }
        func set(_ option: CURLoption, _ value: UnsafeRawPointer?) { if code == CURLE_OK { code = iap_curl_setopt_pointer(handle, option, value) } }
        request.url.withCString { set(CURLOPT_URL, $0) } // libcurl copies string options.
        request.method.withCString { set(CURLOPT_CUSTOMREQUEST, $0) }
        "http,https".withCString { set(CURLOPT_PROTOCOLS_STR, $0) }
        set(CURLOPT_NOSIGNAL, 1) // Threads: no SIGALRM for timeouts.
        set(CURLOPT_TIMEOUT_MS, limits.timeoutMilliseconds)
        set(CURLOPT_CONNECTTIMEOUT_MS, limits.timeoutMilliseconds)
        set(CURLOPT_HTTPHEADER, UnsafeRawPointer(headers))
        // Always set, "" for none: libcurl then reads no proxy variable of its own (`HTTPClient.Proxy`).
        (limits.proxy.proxy(of: request.url) ?? "").withCString { set(CURLOPT_PROXY, $0) }
        limits.proxy.noProxy.withCString { set(CURLOPT_NOPROXY, $0) }
        // Unretained: `self.body` holds it until the answer is read.
        set(CURLOPT_WRITEDATA, UnsafeRawPointer(Unmanaged.passUnretained(body).toOpaque()))
        if code == CURLE_OK { code = iap_curl_setopt_write_function(handle, ResponseBody.append) }
        if request.body != nil || request.method == "POST" || request.method == "PUT" {
            // The size first: COPYPOSTFIELDS copies that many bytes, so the body need not outlive this call.
            let bytes = request.body ?? []
            if code == CURLE_OK { code = iap_curl_setopt_off_t(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(bytes.count)) }
            bytes.withUnsafeBytes { buffer in
                set(CURLOPT_COPYPOSTFIELDS, buffer.count == 0 ? UnsafeRawPointer(("" as StaticString).utf8Start) : buffer.baseAddress)
            }
        } else {
            set(CURLOPT_HTTPGET, 1)
        }
        return code == CURLE_OK ? nil : HTTPClient.Failure("cannot set up the request: \(Self.describe(code))")
    }

    /// The answer of the transfer that ended with `result`; the handle is free for the next one.
    func answer(_ result: CURLcode, limits: HTTPClient.Limits) -> Result<HTTPClient.Response, HTTPClient.Failure> {
        defer { release() }
        if body?.exceeded == true { return .failure(HTTPClient.Failure("the answer is larger than \(limits.maxBodyBytes) bytes")) }
        guard result == CURLE_OK else { return .failure(HTTPClient.Failure(Self.describe(result))) }
        var status = 0
        guard iap_curl_response_code(handle, &status) == CURLE_OK else { return .failure(HTTPClient.Failure("no HTTP status")) }
        return .success(HTTPClient.Response(status: status, body: body?.bytes ?? [], retryAfter: retryAfterHint()))
    }

    /// `Retry-After`: a number as it was sent (libcurl ≥ 8.12 caps the number it reads at six hours, and a store may send
    /// a UNIX time in milliseconds: its caller reads that), else a date as libcurl reads it, in seconds from now; nil when
    /// absent.
    private func retryAfterHint() -> Duration? {
        if let raw = iap_curl_header_value(handle, "Retry-After") {
            let text = String(cString: raw).utf8.filter { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") }
            if !text.isEmpty, text.count <= 18, text.allSatisfy({ (0x30...0x39).contains($0) }) {
                let value = text.reduce(Int64(0)) { $0 * 10 + Int64($1 - 0x30) }
                return value > 0 ? .seconds(value) : nil
            }
        }
        var retryAfter: curl_off_t = 0
        return iap_curl_retry_after(handle, &retryAfter) == CURLE_OK && retryAfter > 0 ? Duration.seconds(retryAfter) : nil
    }

    /// Forgets the last transfer's headers and body.
    private func release() {
        curl_slist_free_all(headers)
        headers = nil
        body = nil
    }

    static func describe(_ code: CURLcode) -> String { String(cString: curl_easy_strerror(code)) }

    /// Where the write callback puts the answer's body.
    private final class ResponseBody {
        var bytes: [UInt8] = []
        var exceeded = false
        let limit: Int
        /// Past the limit: the rest is read and dropped, not a failure.
        let truncates: Bool

        init(limit: Int, truncates: Bool) {
            self.limit = limit
            self.truncates = truncates
        }

        /// libcurl's write callback: returning less than it was given ends the transfer with an error.
        static let append: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = { data, size, count, context in
            guard let context else { return 0 }
            let body = Unmanaged<ResponseBody>.fromOpaque(context).takeUnretainedValue()
            let length = size * count
            guard body.bytes.count + length <= body.limit else {
                if body.truncates, let data {
                    body.bytes.append(contentsOf: UnsafeRawBufferPointer(start: data, count: body.limit - body.bytes.count))
                    return length
                }
                body.exceeded = true
                return 0
            }
            if let data, length > 0 { body.bytes.append(contentsOf: UnsafeRawBufferPointer(start: data, count: length)) }
            return length
        }
    }
}
