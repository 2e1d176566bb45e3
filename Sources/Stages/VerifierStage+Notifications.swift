import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification
import WorkerRuntime

/// `store.notification`: each store's notifications handled by its own code (`Stores/<store>/`): verified, recorded as
/// handled (so that a reconciliation pass over the store's history knows it arrived) and turned into what they mean for
/// the purchase they are about; and what every store's notifications share.
extension VerifierStage {
    func handle(_ received: StoreNotificationReceived) async throws -> StageResult {
        switch received.store {
        case .appstore: return try await handleAppStore(received)
        case .googleplay: return try await handleGooglePlay(received)
        case .appcoins: return .deadLetter(reason: "notificationRejected", detail: "AppCoins sends no notifications this pipeline takes")
        case .stripe: return try await handleStripe(received)
        }
    }

    /// A charge a store announced (`purchase`, verified): recorded and answered like a submission (`submission` of its
    /// user) for the user who owns its subscription (or purchase), or else the user its account token belongs to (known
    /// from a purchase bound to it). One nobody is known for is recorded unclaimed: the app's submission claims it, or its
    /// deadline flags it (the user paid and received nothing).
    func recordAnnouncedCharge(_ purchase: VerifiedPurchase, announcedAs kind: String,
                               submission: (UserID) -> PurchaseSubmitted) async throws -> StageResult {
        var owner = try await store.owner(store: purchase.store, originalTransactionId: purchase.originalTransactionId ?? purchase.transactionId)
        if owner == nil, let token = purchase.appAccountToken { owner = try await store.owner(ofAccountToken: token) }
        let submission = submission(owner ?? .nobody)
        guard owner == nil else { return .publish(try await record([purchase], for: submission, byTheStore: true)) }
        let outcome = try await store.recordUnclaimed(purchaseRecord(purchase, type: productType(of: purchase, for: submission), for: submission), at: context.now())
        context.logger.info("charge nobody claimed yet: kept for the app's submission", ["transactionId": purchase.transactionId, "type": kind,
                                                                                        "outcome": "\(outcome)"])
        return .publish([])
    }
}

extension VerifierStage {
    /// `user.token`: the account token the app's backend made for a user; a charge the store announces with it goes to
    /// them (`recordCharge`). Another user's token is refused: dead-lettered, nothing recorded.
    func register(_ registration: UserAccountTokenRegistered) async throws -> StageResult {
        let owner = try await store.registerAccountToken(registration.appAccountToken, for: registration.userId, at: context.now())
        guard owner == registration.userId else {
            context.logger.warning("account token of another user not registered", ["userId": registration.userId])
            return .deadLetter(reason: "accountTokenOfAnotherUser", detail: "this account token is bound to another user; the first registration stands")
        }
        return .publish([])
    }
}
