import Foundation
import Synchronization

/// JSON-lines logging to standard error: one object per line with `ts`, `level`, `stage`, `msg` and
/// the fields given (topic, partition, offset, transaction id, …). Payloads are never passed in, and secrets appear only
/// as their `Fingerprint`: a field whose name says it holds one (`namesSecret`) is fingerprinted whatever its value, at
/// every level, and so is a `transactionId` or `originalTransactionId` that is a purchase token
/// (`Fingerprint.transactionId`).
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable, CustomStringConvertible {
        case debug, info, warning, error
        public static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
        public var description: String { ["debug", "info", "warning", "error"][rawValue] }
    }

    public let stage: String
    public let minimum: Level
    private let sink: @Sendable (String) -> Void

    public init(stage: String, minimum: Level = .info, sink: (@Sendable (String) -> Void)? = nil) {
        self.stage = stage
        self.minimum = minimum
        self.sink = sink ?? { line in standardErrorLock.withLock { _ in FileHandle.standardError.write(Data((line + "\n").utf8)) } }
    }

    public func log(_ level: Level, _ message: String, _ fields: [String: any Sendable] = [:]) {
        guard level >= minimum else { return }
        var object: [String: Any] = ["ts": Date().timeIntervalSince1970, "level": level.description, "stage": stage, "msg": message]
        for (key, value) in fields {
            if value is Fingerprint {
                object[key] = "\(value)"
            } else if Self.namesSecret(key) {
                let text = "\(value)"
                object[key] = text.isEmpty ? text : Fingerprint(text).description
            } else if key == "transactionId" || key == "originalTransactionId", let id = value as? CustomStringConvertible {
                object[key] = Fingerprint.transactionId(id)
            } else {
                object[key] = value is String || value is Int || value is Int32 || value is Int64 || value is Bool || value is Double ? value : "\(value)"
            }
        }
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        sink(String(decoding: data, as: UTF8.self))
    }

    /// Whether a field named `key` holds a secret, by its name (any case): a token (`token`, `purchaseToken`,
    /// `appAccountToken`, an access token), an obfuscated account id, a signature, a receipt, a JWS or other signed data
    /// (`signedPayload`, `signedTransaction`, `purchaseData`), an `Authorization` header, a secret or a password.
    public static func namesSecret(_ key: String) -> Bool {
        let name = key.lowercased()
        return secretWords.contains { name.contains($0) }
    }

    private static let secretWords = ["token", "obfuscated", "signature", "signed", "receipt", "jws", "purchasedata", "authorization", "secret", "password"]

    public func debug(_ message: String, _ fields: [String: any Sendable] = [:]) { log(.debug, message, fields) }
    public func info(_ message: String, _ fields: [String: any Sendable] = [:]) { log(.info, message, fields) }
    public func warning(_ message: String, _ fields: [String: any Sendable] = [:]) { log(.warning, message, fields) }
    public func error(_ message: String, _ fields: [String: any Sendable] = [:]) { log(.error, message, fields) }
}

/// Lines from several threads must not interleave.
private let standardErrorLock = Mutex(())
