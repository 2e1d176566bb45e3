import Foundation
import HTTPServer

extension HTTPRequest {
    /// The query's parameters by name (the first of a name), each value percent-decoded (as sent when it cannot be).
    var queryParameters: [String: String] {
        var parameters: [String: String] = [:]
        for pair in (query ?? "").split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let value = parts.count == 2 ? String(parts[1]) : ""
            if parameters[String(parts[0])] == nil { parameters[String(parts[0])] = value.removingPercentEncoding ?? value }
        }
        return parameters
    }
}
