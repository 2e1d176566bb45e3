import Foundation
import Testing
import TestSupport

/// Tests/unit-tests.txt, what `make test-unit` runs: each line selects something, since a line that names nothing would
/// quietly run nothing (the run itself makes sure what it selects needs no service and starts no process).
@Suite struct UnitTestListTests {
    /// The list's lines, comments and blank lines left out.
    static func entries() throws -> [String] {
        try String(contentsOf: TestServices.packageRoot.appendingPathComponent("Tests/unit-tests.txt"), encoding: .utf8)
            .split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
    }

    /// Whether a Swift file of `directory` declares a type named `name`.
    static func declares(_ name: String, in directory: URL) throws -> Bool {
        let files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil).filter { $0.pathExtension == "swift" }
        let declaration = try Regex("(struct|class|enum|actor) \(name)\\b")
        return try files.contains { try String(contentsOf: $0, encoding: .utf8).contains(declaration) }
    }

    @Test func eachLineNamesATestTargetOrASuiteOfOne() async throws {
        let (_, types, _) = try await ProductDependencyTests.manifest()
        let entries = try Self.entries()
        #expect(entries.contains("PurchaseDomainTests"), "the list is read")
        #expect(entries.count == Set(entries).count, "a line twice: \(entries)")
        for entry in entries {
            let parts = entry.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            let target = parts[0]
            #expect(types[target] == "test", "\(entry): \(target) is not a test target")
            #expect(parts.count <= 2, "\(entry): Target or Target.Suite")
            guard parts.count == 2, types[target] == "test" else { continue }
            let suite = parts[1]
            let wholeTargetListed = entries.contains(target)
            #expect(!wholeTargetListed, "\(entry): its whole target is listed too")
            let declared = try Self.declares(suite, in: TestServices.packageRoot.appendingPathComponent("Tests/\(target)"))
            #expect(declared, "\(entry): no suite \(suite) in Tests/\(target)")
        }
    }
}
