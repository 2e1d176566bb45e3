import Testing

/// The package's layers, as the manifest's target dependencies must keep them (read by `ProductDependencyTests.manifest()`):
/// each layer names the layers its targets may depend on, all below it (itself where its targets build on each other).
/// Test targets may depend on anything; every other target belongs to exactly one layer.
@Suite struct LayerTests {
    /// Lowest first.
    enum Layer: Int, Comparable, CaseIterable {
        case cLibraries, infrastructure, database, identifiers, domain, services, runtime, fixtures, stages, applications, harness,
             executables, testSupport

        static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    struct Rule {
        let layer: Layer
        let targets: Set<String>
        let mayUse: Set<Layer>
    }

    static let rules: [Rule] = [
        Rule(layer: .cLibraries, targets: ["CCurl", "CLibPQ", "CMalloc", "COpenSSL", "CRdKafka", "CSQLite", "CSpawn", "CTrapRecord"], mayUse: []),
        // Wrappers of the C libraries (which one may reach which library is `onlyItsWrapperReachesEachCLibrary`'s), and
        // modules of plain Swift beside them; JSONSchema builds on JSON.
        Rule(layer: .infrastructure, targets: ["ChildProcesses", "Crypto", "HTTPClient", "HTTPServer", "JSON", "JSONSchema", "Kafka", "Metrics", "RequestSigning"],
             mayUse: [.cLibraries, .infrastructure]),
        // The store's engine, apart from the rest of the infrastructure: the store reaches it, and what opens a store (the
        // applications, iapctl), never the stages.
        Rule(layer: .database, targets: ["Database"], mayUse: [.cLibraries]),
        Rule(layer: .identifiers, targets: ["Identifiers"], mayUse: []),
        // The domain core: no I/O, nothing but identifiers.
        Rule(layer: .domain, targets: ["PurchaseDomain"], mayUse: [.identifiers]),
        // Verification, store and events: each the domain over some infrastructure, none over another.
        Rule(layer: .services, targets: ["PurchaseEvents", "PurchaseStore", "StoreVerification"],
             mayUse: [.infrastructure, .database, .identifiers, .domain]),
        // Runs a stage (consumers, output order, parking, operations endpoints) without knowing purchases or their events.
        // Its one C module is its own (CTrapRecord: the signal handler that records a trap).
        Rule(layer: .runtime, targets: ["WorkerRuntime"], mayUse: [.cLibraries, .infrastructure, .identifiers]),
        // Apple-shaped signed data and stand-in store APIs, made with what verification checks them with.
        Rule(layer: .fixtures, targets: ["StoreFixtures"], mayUse: [.infrastructure, .identifiers, .domain, .services]),
        // The four stages: the store through PurchaseDomain's repository protocols, never the database beneath it.
        Rule(layer: .stages, targets: ["Stages"], mayUse: [.infrastructure, .identifiers, .domain, .services, .runtime]),
        // What the executables run: the workers' start-up, iap-ingest's API, the tools' options.
        Rule(layer: .applications, targets: ["CommandLineOptions", "Ingest", "WorkerApp"],
             mayUse: [.cLibraries, .infrastructure, .database, .identifiers, .domain, .services, .runtime, .stages, .applications]),
        // The pipeline on stand-in stores, for developers and CI (that no production product links it is ProductDependencyTests').
        Rule(layer: .harness, targets: ["PipelineHarness"], mayUse: [.infrastructure, .identifiers, .domain, .services, .runtime, .fixtures]),
        Rule(layer: .executables, targets: ["iap-finisher", "iap-granter", "iap-harness", "iap-ingest", "iap-sweeper", "iap-verifier", "iap-webhooks", "iapctl"],
             mayUse: [.infrastructure, .database, .identifiers, .domain, .services, .runtime, .fixtures, .stages, .applications, .harness]),
        // What tests share: services to start, test data, a repository in memory, the stages' fixtures. No product links it.
        Rule(layer: .testSupport, targets: ["InMemoryPurchaseStore", "StageTestSupport", "TestData", "TestSupport"],
             mayUse: [.infrastructure, .database, .identifiers, .domain, .services, .runtime]),
    ]

    /// A dependency of `target` on `dependency`.
    struct Edge: Hashable, CustomStringConvertible {
        let target: String
        let dependency: String
        var description: String { "\(target) → \(dependency)" }
    }

    /// Dependencies that break the rules and are being removed: each is allowed until it goes, then its entry goes too (a
    /// warning says when), so that the rules keep it from coming back. A new violation is fixed, not listed here.
    static let knownExceptions: Set<Edge> = []

    /// The dependencies of targets that are not tests that the rules refuse (all of a target without a layer).
    static func violations(_ dependencies: [String: [String]], types: [String: String]) -> Set<Edge> {
        let layers = Dictionary(rules.flatMap { rule in rule.targets.map { ($0, rule.layer) } }, uniquingKeysWith: { first, _ in first })
        let mayUse = Dictionary(uniqueKeysWithValues: rules.map { ($0.layer, $0.mayUse) })
        var violations = Set<Edge>()
        for (target, targetDependencies) in dependencies where types[target] != "test" {
            let allowed = layers[target].flatMap { mayUse[$0] } ?? []
            for dependency in targetDependencies where !(layers[dependency].map(allowed.contains) ?? false) {
                violations.insert(Edge(target: target, dependency: dependency))
            }
        }
        return violations
    }

    @Test func everyTargetButTheTestsHasOneLayerAndEachLayerUsesOnlyLayersBelowIt() async throws {
        let (_, types, _) = try await ProductDependencyTests.manifest()
        #expect(Self.rules.map(\.layer) == Layer.allCases, "one rule per layer, lowest first")
        for rule in Self.rules {
            let above = rule.mayUse.filter { $0 > rule.layer }
            #expect(above.isEmpty, "\(rule.layer) may use \(above), above it")
        }
        let listed = Self.rules.flatMap(\.targets)
        #expect(listed.count == Set(listed).count, "a target in two layers: \(listed)")
        let targets = Set(types.filter { $0.value != "test" }.keys)
        #expect(targets.contains("PurchaseDomain"), "the manifest's targets are read")
        #expect(targets.subtracting(listed).isEmpty, "targets without a layer: \(targets.subtracting(listed).sorted())")
        #expect(Set(listed).subtracting(targets).isEmpty, "layers name targets the manifest does not have: \(Set(listed).subtracting(targets).sorted())")
    }

    /// No target depends on one of a layer its own may not use, but for the known exceptions.
    @Test func eachTargetDependsOnlyOnLayersItsOwnMayUse() async throws {
        let (dependencies, types, _) = try await ProductDependencyTests.manifest()
        let violations = Self.violations(dependencies, types: types)
        let new = violations.subtracting(Self.knownExceptions).map(\.description).sorted()
        #expect(new.isEmpty, "dependencies across the layers: \(new)")
        let gone = Self.knownExceptions.subtracting(violations).map(\.description).sorted()
        if !gone.isEmpty {
            Issue.record("known exceptions no longer in the manifest: remove them from LayerTests.knownExceptions: \(gone)", severity: .warning)
        }
    }

    /// The rules themselves tell a dependency that breaks them: the known exceptions do, and so do edges that would put a
    /// layer over one above it, the domain over anything but identifiers, the stages over the database, one service over
    /// another, or a module over an executable or test support.
    @Test func theRulesRefuseWhatTheyAreFor() async throws {
        let (_, types, _) = try await ProductDependencyTests.manifest()
        let refused: [Edge] = Array(Self.knownExceptions) + [
            Edge(target: "PurchaseDomain", dependency: "JSON"),
            Edge(target: "Kafka", dependency: "WorkerRuntime"),
            Edge(target: "Stages", dependency: "Database"),
            Edge(target: "WorkerRuntime", dependency: "PurchaseEvents"),
            Edge(target: "PurchaseStore", dependency: "PurchaseEvents"),
            Edge(target: "WorkerApp", dependency: "iapctl"),
            Edge(target: "Stages", dependency: "TestSupport"),
        ]
        for edge in refused {
            #expect(Self.violations([edge.target: [edge.dependency]], types: types) == [edge], "\(edge) is refused")
        }
        #expect(Self.violations(["Stages": ["PurchaseStore", "WorkerRuntime"]], types: types).isEmpty, "the stages over the store and the runtime")
    }

    /// The domain core links nothing but identifiers, through any target.
    @Test func theDomainCoreReachesNothingButIdentifiers() async throws {
        let (dependencies, _, _) = try await ProductDependencyTests.manifest()
        var reached = Set<String>()
        var pending = dependencies["PurchaseDomain"] ?? []
        while let target = pending.popLast() {
            guard reached.insert(target).inserted else { continue }
            pending += dependencies[target] ?? []
        }
        #expect(reached == ["Identifiers"])
    }

    /// An executable is a program, not a module: no target but a test depends on one.
    @Test func noTargetButATestDependsOnAnExecutable() async throws {
        let (dependencies, types, _) = try await ProductDependencyTests.manifest()
        #expect(types.values.contains("executable"), "the manifest's types are read")
        let onExecutables = dependencies.filter { types[$0.key] != "test" }
            .flatMap { target, dependencies in dependencies.filter { types[$0] == "executable" }.map { "\(target) → \($0)" } }
        #expect(onExecutables.isEmpty, "\(onExecutables.sorted())")
    }
}
