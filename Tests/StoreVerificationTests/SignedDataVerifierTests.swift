import PurchaseDomain
import Crypto
import Foundation
import StoreFixtures
import StoreVerification
import Testing
import JSON

@Suite struct SignedDataVerifierTests {
    @Test func verifiesAValidTransactionAndKeepsUnknownFields() throws {
        let payload = transactionPayload(extra: ["type": .string("Future Product Kind"), "someNewField": .integer(7)])
        let transaction = try #require(try verifier().verifyTransaction(try signedTransaction(sharedPKI, payload)).value)
        #expect(transaction.transactionId == "2000000000000001")
        #expect(transaction.productId == "coins.100")
        #expect(transaction.bundleId == BundleID(bundleId))
        #expect(transaction.environment == .sandbox)
        #expect(transaction.quantity == 1)
        #expect(transaction.price == 990)
        #expect(transaction.currency == "USD")
        #expect(transaction.type?.rawValue == "Future Product Kind", "a value added by the store later still decodes")
        #expect(transaction.raw["someNewField"] == .integer(7))
        let purchase = VerifiedPurchase(transaction)
        #expect(purchase.store == .appstore && purchase.appAccountToken == "3f0a2f2e-8a7c-4c1e-9d57-000000000001")
    }

    @Test(arguments: ["", "abc", "a.b", "a.b.c.d", "!!!.e30.sig", "e30.!!!.sig", "bm90IGpzb24.e30.c2ln", "e30.bm90IGpzb24.c2ln"])
    func malformedJWSIsRejected(_ jws: String) throws {
        #expect(try verifier().verifyTransaction(jws).rejection?.reason == .malformedJWS)
    }

    @Test(arguments: ["none", "HS256", "ES384", "RS256"])
    func onlyES256IsAccepted(_ alg: String) throws {
        let jws = try signedTransaction(header: ["alg": .string(alg)])
        let rejection = try #require(try verifier().verifyTransaction(jws).rejection)
        #expect(rejection.reason == .unsupportedAlgorithm)
        #expect(!rejection.isRetryable)
    }

    @Test func missingX5CIsRejected() throws {
        #expect(try verifier().verifyTransaction(try signedTransaction(header: ["x5c": .null])).rejection?.reason == .missingX5C)
        #expect(try verifier().verifyTransaction(try signedTransaction(header: ["x5c": .string("MII")])).rejection?.reason == .missingX5C)
    }

    @Test func chainsOfOtherThanThreeCertificatesAreRejected() throws {
        let two = JSONValue.array(Array(sharedPKI.x5c.prefix(2)).map(JSONValue.string))
        let four = JSONValue.array((sharedPKI.x5c + [sharedPKI.x5c[2]]).map(JSONValue.string))
        #expect(try verifier().verifyTransaction(try signedTransaction(header: ["x5c": two])).rejection?.reason == .invalidChainLength)
        #expect(try verifier().verifyTransaction(try signedTransaction(header: ["x5c": four])).rejection?.reason == .invalidChainLength)
    }

    @Test func theChainThatVerifiesMustBeThreeLongWhateverX5CLists() throws {
        // A leaf the trusted root issued itself, listed with a decoy intermediate that carries the marker OID.
        let short = try TestPKI.make(.init(intermediateCount: 0), name: "short")
        let listed = JSONValue.array([short.leaf, sharedPKI.intermediate, short.root].map { .string($0.derRepresentation.base64EncodedString()) })
        let jws = try JWSSigner(pki: short).sign(transactionPayload(), header: ["x5c": listed])
        #expect(try verifier(short).verifyTransaction(jws).rejection?.reason == .invalidChainLength)
    }

    @Test func aChainFromAnUntrustedRootIsRejected() throws {
        let stranger = try TestPKI.make(name: "stranger")
        #expect(try verifier().verifyTransaction(try signedTransaction(stranger)).rejection?.reason == .untrustedChain)
        // The stranger's own root in x5c does not help: only configured roots are trusted.
        let mixed = JSONValue.array([stranger.x5c[0], stranger.x5c[1], sharedPKI.x5c[2]].map(JSONValue.string))
        #expect(try verifier().verifyTransaction(try signedTransaction(stranger, header: ["x5c": mixed])).rejection?.reason == .untrustedChain)
    }

    @Test func garbageCertificatesAreRejected() throws {
        let garbage = JSONValue.array(["AAAA", sharedPKI.x5c[1], sharedPKI.x5c[2]].map(JSONValue.string))
        #expect(try verifier().verifyTransaction(try signedTransaction(header: ["x5c": garbage])).rejection?.reason == .untrustedChain)
    }

    @Test func expiryIsCheckedAtSignedDateUnlessOnline() throws {
        // A chain that expired an hour ago; the transaction was signed while it was valid.
        let expired = try TestPKI.make(.init(validFrom: Date().addingTimeInterval(-86_400 * 30), validUntil: Date().addingTimeInterval(-3600)))
        let signedWhileValid = try signedTransaction(expired, transactionPayload(signedDate: Date().addingTimeInterval(-86_400)))
        #expect(try verifier(expired).verifyTransaction(signedWhileValid).value != nil)
        #expect(try verifier(expired, onlineChecks: true).verifyTransaction(signedWhileValid).rejection?.reason == .certificateExpired)
        // Signed (it claims) after expiry.
        let signedAfter = try signedTransaction(expired, transactionPayload(signedDate: Date()))
        #expect(try verifier(expired).verifyTransaction(signedAfter).rejection?.reason == .certificateExpired)
    }

    @Test func theCachedChainStillRespectsValidity() throws {
        let pki = try TestPKI.make(.init(validFrom: Date().addingTimeInterval(-86_400 * 30), validUntil: Date().addingTimeInterval(-3600)))
        let verifier = try verifier(pki)
        let valid = try signedTransaction(pki, transactionPayload(signedDate: Date().addingTimeInterval(-86_400)))
        #expect(verifier.verifyTransaction(valid).value != nil)
        #expect(verifier.verifyTransaction(valid).value != nil, "again, from the cache")
        let late = try signedTransaction(pki, transactionPayload(signedDate: Date()))
        #expect(verifier.verifyTransaction(late).rejection?.reason == .certificateExpired, "same x5c, outside the cached window")
    }

    @Test func appleMarkerOIDsAreRequired() throws {
        let noLeafOID = try TestPKI.make(.init(leafOID: false))
        let noIntermediateOID = try TestPKI.make(.init(intermediateOID: false))
        #expect(try verifier(noLeafOID).verifyTransaction(try signedTransaction(noLeafOID)).rejection?.reason == .missingAppleOID)
        #expect(try verifier(noIntermediateOID).verifyTransaction(try signedTransaction(noIntermediateOID)).rejection?.reason == .missingAppleOID)
    }

    @Test func aTamperedPayloadFailsTheSignature() throws {
        let jws = try signedTransaction()
        let parts = jws.split(separator: ".")
        let forged = Base64URL.encode(try JSONEncoder().encode(JSONValue.object(transactionPayload(productId: "coins.100000"))))
        let tampered = "\(parts[0]).\(forged).\(parts[2])"
        let rejection = try #require(try verifier().verifyTransaction(tampered).rejection)
        #expect(rejection.reason == .badSignature)
        #expect(!rejection.isRetryable)
    }

    @Test func aDERSignatureIsRejected() throws {
        let jws = try signedTransaction()
        let parts = jws.split(separator: ".")
        let raw = try #require(Base64URL.decode(parts[2]))
        #expect(raw.count == 64)
        // The same r and s, DER-encoded as OpenSSL would produce them.
        let der = Data(DER.sequence([DER.tlv(0x02, unsignedInteger(raw.prefix(32))), DER.tlv(0x02, unsignedInteger(raw.suffix(32)))]))
        let withDER = "\(parts[0]).\(parts[1]).\(Base64URL.encode(der))"
        #expect(try verifier().verifyTransaction(withDER).rejection?.reason == .badSignature)
    }

    @Test func bundleEnvironmentAndAppAreChecked() throws {
        #expect(try verifier().verifyTransaction(try signedTransaction(sharedPKI, transactionPayload(bundle: "com.other.app"))).rejection?.reason == .wrongBundleId)
        #expect(try verifier().verifyTransaction(try signedTransaction(sharedPKI, transactionPayload(environment: .production))).rejection?.reason == .wrongEnvironment)
        let notification = AppStorePayloads.notification(type: .refund, bundleId: bundleId, appAppleId: 42, environment: .production,
                                                         signedTransactionInfo: nil)
        let production = try verifier(environment: .production)
        #expect(production.verifyNotification(try JWSSigner(pki: sharedPKI).sign(notification)).rejection?.reason == .wrongAppAppleId)
    }

    /// An EXTERNAL_PURCHASE_TOKEN notification carries no environment field: its token's id says it (a sandbox one
    /// starts with "SANDBOX"), so each environment's verifier accepts its own tokens and refuses the other's.
    @Test func anExternalPurchaseTokensEnvironmentIsInItsId() throws {
        let (sandbox, production) = (try verifier(), try verifier(environment: .production))
        func signed(_ externalPurchaseId: String) throws -> String {
            try JWSSigner(pki: sharedPKI).sign([
                "notificationType": .string("EXTERNAL_PURCHASE_TOKEN"), "subtype": .string("UNREPORTED"), "notificationUUID": .string(UUID().uuidString.lowercased()),
                "version": .string("2.0"), "signedDate": .integer(AppStorePayloads.milliseconds(Date())),
                "externalPurchaseToken": .object(["externalPurchaseId": .string(externalPurchaseId), "appAppleId": .integer(appAppleId),
                                                  "bundleId": .string(bundleId), "tokenCreationDate": .integer(AppStorePayloads.milliseconds(Date()))]),
            ])
        }
        let (sandboxToken, productionToken) = (try signed("SANDBOX_7b2d1e0c-58d4-4a0e-9f41-3c2a1b0d9e88"), try signed("7b2d1e0c-58d4-4a0e-9f41-3c2a1b0d9e88"))
        #expect(sandbox.verifyNotification(sandboxToken).value?.environment == .sandbox)
        #expect(production.verifyNotification(productionToken).value?.environment == .production)
        #expect(sandbox.verifyNotification(productionToken).rejection?.reason == .wrongEnvironment)
        #expect(production.verifyNotification(sandboxToken).rejection?.reason == .wrongEnvironment)
    }

    @Test func aSignedPayloadWithoutRequiredFieldsIsMalformed() throws {
        var payload = transactionPayload()
        payload["transactionId"] = nil
        #expect(try verifier().verifyTransaction(try signedTransaction(sharedPKI, payload)).rejection?.reason == .malformedPayload)
        let notification: [String: JSONValue] = ["data": .object(["bundleId": .string(bundleId)])]
        #expect(try verifier().verifyNotification(try JWSSigner(pki: sharedPKI).sign(notification)).rejection?.reason == .malformedPayload)
    }

    /// Signed or not, the ids are outside input: one no event schema carries is refused here, naming the field and why.
    @Test func aSignedIdNoEventCarriesIsMalformed() throws {
        for (field, value, fault) in [("transactionId", "", "transactionId is empty"), ("productId", "coins\u{0}", "productId holds the control character U+0000"),
                                      ("originalTransactionId", String(repeating: "9", count: 513), "originalTransactionId is 513 characters long, more than 512")] {
            var payload = transactionPayload()
            payload[field] = .string(value)
            let rejection = try verifier().verifyTransaction(try signedTransaction(sharedPKI, payload)).rejection
            #expect(rejection?.reason == .malformedPayload && rejection?.detail.contains(fault) == true, "\(String(describing: rejection))")
        }
        #expect(try verifier().verifyTransaction(try signedTransaction(sharedPKI, transactionPayload())).rejection == nil, "the control")
    }

    /// A quantity no event carries (1 to 1000) is refused where the signed data is read, with a reason, not recorded for the
    /// store's `quantity > 0` check to refuse as a database error.
    @Test(arguments: [0, -3, 1001]) func aSignedQuantityNoEventCarriesIsMalformed(_ quantity: Int) throws {
        var payload = transactionPayload()
        payload["quantity"] = .integer(Int64(quantity))
        let rejection = try verifier().verifyTransaction(try signedTransaction(sharedPKI, payload)).rejection
        #expect(rejection?.reason == .malformedPayload && rejection?.detail.contains("quantity \(quantity)") == true, "\(String(describing: rejection))")
        payload["quantity"] = .integer(1000)
        #expect(try verifier().verifyTransaction(try signedTransaction(sharedPKI, payload)).rejection == nil)
    }

    @Test func productionRequiresAnAppAppleId() {
        #expect(throws: VerifierConfigurationError.self) { _ = try verifier(environment: .production, appAppleId: nil) }
    }

    @Test func unsignedXcodeDataIsAcceptedOnlyByAnXcodeVerifierWithThePermission() throws {
        let payload = transactionPayload(environment: .xcode)
        let header = Base64URL.encode(Data(#"{"alg":"none"}"#.utf8))
        let body = Base64URL.encode(try JSONEncoder().encode(JSONValue.object(payload)))
        let unsigned = "\(header).\(body)."
        #expect(try verifier(environment: .xcode, roots: [], allowsUnsignedTestData: true).verifyTransaction(unsigned).value?.environment == .xcode)
        #expect(try verifier(environment: .production).verifyTransaction(unsigned).rejection?.reason == .unsupportedAlgorithm)
        #expect(try verifier(environment: .sandbox).verifyTransaction(unsigned).rejection?.reason == .unsupportedAlgorithm)
    }

    @Test(arguments: [AppStoreEnvironment.xcode, .localTesting])
    func theEnvironmentAloneDoesNotTurnSignaturesOff(_ environment: AppStoreEnvironment) {
        // Without the permission such a verifier cannot be built, with roots or without.
        #expect(throws: VerifierConfigurationError.self) { _ = try verifier(environment: environment) }
        #expect(throws: VerifierConfigurationError.self) { _ = try verifier(environment: environment, roots: []) }
    }

    @Test(arguments: [AppStoreEnvironment.production, .sandbox])
    func thePermissionIsRefusedOutsideTestEnvironments(_ environment: AppStoreEnvironment) {
        #expect(throws: VerifierConfigurationError.self) { _ = try verifier(environment: environment, allowsUnsignedTestData: true) }
    }

    @Test func notificationsAreVerifiedWithTheirNestedTransaction() throws {
        let signer = JWSSigner(pki: sharedPKI)
        let transaction = try signer.sign(transactionPayload("2000000000000777"))
        let refund = AppStorePayloads.notification(type: .refund, bundleId: bundleId, appAppleId: appAppleId, signedTransactionInfo: transaction)
        let notification = try #require(try verifier().verifyNotification(try signer.sign(refund)).value)
        #expect(notification.notificationType == .refund)
        #expect(notification.action == .revokeGrant)
        #expect(notification.transaction?.transactionId == "2000000000000777")

        // A nested transaction signed by someone else fails the whole notification.
        let forgedInner = try JWSSigner(pki: try TestPKI.make(name: "forger")).sign(transactionPayload())
        let forged = AppStorePayloads.notification(type: .refund, bundleId: bundleId, appAppleId: appAppleId, signedTransactionInfo: forgedInner)
        #expect(try verifier().verifyNotification(try signer.sign(forged)).rejection?.reason == .untrustedChain)
    }

    @Test(arguments: [("REFUND", NotificationAction.revokeGrant), ("REVOKE", .revokeGrant), ("REFUND_REVERSED", .restoreGrant),
                      ("CONSUMPTION_REQUEST", .reportConsumption), ("ONE_TIME_CHARGE", .recordPurchase), ("TEST", .acknowledgeTest),
                      ("DID_RENEW", .recordPurchase), ("SUBSCRIBED", .recordPurchase), ("EXPIRED", .endEntitlement),
                      ("GRACE_PERIOD_EXPIRED", .endEntitlement), ("REFUND_DECLINED", .recordDecision),
                      ("RENEWAL_EXTENDED", .recordPurchase), ("DID_FAIL_TO_RENEW/GRACE_PERIOD", .extendIntoGracePeriod),
                      ("DID_FAIL_TO_RENEW", .logOnly), ("DID_CHANGE_RENEWAL_PREF/UPGRADE", .recordPurchase),
                      ("DID_CHANGE_RENEWAL_PREF/DOWNGRADE", .logOnly), ("OFFER_REDEEMED/UPGRADE", .recordPurchase),
                      ("SOMETHING_APPLE_ADDS_IN_2030", .logOnly)])
    func notificationTypesMapToActions(_ typeAndSubtype: String, _ action: NotificationAction) throws {
        let parts = typeAndSubtype.split(separator: "/").map(String.init)
        let type = parts[0]
        let payload = AppStorePayloads.notification(type: AppStoreNotificationType(rawValue: type), subtype: parts.dropFirst().first, bundleId: bundleId,
                                                    appAppleId: appAppleId, signedTransactionInfo: nil)
        let notification = try #require(try verifier().verifyNotification(try JWSSigner(pki: sharedPKI).sign(payload)).value)
        #expect(notification.notificationType.rawValue == type)
        #expect(notification.action == action)
    }

    @Test func renewalInfoAndAppTransactionsVerify() throws {
        let signer = JWSSigner(pki: sharedPKI)
        let renewal: [String: JSONValue] = [
            "originalTransactionId": .string("1000"), "autoRenewProductId": .string("pass.monthly"), "autoRenewStatus": .integer(1),
            "environment": .string("Sandbox"), "signedDate": .integer(AppStorePayloads.milliseconds(Date())),
        ]
        #expect(try verifier().verifyRenewalInfo(try signer.sign(renewal)).value?.autoRenewProductId == "pass.monthly")
        let graceEnd = Date(timeIntervalSince1970: 1_764_400_000)
        let inGrace = AppStorePayloads.renewalInfo(originalTransactionId: "1000", productId: "pass.monthly", gracePeriodExpiresDate: graceEnd)
        #expect(try verifier().verifyRenewalInfo(try signer.sign(inGrace)).value?.gracePeriodExpiresDate == graceEnd)
        let app: [String: JSONValue] = [
            "bundleId": .string(bundleId), "appAppleId": .integer(appAppleId), "receiptType": .string("Sandbox"),
            "applicationVersion": .string("7"), "receiptCreationDate": .integer(AppStorePayloads.milliseconds(Date())),
        ]
        #expect(try verifier().verifyAppTransaction(try signer.sign(app)).value?.applicationVersion == "7")
    }
}

/// A DER INTEGER's content for an unsigned big-endian number.
func unsignedInteger(_ bytes: Data) -> [UInt8] {
    var content = Array(bytes.drop { $0 == 0 })
    if content.isEmpty { content = [0] }
    if content[0] & 0x80 != 0 { content.insert(0, at: 0) }
    return content
}
