import Foundation
import JSON
import Testing
import TestSupport

/// What each product of the package links, read from the manifest as SwiftPM resolves it (`swift package
/// dump-package`): only `iap-harness` may reach `StoreFixtures`, the signer of Apple-shaped test data, so that no
/// production binary (and so not the container image, which builds the workers and `iapctl`) can make one.
@Suite struct ProductDependencyTests {
    /// The manifest as SwiftPM resolves it: each target's direct dependencies and type (`regular`, `executable`, `system`,
    /// `test`), and each product's targets.
    static func manifest() async throws -> (dependencies: [String: [String]], types: [String: String], products: [String: [String]]) {
        try await dumped.value
    }

    /// Read once per test run, on a thread of its own: each read compiles the manifest (tens of seconds on a loaded
    /// machine), and the tests awaiting it must not hold the cooperative pool's threads meanwhile, which every other
    /// test running beside them needs.
    private static let dumped = Task { try await offPool { try dumpPackage() } }

    private static func dumpPackage() throws -> (dependencies: [String: [String]], types: [String: String], products: [String: [String]]) {
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
        var types: [String: String] = [:]
        for target in manifest["targets"]?.arrayValue ?? [] {
            guard let object = target.objectValue, let name = object["name"]?.stringValue else { continue }
            types[name] = object["type"]?.stringValue
            // Each dependency is {"byName": [name, condition]}, {"target": [name, condition]} or {"product": [name, package, …]}.
            dependencies[name] = (object["dependencies"]?.arrayValue ?? []).compactMap { dependency in
                dependency.objectValue?.values.first?.arrayValue?.first?.stringValue
            }
        }
        var products: [String: [String]] = [:]
        for product in manifest["products"]?.arrayValue ?? [] {
            guard let object = product.objectValue, let name = object["name"]?.stringValue else { continue }
            products[name] = (object["targets"]?.arrayValue ?? []).compactMap(\.stringValue)
        }
        return (dependencies, types, products)
    }

    /// Every product's target closure: product name → the targets it links, directly or through another target.
    static func closures() async throws -> [String: Set<String>] {
        let (dependencies, _, products) = try await manifest()
        var closures: [String: Set<String>] = [:]
        for (name, targets) in products {
            var reached = Set<String>()
            var pending = targets
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

    @Test func onlyTheHarnessLinksTheTestSigner() async throws {
        let closures = try await Self.closures()
        // The walk sees through targets: the harness reaches the signer, and the workers reach the store code.
        #expect(closures["iap-harness"]?.contains("StoreFixtures") == true)
        #expect(closures["iap-verifier"]?.contains("StoreVerification") == true)
        for product in ["iapctl", "iap-verifier", "iap-granter", "iap-finisher", "iap-sweeper", "iap-ingest", "iap-webhooks"] {
            #expect(closures[product] != nil, "\(product) is a product")
        }
        let linking = closures.filter { $0.key != "iap-harness" && $0.value.contains("StoreFixtures") }.map(\.key).sorted()
        #expect(linking.isEmpty, "production products linking the test signer: \(linking)")
    }

    /// The delivery runtime knows no purchase: it reaches neither the purchase domain, nor its events, store or stages. What a
    /// dead letter says is the stages' (`EventDeadLetters`), handed to the runner.
    @Test func theRuntimeReachesNothingOfPurchases() async throws {
        let runtime = try #require(try await Self.closures()["WorkerRuntime"], "WorkerRuntime is a product")
        #expect(runtime.contains("Kafka"), "the walk sees the runtime's dependencies")
        let purchases = runtime.intersection(["PurchaseDomain", "PurchaseEvents", "PurchaseStore", "Stages", "StoreVerification"]).sorted()
        #expect(purchases.isEmpty, "WorkerRuntime reaches \(purchases)")
    }

    /// Each C library is reached through the one module that wraps it (the C pointers stay in one place): no other
    /// target, the tools included, depends on it directly. Every C library of the manifest has its wrapper here.
    @Test func onlyItsWrapperReachesEachCLibrary() async throws {
        let wrappers = ["CRdKafka": "Kafka", "COpenSSL": "Crypto", "CLibPQ": "Database", "CSQLite": "Database", "CCurl": "HTTPClient",
                        "CSpawn": "ChildProcesses", "CMalloc": "WorkerApp"]
        let (dependencies, types, _) = try await Self.manifest()
        #expect(dependencies["Crypto"]?.contains("COpenSSL") == true, "the manifest's dependencies are read")
        #expect(Set(types.filter { $0.value == "system" }.keys) == Set(wrappers.keys), "each C library has one wrapper")
        for (library, wrapper) in wrappers {
            let reaching = dependencies.filter { $0.value.contains(library) }.map(\.key).sorted()
            #expect(reaching == [wrapper], "\(library) is reached by \(reaching), not by \(wrapper) alone")
        }
    }
}
