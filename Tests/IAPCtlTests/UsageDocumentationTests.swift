import Foundation
import Testing
import TestSupport

/// The README names the commands the tools have, and no other: each command of `iapctl help` and `iap-harness help`
/// is shown in the README as an invocation (`iapctl dlq …` in a code block or span), and every invocation the README
/// or a page under docs/ shows is a command of that tool.
@Suite struct UsageDocumentationTests {
    /// The commands a tool's usage lists: the lines indented by two spaces under `commands:`.
    static func commands(of tool: String) throws -> Set<String> {
        let (status, usage) = try runCommand(ExecutableProcess.binary(tool).path, ["help"])
        #expect(status == 0, "\(tool) help")
        let lines = usage.components(separatedBy: "\n")
        guard let start = lines.firstIndex(of: "commands:") else { return [] }
        return Set(lines[(start + 1)...].compactMap { line -> String? in
            guard line.hasPrefix("  "), !line.hasPrefix("   ") else { return nil }
            let word = line.dropFirst(2).prefix { $0.isLetter || $0 == "-" }
            return word.isEmpty ? nil : String(word)
        })
    }

    /// The commands the README shows `tool` run with: at the start of a code line, after a backtick, a `$ ` prompt or a
    /// build directory.
    static func invocations(of tool: String, in readme: String) -> Set<String> {
        var found: Set<String> = []
        for line in readme.components(separatedBy: "\n") {
            // What follows each place the tool is invoked from.
            var invoked: [Substring] = line.hasPrefix("\(tool) ") ? [line.dropFirst(tool.count + 1)] : []
            for marker in ["`", "$ ", "/"] {
                var rest = Substring(line)
                while let range = rest.range(of: marker + tool + " ") {
                    rest = rest[range.upperBound...]
                    invoked.append(rest)
                }
            }
            for arguments in invoked {
                let word = arguments.prefix { $0.isLetter || $0 == "-" }
                if !word.isEmpty { found.insert(String(word)) }
            }
        }
        return found
    }

    @Test(arguments: ["iapctl", "iap-harness"])
    func theReadmeShowsEveryCommandAndNoOther(_ tool: String) throws {
        let readme = try String(contentsOf: TestServices.packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let commands = try Self.commands(of: tool)
        #expect(!commands.isEmpty, "\(tool): no commands read from its usage")
        let shown = Self.invocations(of: tool, in: readme)
        #expect(commands.subtracting(shown).isEmpty, "\(tool) commands the README never shows: \(commands.subtracting(shown).sorted())")
        #expect(shown.subtracting(commands).isEmpty, "the README shows \(tool) commands it does not have: \(shown.subtracting(commands).sorted())")
        let docs = TestServices.packageRoot.appendingPathComponent("docs")
        for page in try FileManager.default.contentsOfDirectory(atPath: docs.path).filter({ $0.hasSuffix(".md") }).sorted() {
            let text = try String(contentsOf: docs.appendingPathComponent(page), encoding: .utf8)
            let shownThere = Self.invocations(of: tool, in: text)
            #expect(shownThere.subtracting(commands).isEmpty, "docs/\(page) shows \(tool) commands it does not have: \(shownThere.subtracting(commands).sorted())")
        }
    }
}
