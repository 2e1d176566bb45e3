import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreFixtures
import StoreVerification

/// The demo's App Store data, signed with its test PKI for the demo app in the sandbox: transactions, the apps'
/// submissions of them, and the store's notifications. The second and third acts build their stories from these.
struct DemoAppStoreData {
    let signer: JWSSigner
    /// When the submissions say they were made.
    let now: Date

    /// A signed transaction; `revokedAt` when the store refunded it, `expires` for a subscription period.
    func transaction(_ id: String, _ product: String, _ type: AppStoreProductType, original: String? = nil, purchased: Date, expires: Date? = nil,
                     revokedAt: Date? = nil, token: String? = nil) throws -> String {
        try signer.sign(AppStorePayloads.transaction(
            transactionId: id, originalTransactionId: original, productId: product, bundleId: DemoCommand.bundleId, environment: .sandbox, type: type,
            purchaseDate: purchased, appAccountToken: token, revocationDate: revokedAt,
            extra: expires.map { ["expiresDate": .integer(AppStorePayloads.milliseconds($0))] } ?? [:]))
    }

    /// The app's submission of a transaction it signs now, naming `token` as the user's account token if given.
    func submission(_ id: String, _ product: String, _ type: AppStoreProductType, user: UserID, purchased: Date, expires: Date? = nil,
                    token: String? = nil, source: SubmissionSource = .client) throws -> PurchaseSubmitted {
        PurchaseSubmitted(store: .appstore, kind: .signedTransaction,
                          signedTransaction: try transaction(id, product, type, purchased: purchased, expires: expires, token: token),
                          userId: user, submittedAt: now, source: source, appAccountToken: token.map { AccountToken($0) })
    }

    /// A notification's signed payload about `transaction`, signed by the store at `signedDate`.
    func notification(_ type: AppStoreNotificationType, subtype: String? = nil, transaction: String, renewalInfo: String? = nil,
                      signedDate: Date = Date()) throws -> String {
        try signer.sign(AppStorePayloads.notification(type: type, subtype: subtype, bundleId: DemoCommand.bundleId, appAppleId: nil, environment: .sandbox,
                                                      signedTransactionInfo: transaction, signedRenewalInfo: renewalInfo, signedDate: signedDate))
    }
}
