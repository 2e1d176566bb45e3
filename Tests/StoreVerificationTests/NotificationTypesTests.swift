import Foundation
import JSON
import PurchaseDomain
import StoreFixtures
import StoreVerification
import Testing

/// Every notification type and subtype the App Store documents (App Store Server Notifications V2, `notificationType`
/// and `subtype`), each signed in the shape Apple sends it: the app's identity in `data`, `summary`, `appData` or
/// `externalPurchaseToken`. None may be refused: a refused notification is dead-lettered, and what it said is lost.
@Suite struct NotificationTypesTests {
    /// Where a notification of a type carries the app's identity.
    enum Shape { case transaction, subscription, bare, summary, appData, externalPurchaseToken }

    static let documented: [(type: String, subtype: String?, shape: Shape, action: NotificationAction)] = [
        ("CONSUMPTION_REQUEST", nil, .transaction, .reportConsumption),
        ("DID_CHANGE_RENEWAL_PREF", "UPGRADE", .subscription, .recordPurchase),
        ("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", .subscription, .logOnly),
        ("DID_CHANGE_RENEWAL_PREF", nil, .subscription, .logOnly),
        ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED", .subscription, .logOnly),
        ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", .subscription, .logOnly),
        ("DID_FAIL_TO_RENEW", "GRACE_PERIOD", .subscription, .extendIntoGracePeriod),
        ("DID_FAIL_TO_RENEW", nil, .subscription, .logOnly),
        ("DID_RENEW", "BILLING_RECOVERY", .subscription, .recordPurchase),
        ("DID_RENEW", nil, .subscription, .recordPurchase),
        ("EXPIRED", "VOLUNTARY", .subscription, .endEntitlement),
        ("EXPIRED", "BILLING_RETRY", .subscription, .endEntitlement),
        ("EXPIRED", "PRICE_INCREASE", .subscription, .endEntitlement),
        ("EXPIRED", "PRODUCT_NOT_FOR_SALE", .subscription, .endEntitlement),
        ("EXTERNAL_PURCHASE_TOKEN", "UNREPORTED", .externalPurchaseToken, .logOnly),
        ("EXTERNAL_PURCHASE_TOKEN", "ACTIVE_TOKEN_REMINDER", .externalPurchaseToken, .logOnly),
        ("GRACE_PERIOD_EXPIRED", nil, .subscription, .endEntitlement),
        ("METADATA_UPDATE", nil, .subscription, .logOnly),
        ("MIGRATION", nil, .subscription, .logOnly),
        ("OFFER_REDEEMED", "INITIAL_BUY", .subscription, .recordPurchase),
        ("OFFER_REDEEMED", "RESUBSCRIBE", .subscription, .recordPurchase),
        ("OFFER_REDEEMED", "UPGRADE", .subscription, .recordPurchase),
        ("OFFER_REDEEMED", "DOWNGRADE", .subscription, .recordPurchase),
        ("OFFER_REDEEMED", nil, .subscription, .recordPurchase),
        ("ONE_TIME_CHARGE", nil, .transaction, .recordPurchase),
        ("PRICE_CHANGE", nil, .subscription, .logOnly),
        ("PRICE_INCREASE", "PENDING", .subscription, .logOnly),
        ("PRICE_INCREASE", "ACCEPTED", .subscription, .logOnly),
        ("REFUND", nil, .transaction, .revokeGrant),
        ("REFUND_DECLINED", nil, .transaction, .recordDecision),
        ("REFUND_REVERSED", nil, .transaction, .restoreGrant),
        ("RENEWAL_EXTENDED", nil, .subscription, .recordPurchase),
        ("RENEWAL_EXTENSION", "SUMMARY", .summary, .logOnly),
        ("RENEWAL_EXTENSION", "FAILURE", .subscription, .logOnly),
        ("RESCIND_CONSENT", nil, .appData, .logOnly),
        ("REVOKE", nil, .transaction, .revokeGrant),
        ("SUBSCRIBED", "INITIAL_BUY", .subscription, .recordPurchase),
        ("SUBSCRIBED", "RESUBSCRIBE", .subscription, .recordPurchase),
        ("TEST", nil, .bare, .acknowledgeTest),
    ]

    @Test func theListCoversEveryDocumentedType() {
        #expect(Set(Self.documented.map(\.type)).count == 23)
        #expect(Set(Self.documented.map { "\($0.type)/\($0.subtype ?? "")" }).count == Self.documented.count)
    }

    @Test(arguments: Self.documented.indices)
    func everyDocumentedPairVerifies(_ index: Int) throws {
        let (type, subtype, shape, action) = Self.documented[index]
        let signed = try JWSSigner(pki: sharedPKI).sign(try Self.payload(type: type, subtype: subtype, shape: shape))
        let verdict = try verifier().verifyNotification(signed)
        let notification = try #require(verdict.value, "\(type)/\(subtype ?? "-") refused: \(String(describing: verdict.rejection))")
        #expect(notification.notificationType.rawValue == type)
        #expect(notification.subtype == subtype)
        #expect(notification.bundleId == BundleID(bundleId) && notification.environment == .sandbox)
        #expect(notification.action == action, "\(type)/\(subtype ?? "-")")
        switch shape {
        case .transaction, .subscription: #expect(notification.transaction?.transactionId == "2000000000000042")
        case .appData: #expect(notification.appTransaction?.bundleId == BundleID(bundleId))
        case .bare, .summary, .externalPurchaseToken: #expect(notification.transaction == nil)
        }
        if shape == .subscription { #expect(notification.renewalInfo?.originalTransactionId == "2000000000000040") }
    }

    /// `RESCIND_CONSENT` names its app in `appData`: another app's, or an app transaction signed by someone else, is refused.
    @Test func aRescindConsentIsCheckedLikeAnyOther() throws {
        let signer = JWSSigner(pki: sharedPKI)
        var payload = try Self.payload(type: "RESCIND_CONSENT", subtype: nil, shape: .appData)
        payload["appData"] = .object(["bundleId": .string("com.other.app"), "environment": .string("Sandbox"), "appAppleId": .integer(appAppleId),
                                      "signedAppTransactionInfo": .string(try signer.sign(Self.appTransaction(bundle: "com.other.app")))])
        #expect(try verifier().verifyNotification(try signer.sign(payload)).rejection?.reason == .wrongBundleId)

        let forger = JWSSigner(pki: try TestPKI.make(name: "forger"))
        payload["appData"] = .object(["bundleId": .string(bundleId), "environment": .string("Sandbox"), "appAppleId": .integer(appAppleId),
                                      "signedAppTransactionInfo": .string(try forger.sign(Self.appTransaction(bundle: bundleId)))])
        #expect(try verifier().verifyNotification(try signer.sign(payload)).rejection?.reason == .untrustedChain)
    }

    /// A prorated refund says how much went back: the type and the share (in thousandths of a percent) are read.
    @Test func aRefundsTypeAndShareAreRead() throws {
        let payload = transactionPayload(extra: ["revocationDate": .integer(AppStorePayloads.milliseconds(Date())), "revocationReason": .integer(0),
                                                 "revocationType": .string("REFUND_PRORATED"), "revocationPercentage": .integer(67_932)])
        let transaction = try #require(try verifier().verifyTransaction(try signedTransaction(sharedPKI, payload)).value)
        #expect(transaction.revocationType == "REFUND_PRORATED")
        #expect(transaction.revocationPercentage == 67_932)
        let full = try #require(try verifier().verifyTransaction(try signedTransaction()).value)
        #expect(full.revocationType == nil && full.revocationPercentage == nil)
    }

    static func payload(type: String, subtype: String?, shape: Shape) throws -> [String: JSONValue] {
        let signer = JWSSigner(pki: sharedPKI)
        let now = AppStorePayloads.milliseconds(Date())
        var payload: [String: JSONValue] = ["notificationType": .string(type), "notificationUUID": .string(UUID().uuidString.lowercased()),
                                            "version": .string("2.0"), "signedDate": .integer(now)]
        if let subtype { payload["subtype"] = .string(subtype) }
        let identity: [String: JSONValue] = ["bundleId": .string(bundleId), "environment": .string("Sandbox"), "appAppleId": .integer(appAppleId)]
        switch shape {
        case .transaction, .subscription, .bare:
            var data = identity.merging(["bundleVersion": .string("1")]) { $1 }
            if shape != .bare {
                let transaction = AppStorePayloads.transaction(
                    transactionId: "2000000000000042", originalTransactionId: shape == .subscription ? "2000000000000040" : nil, productId: "pass.monthly",
                    bundleId: bundleId, type: shape == .subscription ? .autoRenewable : .consumable)
                data["signedTransactionInfo"] = .string(try signer.sign(transaction))
            }
            if shape == .subscription {
                data["signedRenewalInfo"] = .string(try signer.sign(AppStorePayloads.renewalInfo(originalTransactionId: "2000000000000040", productId: "pass.monthly")))
                data["status"] = .integer(1)
            }
            payload["data"] = .object(data)
        case .summary:
            payload["summary"] = .object(identity.merging([
                "requestIdentifier": .string(UUID().uuidString.lowercased()), "productId": .string("pass.monthly"),
                "storefrontCountryCodes": .array([.string("USA")]), "succeededCount": .integer(120), "failedCount": .integer(2),
            ]) { $1 })
        case .appData:
            payload["appData"] = .object(identity.merging(["signedAppTransactionInfo": .string(try signer.sign(appTransaction(bundle: bundleId)))]) { $1 })
        case .externalPurchaseToken:
            payload["externalPurchaseToken"] = .object(["externalPurchaseId": .string("SANDBOX_0a1b2c3d-58d4-4a0e-9f41-3c2a1b0d9e88"),
                                                        "tokenCreationDate": .integer(now), "appAppleId": .integer(appAppleId), "bundleId": .string(bundleId)])
        }
        return payload
    }

    static func appTransaction(bundle: String) -> [String: JSONValue] {
        ["bundleId": .string(bundle), "appAppleId": .integer(appAppleId), "receiptType": .string("Sandbox"), "applicationVersion": .string("7"),
         "receiptCreationDate": .integer(AppStorePayloads.milliseconds(Date())), "originalPurchaseDate": .integer(AppStorePayloads.milliseconds(Date()))]
    }
}
