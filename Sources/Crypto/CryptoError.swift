import COpenSSL
import Foundation

/// A failure inside OpenSSL, with OpenSSL's own error queue as the explanation.
public struct CryptoError: Error, Sendable, CustomStringConvertible {
    public let message: String

    public init(_ message: String) { self.message = message }

    /// `context` followed by the (drained) OpenSSL error queue of this thread.
    static func openSSL(_ context: String) -> CryptoError {
        CryptoError(context + drainedOpenSSLErrors())
    }

    public var description: String { message }
}

/// Empties this thread's OpenSSL error queue; a stale entry would otherwise blame a later call.
func drainedOpenSSLErrors() -> String {
    var reasons: [String] = []
    var data: UnsafePointer<CChar>?
    var flags: Int32 = 0
    while case let code = ERR_get_error_all(nil, nil, nil, &data, &flags), code != 0 {
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        var reason = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // Detail OpenSSL attached, e.g. "Verify error:certificate has expired".
        if flags & ERR_TXT_STRING != 0, let data { reason += " (\(String(cString: data)))" }
        reasons.append(reason)
    }
    return reasons.isEmpty ? "" : ": " + reasons.joined(separator: "; ")
}

/// Runs `body` with a pointer to `data`'s bytes (never nil, even for empty data).
func withBytes<T>(_ data: some DataProtocol & ContiguousBytes, _ body: (UnsafePointer<UInt8>, Int) throws -> T) rethrows -> T {
    try data.withUnsafeBytes { raw in
        if let base = raw.bindMemory(to: UInt8.self).baseAddress {
            return try body(base, raw.count)
        }
        var zero: UInt8 = 0
        return try body(&zero, 0)
    }
}
