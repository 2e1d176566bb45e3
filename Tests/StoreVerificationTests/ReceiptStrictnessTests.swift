import PurchaseDomain
import Crypto
import Foundation
import StoreFixtures
import StoreVerification
import Testing

/// App receipts held to the standard of signed data: the environment the receipt names, receipt roots of their own,
/// Apple's chain shape and marker OIDs, nothing after the container.
@Suite struct ReceiptStrictnessTests {
    static func receipt(type: String?) -> AppReceipt { ReceiptVerifierTests.receipt(type: type) }

    static func verifier(_ pki: TestPKI = sharedPKI, environment: AppStoreEnvironment = .sandbox) throws -> ReceiptVerifier {
        try ReceiptVerifierTests.verifier(pki, environment: environment)
    }

    // MARK: - The receipt type

    /// A receipt with an expiration date (a Volume Purchase Program copy) is good until then, judged when its certificates
    /// are: at its creation date (made after it expired: refused; made before: accepted however late it is verified), and
    /// with online checks now.
    @Test func aReceiptPastItsExpirationDateIsRejected() throws {
        let signer = ReceiptSigner(pki: sharedPKI)
        var receipt = Self.receipt(type: ReceiptSigner.sandbox)
        let created = try #require(receipt.creationDate)
        receipt.expirationDate = created.addingTimeInterval(-60)
        #expect(try Self.verifier().verify(base64: try signer.sign(receipt)).rejection?.reason == .receiptExpired, "made after it expired")
        receipt.expirationDate = created.addingTimeInterval(60) // and long past now: the fixture was made a day ago
        let madeInTime = try signer.sign(receipt)
        #expect(try Self.verifier().verify(base64: madeInTime).value != nil, "made before it expired")
        let online = try ReceiptVerifier(configuration: .init(trustedRoots: [sharedPKI.root], bundleId: BundleID(bundleId), environment: .sandbox, onlineChecks: true))
        #expect(online.verify(base64: madeInTime).rejection?.reason == .receiptExpired, "online checks judge it now")
    }

    @Test func aSandboxReceiptIsRejectedByAProductionVerifier() throws {
        let sandbox = try ReceiptSigner(pki: sharedPKI).sign(Self.receipt(type: ReceiptSigner.sandbox))
        let rejection = try Self.verifier(environment: .production).verify(base64: sandbox).rejection
        #expect(rejection?.reason == .wrongEnvironment, "\(String(describing: rejection))")
        #expect(rejection?.isRetryable == false)
    }

    @Test func aProductionReceiptIsAcceptedByAProductionVerifierAndStampedProduction() throws {
        let production = try ReceiptSigner(pki: sharedPKI).sign(Self.receipt(type: ReceiptSigner.production))
        let result = try Self.verifier(environment: .production).verify(base64: production)
        let receipt = try #require(result.value, "\(String(describing: result.rejection))")
        #expect(receipt.environment == .production)
        let purchases = receipt.inAppPurchases.compactMap { VerifiedPurchase($0, in: receipt) }
        #expect(purchases.count == 2 && purchases.allSatisfy { $0.environment == "Production" })
        // And the other way round: a production receipt is no sandbox one.
        #expect(try Self.verifier(environment: .sandbox).verify(base64: production).rejection?.reason == .wrongEnvironment)
    }

    @Test(arguments: [AppStoreEnvironment.production, .sandbox])
    func aReceiptWithoutAKnownTypeIsRejected(_ environment: AppStoreEnvironment) throws {
        let signer = ReceiptSigner(pki: sharedPKI)
        for type in [nil, "", "Sandbox", "Staging"] as [String?] {
            let rejection = try Self.verifier(environment: environment).verify(base64: try signer.sign(Self.receipt(type: type))).rejection
            #expect(rejection?.reason == .wrongEnvironment, "type \(type ?? "none"): \(String(describing: rejection))")
        }
    }

    @Test func anXcodeReceiptSignedByATrustedChainIsStillNoSandboxReceipt() throws {
        let xcode = try ReceiptSigner(pki: sharedPKI).sign(Self.receipt(type: ReceiptSigner.xcode))
        #expect(try Self.verifier(environment: .sandbox).verify(base64: xcode).rejection?.reason == .wrongEnvironment)
    }

    // MARK: - Roots, chain and container

    @Test func withoutReceiptRootsEveryReceiptIsRejected() throws {
        let verifier = try ReceiptVerifier(configuration: .init(trustedRoots: [], bundleId: BundleID(bundleId), environment: .sandbox))
        let good = try ReceiptSigner(pki: sharedPKI).sign(Self.receipt(type: ReceiptSigner.sandbox))
        for receipt in [good, "%%%"] {
            let rejection = verifier.verify(base64: receipt).rejection
            #expect(rejection?.reason == .storeRejected, "\(String(describing: rejection))")
            #expect(rejection?.detail.contains("not configured") == true)
            #expect(rejection?.isRetryable == false)
        }
    }

    @Test func aChainWithoutApplesMarkerOIDsIsRejected() throws {
        for options in [TestPKI.Options(leafOID: false), TestPKI.Options(intermediateOID: false)] {
            let pki = try TestPKI.make(options, name: "unmarked")
            let receipt = try ReceiptSigner(pki: pki).sign(Self.receipt(type: ReceiptSigner.sandbox))
            let rejection = try Self.verifier(pki).verify(base64: receipt).rejection
            #expect(rejection?.reason == .missingAppleOID, "leaf OID \(options.leafOID), intermediate OID \(options.intermediateOID): \(String(describing: rejection))")
        }
    }

    @Test(arguments: [0, 2])
    func aChainOfTheWrongLengthIsRejected(intermediates: Int) throws {
        // Every certificate carries its marker OID and every signature holds: only the length is wrong.
        let pki = try TestPKI.make(.init(intermediateCount: intermediates), name: "\(intermediates) intermediates")
        #expect(pki.chain.count == intermediates + 2)
        let receipt = try ReceiptSigner(pki: pki).sign(Self.receipt(type: ReceiptSigner.sandbox))
        let rejection = try Self.verifier(pki).verify(base64: receipt).rejection
        #expect(rejection?.reason == .invalidChainLength, "\(String(describing: rejection))")
    }

    @Test func bytesAfterTheContainerAreRejected() throws {
        let der = try ReceiptSigner(pki: sharedPKI).signedDER(Self.receipt(type: ReceiptSigner.sandbox))
        let verifier = try Self.verifier()
        #expect(verifier.verify(base64: der.base64EncodedString()).value != nil, "the receipt itself verifies")
        for trailing in [Data([0x00]), Data([0x30, 0x00]), Data(repeating: 0xFF, count: 64)] {
            let rejection = verifier.verify(base64: (der + trailing).base64EncodedString()).rejection
            #expect(rejection?.reason == .malformedReceipt, "\(trailing.count) trailing bytes: \(String(describing: rejection))")
        }
    }
}
