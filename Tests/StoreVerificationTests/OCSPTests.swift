import Crypto
import Foundation
import HTTPServer
import StoreFixtures
import StoreVerification
import Testing
import TestSupport

/// Online checks ask an OCSP responder: here one in the test process, signing answers with the test CA.
@Suite struct OCSPTests {
    /// A responder that answers good or revoked, signed by the issuer of the certificate asked about.
    final class Responder: Sendable {
        let server: HTTPServer
        let revoked = Locked(false)
        let pki = Locked<TestPKI?>(nil)
        let requests = Locked(0)

        init() throws {
            let (revoked, pki, requests) = (self.revoked, self.pki, self.requests)
            // Synchronous: verifiers wait for OCSP answers on the calling thread.
            server = try HTTPServer(synchronousHandler: { request in
                requests.withLock { $0 += 1 }
                guard request.method == "POST", let pki = pki.value else { return HTTPResponse(status: 500) }
                // Leaf requests are answered by the intermediate; intermediate requests by the root.
                let isLeaf = request.path == "/leaf"
                let signer = isLeaf ? (pki.intermediate, pki.intermediateKey) : (pki.root, pki.rootKey)
                guard let body = try? OCSP.response(to: request.body, revoked: revoked.value, signer: signer.0, key: signer.1) else {
                    return HTTPResponse(status: 400)
                }
                return HTTPResponse(status: 200, headers: ["Content-Type": "application/ocsp-response"], body: body)
            })
        }
    }

    /// A PKI whose leaf names `/leaf` and whose intermediate names `/intermediate` on the responder.
    static func pki(responderPort: UInt16) throws -> TestPKI {
        let base = try TestPKI.make(.init(ocspURL: "http://127.0.0.1:\(responderPort)/intermediate"))
        let leafKey = try PrivateKey.generateP256()
        let leaf = try CertificateIssuer.issue(
            .init(commonName: "ocsp leaf", isCA: false, notBefore: Date().addingTimeInterval(-3600), notAfter: Date().addingTimeInterval(3600),
                  markerExtensionOIDs: [SignedDataVerifier.leafOID], ocspURL: "http://127.0.0.1:\(responderPort)/leaf"),
            subjectKey: leafKey, issuer: (base.intermediate, base.intermediateKey))
        return TestPKI(root: base.root, rootKey: base.rootKey, intermediate: base.intermediate, intermediateKey: base.intermediateKey,
                       leaf: leaf, leafKey: leafKey)
    }

    @Test func goodCertificatesVerifyAndRevokedOnesAreRejected() throws {
        let responder = try Responder()
        let pki = try Self.pki(responderPort: responder.server.port)
        responder.pki.value = pki
        #expect(try verifier(pki, onlineChecks: true).verifyTransaction(try signedTransaction(pki)).value != nil)

        responder.revoked.value = true
        let rejection = try #require(try verifier(pki, onlineChecks: true).verifyTransaction(try signedTransaction(pki)).rejection)
        #expect(rejection.reason == .certificateRevoked)
        #expect(!rejection.isRetryable)
    }

    @Test func anUnreachableResponderIsRetryable() throws {
        let pki = try Self.pki(responderPort: 1)
        let rejection = try #require(try verifier(pki, onlineChecks: true).verifyTransaction(try signedTransaction(pki)).rejection)
        #expect(rejection.reason == .revocationCheckFailed)
        #expect(rejection.isRetryable)
    }

    @Test func aResponseSignedBySomeoneElseIsNotTrusted() throws {
        let responder = try Responder()
        let pki = try Self.pki(responderPort: responder.server.port)
        responder.pki.value = try TestPKI.make(name: "impostor")
        let rejection = try #require(try verifier(pki, onlineChecks: true).verifyTransaction(try signedTransaction(pki)).rejection)
        #expect(rejection.reason == .revocationCheckFailed)
    }

    /// A genuine chain under a header changed in any byte (a field added) is a header never verified: its signature,
    /// which nobody but the leaf's owner can make, is checked before the chain, so forgeries cost no OCSP request (nor
    /// a chain verification, nor a cache entry that would push out the genuine header's).
    @Test func aForgedSignatureUnderAGenuineChainAsksNoResponder() throws {
        let responder = try Responder()
        let pki = try Self.pki(responderPort: responder.server.port)
        responder.pki.value = pki
        let verifier = try verifier(pki, onlineChecks: true)
        let forger = TestPKI(root: pki.root, rootKey: pki.rootKey, intermediate: pki.intermediate, intermediateKey: pki.intermediateKey,
                             leaf: pki.leaf, leafKey: try PrivateKey.generateP256())
        for kid in ["forged-1", "forged-2"] {
            let rejection = try #require(verifier.verifyTransaction(try signedTransaction(forger, header: ["kid": .string(kid)])).rejection)
            #expect(rejection.reason == .badSignature)
        }
        #expect(responder.requests.value == 0)
        #expect(verifier.verifyTransaction(try signedTransaction(pki)).value != nil)
        #expect(responder.requests.value == 2, "the genuine header's chain asked about its leaf and its intermediate")
    }
}
