import Foundation
import JSON
import Testing
import TestSupport

/// What each product of the package links, read from the manifest as SwiftPM resolves it (`swift package
/// dump-package`): only `iap-harness` may reach `StoreFixtures`, the signer of Apple-shaped test data, so that no
/// production binary (and so not the container image, which builds the workers and `iapctl`) can make one.
@Suite struct ProductDependencyTests {
    /// Every product's target closure: product name → the targets it links, directly or through another target.
    static func closures() throws -> [String: Set<String>] {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("dump-package-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: scratch) }
        // A scratch path of its own: the running `swift test` holds the package's `.build`.
        let (status, output) = try runCommand("/usr/bin/env", ["swift", "package", "--scratch-path", scratch.path, "dump-package"],
                                              directory: TestServices.packageRoot)
        guard status == 0, let start = output.firstIndex(of: "{"),
              let manifest = JSONValue.parse(Array(output[start...].utf8))?.objectValue else {
            throw ManifestUnreadable(output: output)
        }
        var dependencies: [String: [String]] = [:]
        for target in manifest["targets"]?.arrayValue ?? [] {
            guard let object = target.objectValue, let name = object["name"]?.stringValue else { continue }
            // Each dependency is {"byName": [name, condition]}, {"target": [name, condition]} or {"product": [name, package, …]}.
            dependencies[name] = (object["dependencies"]?.arrayValue ?? []).compactMap { dependency in
                dependency.objectValue?.values.first?.arrayValue?.first?.stringValue
            }
        }
        var closures: [String: Set<String>] = [:]
        for product in manifest["products"]?.arrayValue ?? [] {
            guard let object = product.objectValue, let name = object["name"]?.stringValue else { continue }
            var reached = Set<String>()
            var pending = (object["targets"]?.arrayValue ?? []).compactMap(\.stringValue)
            while let target = pending.popLast() {
                guard reached.insert(target).inserted else { continue }
                pending += dependencies[target] ?? []
            }
            closures[name] = reached
        }
        return closures
    }

    struct ManifestUnreadable: Error, CustomStringConvertible {
        let output: String
        var description: String { "swift package dump-package: \(output.prefix(2_000))" }
    }

    @Test func onlyTheHarnessLinksTheTestSigner() throws {
        let closures = try Self.closures()
        // The walk sees through targets: the harness reaches the signer, and the workers reach the store code.
        #expect(closures["iap-harness"]?.contains("StoreFixtures") == true)
        #expect(closures["iap-verifier"]?.contains("StoreVerification") == true)
        for product in ["iapctl", "iap-verifier", "iap-granter", "iap-finisher", "iap-sweeper", "iap-ingest"] {
            #expect(closures[product] != nil, "\(product) is a product")
        }
        let linking = closures.filter { $0.key != "iap-harness" && $0.value.contains("StoreFixtures") }.map(\.key).sorted()
        #expect(linking.isEmpty, "production products linking the test signer: \(linking)")
    }
}
