import Foundation
import InMemoryPurchaseStore
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import Testing
import WorkerRuntime

/// A deployment of two App Store apps that both sell a product `pack.small`: each purchase is verified as its app's,
/// recorded and announced with that app, and granted by that app's catalog.
@Suite struct SeveralAppsStageTests {
    static let pki = try! TestPKI.make()
    let codec = StageFixtures.codec
    let store = InMemoryPurchaseStore()
    let apps: AppDirectory
    let verifier: VerifierStage
    let granter: GranterStage

    init() throws {
        func catalog(_ currency: ItemCode, _ amount: Int64) throws -> ProductCatalog {
            try ProductCatalog(products: [.appstore: ["pack.small": .init(type: .consumable, currency: currency, amount: amount)]])
        }
        apps = try AppDirectory(apps: [.init(id: "coins-game", bundleIds: ["com.example.coins"], catalog: try catalog("coins", 100)),
                                       .init(id: "puzzle", bundleIds: ["com.example.puzzle"], catalog: try catalog("hints", 5))])
        let context = StageContext(codec: codec, logger: Logger(stage: "t", minimum: .error))
        verifier = VerifierStage(
            context: context, store: store,
            stores: StoreVerifiers(appStore: AppStoreVerifiers(signedData: try SignedDataVerifier(configuration: .init(
                trustedRoots: [Self.pki.root], apps: apps.apps.flatMap(\.bundleIds).map { AppStoreApp(bundleId: $0) }, environment: .sandbox)))),
            apps: apps)
        granter = GranterStage(context: context, store: store, apps: apps, clawBackDueRefunds: false)
    }

    func submission(_ id: String, bundle: String, user: UserID = "u-1") throws -> PurchaseSubmitted {
        let payload = AppStorePayloads.transaction(transactionId: id, productId: "pack.small", bundleId: bundle, type: .consumable)
        return PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: try JWSSigner(pki: Self.pki).sign(payload), userId: user,
                                 submittedAt: Date(), source: .client)
    }

    /// What the verifier answers, then what the granter answers each `purchase.verified` with.
    func verifyAndGrant(_ submission: PurchaseSubmitted) async throws -> (verified: [PurchaseVerifiedEvent], rejected: [PurchaseRejectedEvent], granted: [ItemGranted]) {
        let answer = try await verifier.handle(try StageFixtures.message(submission))
        let verified = StageFixtures.published(answer, as: PurchaseVerifiedEvent.self)
        var granted: [ItemGranted] = []
        for event in verified {
            granted += StageFixtures.published(try await granter.handle(try StageFixtures.message(event)), as: ItemGranted.self)
        }
        return (verified, StageFixtures.published(answer, as: PurchaseRejectedEvent.self), granted)
    }

    @Test func eachPurchaseIsGrantedByItsOwnAppsCatalog() async throws {
        let coins = try await verifyAndGrant(try submission("2000000001", bundle: "com.example.coins"))
        #expect(coins.verified.map(\.app) == ["coins-game"])
        #expect(coins.granted.map(\.app) == ["coins-game"])
        #expect(coins.granted.flatMap(\.items).map { "\($0.code)=\($0.amount ?? 0)" } == ["coins=100"])

        let puzzle = try await verifyAndGrant(try submission("2000000002", bundle: "com.example.puzzle"))
        #expect(puzzle.verified.map(\.app) == ["puzzle"])
        #expect(puzzle.granted.flatMap(\.items).map { "\($0.code)=\($0.amount ?? 0)" } == ["hints=5"])

        #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "2000000002"))?.app == "puzzle", "recorded with its app")
        #expect(try await store.balances(of: "u-1") == ["coins": 100, "hints": 5])
        #expect(try await store.holdings(of: "u-1").pending.map { "\($0.transactionId) \($0.app?.rawValue ?? "")" }.sorted()
                == ["2000000001 coins-game", "2000000002 puzzle"], "the read side names each unfinished purchase's app")
    }

    @Test func aPurchaseOfAnAppTheDeploymentDoesNotHaveIsRejected() async throws {
        let other = try await verifyAndGrant(try submission("2000000003", bundle: "com.example.other"))
        #expect(other.verified.isEmpty && other.granted.isEmpty)
        #expect(other.rejected.map(\.reason) == [RejectionReason.wrongBundleId.rawValue])
        #expect(other.rejected.first?.detail?.contains("one of 'com.example.coins', 'com.example.puzzle'") == true, "\(other.rejected)")
    }

    /// An event naming an app the deployment no longer has (its apps file changed under a backlog) is not granted by
    /// another app's catalog.
    @Test func anAppNoLongerConfiguredIsNotGrantedByAnothersCatalog() async throws {
        let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "2000000004"), userId: "u-2", productId: "pack.small",
                                    productType: .consumable, quantity: 1, purchaseTime: Date(), app: "retired")
        #expect(try await store.recordVerified(record, at: Date()) == .recorded)
        let event = PurchaseVerifiedEvent(store: .appstore, transactionId: "2000000004", productId: "pack.small", quantity: 1, userId: "u-2",
                                          source: .client, verifiedAt: Date(), app: "retired")
        let answer = try await granter.handle(try StageFixtures.message(event))
        #expect(StageFixtures.published(answer, as: ItemGranted.self).isEmpty)
        #expect(StageFixtures.published(answer, as: PurchaseRejectedEvent.self).map(\.reason) == ["unknownProduct"])
        #expect(try await store.balances(of: "u-2").isEmpty)
    }
}

/// A Production deployment takes the Sandbox purchases (App Review's, TestFlight's) of the apps whose entry accepts
/// them, and refuses the others' as it refuses any purchase of the wrong environment.
@Suite struct SandboxPerAppStageTests {
    @Test func sandboxPurchasesAreTakenOnlyForTheAppsThatAcceptThem() async throws {
        let pki = SeveralAppsStageTests.pki
        let catalog = try ProductCatalog(products: [.appstore: ["pack.small": .init(type: .consumable, currency: "coins", amount: 100)]])
        let apps = try AppDirectory(apps: [.init(id: "coins-game", bundleIds: ["com.example.coins"], catalog: catalog, acceptsSandbox: true),
                                           .init(id: "puzzle", bundleIds: ["com.example.puzzle"], catalog: catalog)])
        let identities = [AppStoreApp(bundleId: "com.example.coins", appAppleId: 1234567890), AppStoreApp(bundleId: "com.example.puzzle", appAppleId: 1234567891)]
        func verifier(_ environment: AppStoreEnvironment) throws -> SignedDataVerifier {
            try SignedDataVerifier(configuration: .init(trustedRoots: [pki.root], apps: identities, environment: environment))
        }
        let stage = VerifierStage(context: StageContext(codec: StageFixtures.codec, logger: Logger(stage: "t", minimum: .error)), store: InMemoryPurchaseStore(),
                                  stores: StoreVerifiers(appStore: AppStoreVerifiers(signedData: try verifier(.production), sandbox: (try verifier(.sandbox), nil),
                                                                                     sandboxByDefault: false)), apps: apps)
        func answer(_ id: String, bundle: String) async throws -> StageResult {
            let payload = AppStorePayloads.transaction(transactionId: id, productId: "pack.small", bundleId: bundle, environment: .sandbox, type: .consumable)
            return try await stage.handle(try StageFixtures.message(PurchaseSubmitted(
                store: .appstore, kind: .signedTransaction, signedTransaction: try JWSSigner(pki: pki).sign(payload), userId: "reviewer",
                submittedAt: Date(), source: .client)))
        }
        let coins = try await answer("3000000001", bundle: "com.example.coins")
        #expect(StageFixtures.published(coins, as: PurchaseVerifiedEvent.self).map { "\($0.app ?? "") \($0.environment ?? "")" } == ["coins-game Sandbox"])
        let puzzle = try await answer("3000000002", bundle: "com.example.puzzle")
        #expect(StageFixtures.published(puzzle, as: PurchaseVerifiedEvent.self).isEmpty)
        #expect(StageFixtures.published(puzzle, as: PurchaseRejectedEvent.self).map(\.reason) == [RejectionReason.wrongEnvironment.rawValue])
    }
}
