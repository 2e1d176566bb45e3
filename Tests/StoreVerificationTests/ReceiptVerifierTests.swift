import PurchaseDomain
import Crypto
import Foundation
import StoreFixtures
import StoreVerification
import Testing

@Suite struct ReceiptVerifierTests {
    // Whole seconds: receipts carry RFC 3339 dates without fractions.
    static let created = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 86_400).rounded(.down))

    static func receipt(type: String? = ReceiptSigner.sandbox, bundle: String = bundleId, created: Date = created) -> AppReceipt {
        AppReceipt(receiptType: type, bundleId: BundleID(bundle), appVersion: "42", originalAppVersion: "1.0", creationDate: created, inAppPurchases: [
            InAppPurchaseReceipt(quantity: 3, productId: "coins.100", transactionId: "1000000001", originalTransactionId: "1000000001",
                                 purchaseDate: created.addingTimeInterval(-60), originalPurchaseDate: created.addingTimeInterval(-60)),
            InAppPurchaseReceipt(quantity: 1, productId: "pass.monthly", transactionId: "1000000002", originalTransactionId: "1000000000",
                                 purchaseDate: created.addingTimeInterval(-30), originalPurchaseDate: created.addingTimeInterval(-86_400),
                                 expiresDate: created.addingTimeInterval(86_400 * 30), cancellationDate: created.addingTimeInterval(-10),
                                 webOrderLineItemId: 9_000_000_000_123),
        ])
    }

    static func verifier(_ pki: TestPKI = sharedPKI, environment: AppStoreEnvironment = .sandbox, roots: [Certificate]? = nil,
                         allowsUnsignedTestData: Bool = false) throws -> ReceiptVerifier {
        try ReceiptVerifier(configuration: .init(trustedRoots: roots ?? [pki.root], bundleId: BundleID(bundleId), environment: environment,
                                                 allowsUnsignedTestData: allowsUnsignedTestData))
    }

    func verifier(_ pki: TestPKI = sharedPKI, environment: AppStoreEnvironment = .sandbox) throws -> ReceiptVerifier {
        try Self.verifier(pki, environment: environment)
    }

    @Test func verifiesAndDecodesEveryField() throws {
        let base64 = try ReceiptSigner(pki: sharedPKI).sign(Self.receipt())
        let result = try verifier().verify(base64: base64)
        let decoded = try #require(result.value, "\(String(describing: result.rejection))")
        #expect(decoded == Self.receipt(), "every field round-trips: \(decoded)")
        let purchase = try #require(VerifiedPurchase(decoded.inAppPurchases[0], in: decoded))
        #expect(purchase.quantity == 3 && purchase.transactionId == "1000000001")
        #expect(purchase.environment == "Sandbox", "ProductionSandbox is the Sandbox")
    }

    @Test func aReceiptFromAnotherCAIsRejected() throws {
        let base64 = try ReceiptSigner(pki: try TestPKI.make(name: "stranger")).sign(Self.receipt())
        #expect(try verifier().verify(base64: base64).rejection?.reason == .untrustedChain)
    }

    @Test func aTamperedReceiptFailsItsSignature() throws {
        var der = try #require(Data(base64Encoded: try ReceiptSigner(pki: sharedPKI).sign(Self.receipt())))
        // Change a digit of the transaction id inside the signed content.
        let needle = Data("1000000001".utf8)
        let range = try #require(der.range(of: needle))
        der[range.lowerBound] = UInt8(ascii: "9")
        #expect(try verifier().verify(base64: der.base64EncodedString()).rejection?.reason == .receiptSignatureInvalid)
    }

    @Test func wrongBundleIsRejected() throws {
        let base64 = try ReceiptSigner(pki: sharedPKI).sign(Self.receipt(bundle: "com.other"))
        #expect(try verifier().verify(base64: base64).rejection?.reason == .wrongBundleId)
    }

    @Test func expiryIsCheckedAtTheReceiptCreationDate() throws {
        let old = try TestPKI.make(.init(validFrom: Date().addingTimeInterval(-86_400 * 60), validUntil: Date().addingTimeInterval(-86_400)))
        let whileValid = try ReceiptSigner(pki: old).sign(Self.receipt(created: Date().addingTimeInterval(-86_400 * 2)))
        #expect(try verifier(old).verify(base64: whileValid).value != nil)
        let afterExpiry = try ReceiptSigner(pki: old).sign(Self.receipt(created: Date()))
        #expect(try verifier(old).verify(base64: afterExpiry).rejection?.reason == .certificateExpired)
    }

    @Test(arguments: ["", "%%%", "aGVsbG8=", Data([0x30, 0x03, 0x02, 0x01, 0x01]).base64EncodedString()])
    func malformedReceiptsAreRejected(_ base64: String) throws {
        #expect(try verifier().verify(base64: base64).rejection?.reason == .malformedReceipt)
    }

    @Test func xcodeReceiptsParseWithoutVerificationOnlyWithThePermission() throws {
        let signer = ReceiptSigner(pki: try TestPKI.make(name: "xcode"))
        let xcode = try Self.verifier(environment: .xcode, roots: [], allowsUnsignedTestData: true)
        let decoded = xcode.verify(base64: try signer.sign(Self.receipt(type: ReceiptSigner.xcode)))
        #expect(decoded.value?.inAppPurchases.count == 2, "\(String(describing: decoded.rejection))")
        // Unsigned, yet still only Xcode's receipts.
        #expect(xcode.verify(base64: try signer.sign(Self.receipt())).rejection?.reason == .wrongEnvironment)
        // The environment's name alone is not enough; nor is the permission anywhere else.
        #expect(throws: VerifierConfigurationError.self) { _ = try Self.verifier(environment: .xcode, roots: []) }
        #expect(throws: VerifierConfigurationError.self) { _ = try Self.verifier(environment: .localTesting) }
        #expect(throws: VerifierConfigurationError.self) { _ = try Self.verifier(environment: .production, allowsUnsignedTestData: true) }
        #expect(throws: VerifierConfigurationError.self) { _ = try Self.verifier(environment: .sandbox, allowsUnsignedTestData: true) }
    }
}
