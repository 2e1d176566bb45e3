import Foundation
import Synchronization

/// JSON-lines logging to standard error: one object per line with `ts`, `level`, `stage`, `msg` and
/// the fields given (topic, partition, offset, transaction id, …). Payloads and secrets are never
/// passed in, so they are never logged.
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
        for (key, value) in fields { object[key] = value is String || value is Int || value is Int32 || value is Int64 || value is Bool || value is Double ? value : "\(value)" }
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        sink(String(decoding: data, as: UTF8.self))
    }

    public func debug(_ message: String, _ fields: [String: any Sendable] = [:]) { log(.debug, message, fields) }
    public func info(_ message: String, _ fields: [String: any Sendable] = [:]) { log(.info, message, fields) }
    public func warning(_ message: String, _ fields: [String: any Sendable] = [:]) { log(.warning, message, fields) }
    public func error(_ message: String, _ fields: [String: any Sendable] = [:]) { log(.error, message, fields) }
}

/// Lines from several threads must not interleave.
private let standardErrorLock = Mutex(())
