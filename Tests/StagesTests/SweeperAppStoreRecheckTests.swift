import Crypto
import Foundation
import InMemoryPurchaseStore
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import Testing
import WorkerRuntime

/// The sweeper asking the App Store (*Get Transaction Info*, a stand-in over real HTTP) about each due App Store purchase
/// before it flags one: refunded already, it is revoked instead; the store's answer is verified like any signed data;
/// nothing is decided while the store cannot be asked.
@Suite struct SweeperAppStoreRecheckTests {
    static let t0 = Date(timeIntervalSince1970: 1_765_000_000)
    static let now = t0.addingTimeInterval(2 * 86_400)
    let fixture: SweeperAppStoreFixture
    var store: InMemoryPurchaseStore { fixture.store }
    var cluster: KafkaMockCluster { fixture.cluster }
    var pki: TestPKI { fixture.pki }
    var api: AppStoreServerAPIStandIn { fixture.api }

    init() throws { fixture = try SweeperAppStoreFixture(name: "sweeper recheck") }

    func sweeper() throws -> SweeperService<ContinuousClock> { try fixture.sweeper(now: Self.now, batchSize: 2) }

    /// A due consumable, granted to user-1, that the store knows (signed by `signer`, refunded at `refundedAt`) or not.
    @discardableResult
    func due(_ id: TransactionID, knownToTheStore: Bool = true, refundedAt: Date? = nil, signer: TestPKI? = nil, unclaimed: Bool = false) async throws -> PurchaseKey {
        let key = PurchaseKey(store: .appstore, transactionId: id)
        let record = PurchaseRecord(key: key, userId: unclaimed ? .nobody : "user-1", productId: "coins.100", productType: .consumable, quantity: 1,
                                    purchaseTime: Self.t0, environment: AppStoreEnvironment.sandbox.rawValue)
        if unclaimed {
            _ = try await store.recordUnclaimed(record, at: Self.t0)
        } else {
            _ = try await store.recordVerified(record, at: Self.t0)
            _ = try await store.grant(key, items: [.currency("coins", 100)], at: Self.t0)
        }
        if knownToTheStore {
            var extra: [String: JSONValue] = [:]
            if refundedAt != nil { extra["revocationReason"] = .integer(0); extra["revocationType"] = .string("REFUND_FULL") }
            let signed = try JWSSigner(pki: signer ?? pki).sign(AppStorePayloads.transaction(
                transactionId: id.rawValue, productId: "coins.100", bundleId: StageFixtures.bundleID.rawValue, environment: .sandbox,
                purchaseDate: Self.t0, signedDate: Self.now, revocationDate: refundedAt, extra: extra))
            api.recordTransaction(signed, transactionId: id, originalTransactionId: id, customer: "customer-1", refunded: refundedAt != nil)
        }
        return key
    }

    /// Of five due purchases (more than a page), the two the store refunded are revoked, not flagged (an unclaimed charge
    /// among them, its revocation naming nobody); the one it does not know and the two it did not refund are flagged, once.
    @Test func aDuePurchaseTheStoreRefundedIsRevokedNotFlagged() async throws {
        let refunded = try await due("100001", refundedAt: Self.t0.addingTimeInterval(3600))
        let refundedUnclaimed = try await due("100002", refundedAt: Self.t0.addingTimeInterval(7200), unclaimed: true)
        let kept = [try await due("100003"), try await due("100004"), try await due("100005", knownToTheStore: false)]
        let sweeper = try sweeper()

        #expect(try await sweeper.sweepOnce() == 3)
        let states = try await store.states(of: kept + [refunded, refundedUnclaimed])
        #expect(kept.allSatisfy { states[$0] == .refundDue })
        #expect(states[refunded] == .granted && states[refundedUnclaimed] == .unclaimed, "left to the granter, which applies the revocation")
        let revocations = try await StageFixtures.events(PurchaseRevokedEvent.self, atLeast: 2, at: cluster.bootstrapServers).map(\.event)
        #expect(Set(revocations.map(\.transactionId)) == ["100001", "100002"])
        #expect(revocations.allSatisfy { $0.reason == .REFUND && $0.revocationDate != nil })
        #expect(revocations.first { $0.transactionId == "100001" }?.userId == "user-1")
        #expect(revocations.first { $0.transactionId == "100002" }?.userId == nil)
        let notices = try await StageFixtures.events(RefundDue.self, atLeast: 3, at: cluster.bootstrapServers).map(\.event)
        #expect(Set(notices.map(\.transactionId)) == Set(kept.map(\.transactionId)))
        #expect(api.requests.count { $0.hasPrefix("GET /inApps/v1/transactions/") } == 5, "each asked about once")
        #expect(sweeper.storeChecks == ["refunded": 2, "notRefunded": 2, "unknownToTheStore": 1])
    }

    /// While the API is down nothing is flagged nor revoked, and one page of asking ends the round; once it is back the
    /// next sweep decides.
    @Test func nothingIsDecidedWhileTheStoreCannotBeAsked() async throws {
        let keys = [try await due("200001"), try await due("200002"), try await due("200003")]
        api.fail(.init(status: 503))
        let sweeper = try sweeper()
        #expect(try await sweeper.sweepOnce() == 0)
        #expect(try await store.states(of: keys).values.allSatisfy { $0 == .granted })
        #expect(api.requests.count == 2, "a page none of which could be asked ends the round")
        #expect(sweeper.storeChecks == ["unavailable": 2], "what an alert watches")
        api.fail(nil)
        #expect(try await sweeper.sweepOnce() == 3)
    }

    /// An answer signed by another chain is not the store's: the purchase is neither flagged nor revoked on its word.
    @Test func anAnswerThatDoesNotVerifyDecidesNothing() async throws {
        let forged = try await due("300001", refundedAt: Self.now, signer: try SweeperAppStoreFixture.pki("forger"))
        let sweeper = try sweeper()
        #expect(try await sweeper.sweepOnce() == 0)
        #expect(try await store.states(of: [forged])[forged] == .granted)
        #expect(sweeper.storeChecks == ["untrusted": 1])
    }
}
