import Foundation

/// One documented setting, shared by name across the executables: `--flag`, `IAP_ENV`, or
/// `IAP_ENV=value` in a `--config` file. Precedence: flag > environment > config file > default.
public struct Setting: Sendable {
    public let flag: String
    public let environment: String
    public let defaultValue: String?
    public let help: String
    /// A switch: `--flag` alone means true.
    public let isSwitch: Bool
    /// May be given several times (flags) or comma-separated (environment).
    public let isList: Bool

    public init(_ flag: String, env: String, default defaultValue: String? = nil, help: String, isSwitch: Bool = false, isList: Bool = false) {
        self.flag = flag
        self.environment = env
        self.defaultValue = defaultValue
        self.help = help
        self.isSwitch = isSwitch
        self.isList = isList
    }
}

/// A setting that is missing or not valid; the message names it.
public struct SettingsError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Resolved settings of one process.
public struct Settings: Sendable {
    private var values: [String: [String]] = [:]
    public let definitions: [Setting]
    /// `--kafka key=value` (and `KAFKA_*` in the environment) pass through to librdkafka.
    public private(set) var kafkaSettings: [String] = []
    public private(set) var helpRequested = false

    public init(arguments: [String], environment: [String: String], definitions: [Setting]) throws {
        self.definitions = definitions
        var flagValues: [String: [String]] = [:]
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--help" || argument == "-h" {
                helpRequested = true
                continue
            }
            var name = argument
            var inline: String?
            if let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            if name == "--kafka" {
                guard let value = inline ?? (index < arguments.count ? arguments[index] : nil) else { throw SettingsError("--kafka needs key=value") }
                if inline == nil { index += 1 }
                kafkaSettings.append(value)
                continue
            }
            guard let setting = definitions.first(where: { $0.flag == name }) else { throw SettingsError("unknown option \(name) (see --help)") }
            if setting.isSwitch && inline == nil {
                flagValues[setting.flag, default: []].append("true")
                continue
            }
            guard let value = inline ?? (index < arguments.count ? arguments[index] : nil) else { throw SettingsError("\(name) needs a value") }
            if inline == nil { index += 1 }
            flagValues[setting.flag, default: []].append(value)
        }
        var file: [String: String] = [:]
        if let path = flagValues["--config"]?.last ?? environment["IAP_CONFIG"] {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { throw SettingsError("--config: cannot read \(path)") }
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
                guard let equals = trimmed.firstIndex(of: "=") else { throw SettingsError("--config \(path):\(number + 1): expected NAME=value") }
                file[String(trimmed[..<equals]).trimmingCharacters(in: .whitespaces)] = String(trimmed[trimmed.index(after: equals)...]).trimmingCharacters(in: .whitespaces)
            }
        }
        for setting in definitions {
            if let fromFlags = flagValues[setting.flag] {
                values[setting.flag] = fromFlags
            } else if let fromEnvironment = environment[setting.environment] ?? file[setting.environment] {
                values[setting.flag] = setting.isList ? fromEnvironment.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) } : [fromEnvironment]
            } else if let fallback = setting.defaultValue {
                values[setting.flag] = [fallback]
            }
        }
    }

    public func string(_ flag: String) -> String? { values[flag]?.last }
    public func list(_ flag: String) -> [String] { values[flag] ?? [] }
    public func flag(_ flag: String) -> Bool { ["true", "1", "yes"].contains(values[flag]?.last?.lowercased() ?? "") }

    /// A setting that is true or false (also 1/0, yes/no); nil when unset and without a default.
    public func boolean(_ flag: String) throws -> Bool? {
        switch string(flag)?.lowercased() {
        case nil: return nil
        case "true", "1", "yes": return true
        case "false", "0", "no": return false
        case let other?: throw SettingsError("\(flag) (\(environmentName(flag))) must be true or false, got '\(other)'")
        }
    }

    public func required(_ flag: String) throws -> String {
        guard let value = string(flag), !value.isEmpty else { throw SettingsError("\(flag) (\(environmentName(flag))) is required") }
        return value
    }

    public func int(_ flag: String) throws -> Int? {
        guard let text = string(flag) else { return nil }
        guard let value = Int(text) else { throw SettingsError("\(flag) (\(environmentName(flag))) must be a whole number, got '\(text)'") }
        return value
    }

    public func seconds(_ flag: String) throws -> Double? {
        guard let text = string(flag) else { return nil }
        // Finite and at most ten years: every use converts it to integer milliseconds, which must not trap.
        guard let value = Double(text), value.isFinite, (0...315_360_000).contains(value) else {
            throw SettingsError("\(flag) (\(environmentName(flag))) must be a number of seconds (0 to ten years), got '\(text)'")
        }
        return value
    }

    private func environmentName(_ flag: String) -> String { definitions.first { $0.flag == flag }?.environment ?? "" }

    /// `--help` text: every setting with its environment name and default.
    public static func help(command: String, summary: String, definitions: [Setting]) -> String {
        var lines = ["usage: \(command) [options]", "", summary, "", "options (flag / environment variable, default):"]
        for setting in definitions {
            let value = setting.isSwitch ? "" : " VALUE"
            lines.append("  \(setting.flag)\(value)  /  \(setting.environment)\(setting.defaultValue.map { "  (default: \($0))" } ?? "")")
            lines.append("      \(setting.help)")
        }
        lines.append("  --kafka key=value  /  KAFKA_<PROPERTY>")
        lines.append("      any librdkafka property (dots as underscores in the environment), e.g. security.protocol=SASL_SSL")
        lines.append("  --help")
        lines.append("")
        lines.append("Flags override the environment, which overrides the --config file (NAME=value lines with the environment names).")
        return lines.joined(separator: "\n")
    }
}
