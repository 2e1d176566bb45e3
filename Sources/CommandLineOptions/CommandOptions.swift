import Foundation
import Kafka

/// Parsed `--name value` options (repeatable) and positional arguments, for `iapctl` and `iap-harness`.
public struct CommandOptions {
    public private(set) var values: [String: [String]] = [:]
    public private(set) var flags: Set<String> = []
    public private(set) var positional: [String] = []

    /// - Parameters:
    ///   - valued: options that take a value (`--name value` or `--name=value`).
    ///   - flags: options without a value.
    public init(_ arguments: [String], valued: Set<String>, flags allowedFlags: Set<String> = []) throws {
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("--"), argument != "-" else {
                positional.append(argument)
                continue
            }
            var name = argument
            var value: String?
            if let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                value = String(argument[argument.index(after: equals)...])
            }
            if allowedFlags.contains(name) && value == nil {
                flags.insert(name)
            } else if valued.contains(name) {
                if value == nil {
                    guard index < arguments.count else { throw UsageError("\(name) needs a value") }
                    value = arguments[index]
                    index += 1
                }
                values[name, default: []].append(value!)
            } else {
                throw UsageError("unknown option \(name)")
            }
        }
    }

    public func string(_ name: String) -> String? { values[name]?.last }

    public func int(_ name: String) throws -> Int? {
        guard let text = string(name) else { return nil }
        guard let value = Int(text) else { throw UsageError("\(name) expects a number, got '\(text)'") }
        return value
    }

    /// The option's whole number, refused with the range it takes when outside `range` (nil when absent).
    public func int(_ name: String, in range: ClosedRange<Int>) throws -> Int? {
        guard let value = try int(name) else { return nil }
        guard range.contains(value) else { throw UsageError("\(name) takes a whole number from \(range.lowerBound) to \(range.upperBound), got \(value)") }
        return value
    }

    /// What a tool's usage says of `kafkaConfiguration`.
    public static let kafkaSettingsHelp = """
        Kafka settings: KAFKA_BOOTSTRAP_SERVERS and any KAFKA_<PROPERTY> environment variable
        (dots as underscores), overridden by --brokers and --kafka key=value.
        """

    /// Kafka properties: environment, then `--brokers`, then `--kafka key=value`.
    public func kafkaConfiguration(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> KafkaConfiguration {
        var configuration = KafkaConfiguration.fromEnvironment(environment)
        if let brokers = string("--brokers") { configuration.bootstrapServers = brokers }
        try configuration.apply(settings: values["--kafka"] ?? [])
        if configuration.bootstrapServers == nil {
            throw UsageError("no Kafka brokers: set --brokers or KAFKA_BOOTSTRAP_SERVERS")
        }
        return configuration
    }
}

/// The text of a command's input: a file, or standard input for `-`.
public func readCommandInput(_ path: String) throws -> String {
    guard let text = String(data: try readCommandInputBytes(path), encoding: .utf8) else { throw UsageError("input is not UTF-8") }
    return text
}

/// The bytes of `path`, or of standard input for `-` (`InputLines` reads them a block at a time).
private func readCommandInputBytes(_ path: String) throws -> Data {
    if path == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
    guard let contents = FileManager.default.contents(atPath: path) else { throw UsageError("cannot read \(path)") }
    return contents
}

/// A command line that does not say what the command needs: reported with the usage, exit status 2.
public struct UsageError: Error {
    public let message: String
    public init(_ message: String) { self.message = message }
}

/// Runs one invocation of a command-line tool: its usage (status 2) without a command, or 0 for `help`; else the status
/// `command` answers for the command and the rest of the arguments. An error becomes a line on standard error, with the
/// usage and status 2 for a `UsageError` or an error `isUsageError` says is the caller's, else status 1.
public func runTool(_ name: String, usage: String, arguments: [String], isUsageError: (any Error) -> Bool = { _ in false },
                    _ command: (_ name: String, _ rest: [String]) async throws -> Int32) async -> Int32 {
    do {
        try KafkaLibrary.requireSupportedVersion()
        guard let first = arguments.first else {
            print(usage)
            return 2
        }
        if ["help", "--help", "-h"].contains(first) {
            print(usage)
            return 0
        }
        return try await command(first, Array(arguments.dropFirst()))
    } catch let error as UsageError {
        FileHandle.standardError.write(Data("\(name): \(error.message)\n\n\(usage)\n".utf8))
        return 2
    } catch {
        FileHandle.standardError.write(Data("\(name): \(error)\n".utf8))
        return isUsageError(error) ? 2 : 1
    }
}
