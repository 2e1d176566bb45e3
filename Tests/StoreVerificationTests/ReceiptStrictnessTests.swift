import Crypto
import Foundation
import StoreFixtures
import StoreVerification
import Testing

/// App receipts held to the standard of signed data: Apple's chain shape and marker OIDs, nothing after the container.
@Suite struct ReceiptStrictnessTests {
    static func verifier(_ pki: TestPKI = sharedPKI, environment: AppStoreEnvironment = .sandbox) throws -> ReceiptVerifier {
        try ReceiptVerifier(configuration: .init(trustedRoots: [pki.root], bundleId: bundleId, environment: environment))
    }

    // MARK: - Chain and container

    @Test func aChainWithoutApplesMarkerOIDsIsRejected() throws {
        for options in [TestPKI.Options(leafOID: false), TestPKI.Options(intermediateOID: false)] {
            let pki = try TestPKI.make(options, name: "unmarked")
            let receipt = try ReceiptSigner(pki: pki).sign(ReceiptVerifierTests.receipt())
            let rejection = try Self.verifier(pki).verify(base64: receipt).rejection
            #expect(rejection?.reason == .missingAppleOID, "leaf OID \(options.leafOID), intermediate OID \(options.intermediateOID): \(String(describing: rejection))")
        }
    }

    @Test(arguments: [0, 2])
    func aChainOfTheWrongLengthIsRejected(intermediates: Int) throws {
        // Every certificate carries its marker OID and every signature holds: only the length is wrong.
        let pki = try TestPKI.make(.init(intermediateCount: intermediates), name: "\(intermediates) intermediates")
        #expect(pki.chain.count == intermediates + 2)
        let receipt = try ReceiptSigner(pki: pki).sign(ReceiptVerifierTests.receipt())
        let rejection = try Self.verifier(pki).verify(base64: receipt).rejection
        #expect(rejection?.reason == .invalidChainLength, "\(String(describing: rejection))")
    }

    @Test func bytesAfterTheContainerAreRejected() throws {
        let der = try ReceiptSigner(pki: sharedPKI).signedDER(ReceiptVerifierTests.receipt())
        let verifier = try Self.verifier()
        #expect(verifier.verify(base64: der.base64EncodedString()).value != nil, "the receipt itself verifies")
        for trailing in [Data([0x00]), Data([0x30, 0x00]), Data(repeating: 0xFF, count: 64)] {
            let rejection = verifier.verify(base64: (der + trailing).base64EncodedString()).rejection
            #expect(rejection?.reason == .malformedReceipt, "\(trailing.count) trailing bytes: \(String(describing: rejection))")
        }
    }
}
