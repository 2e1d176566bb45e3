import Crypto
import Foundation
import Testing

/// RSA private keys read from PEM, as a Google Cloud service account's key file holds one.
@Suite struct RSAPrivateKeyTests {
    @Test func aPKCS8RSAKeyReadsAndSignsWhatItsPublicHalfVerifies() throws {
        let generated = try PrivateKey.generateRSA()
        let key = try PrivateKey(rsaPEM: Data(try generated.pemRepresentation().utf8))
        let message = Data("header.claims".utf8)
        let signature = try key.signRSA(message, digest: .sha256)
        let publicKey = try PublicKey(subjectPublicKeyInfo: Data(try generated.publicKeyBase64().utf8))
        #expect(publicKey.verifyRSA(message: message, signature: signature, digest: .sha256))
        #expect(!publicKey.verifyRSA(message: Data("header.other".utf8), signature: signature, digest: .sha256))
    }

    @Test func keysThatAreNotRSAOf2048BitsOrMoreAreRefused() throws {
        #expect(throws: CryptoError.self) { try PrivateKey(rsaPEM: Data(try PrivateKey.generateP256().pemRepresentation().utf8)) }
        #expect(throws: CryptoError.self) { try PrivateKey(rsaPEM: Data(try PrivateKey.generateRSA(bits: 1024).pemRepresentation().utf8)) }
        #expect(throws: CryptoError.self) { try PrivateKey(rsaPEM: Data("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".utf8)) }
        #expect(throws: CryptoError.self) { try PrivateKey(pem: Data(try PrivateKey.generateRSA().pemRepresentation().utf8)) }
    }
}
