@testable import Crypto
import Foundation
import Testing

/// ES256 verification writes the r‖s signature as DER itself and reuses its OpenSSL contexts: OpenSSL accepts only the
/// one minimal encoding, so a wrong length, a missing 0x00 before a high first byte or a leading zero left in would
/// fail these signatures; and a context reused after a failed verification or from several threads still answers right.
@Suite struct ES256SignatureTests {
    /// Signs until both edge cases of the integer encoding were met (a first byte ≥ 0x80, which needs a 0x00 before it,
    /// and a leading zero byte, which must be dropped: about one signature in 128), verifying every signature.
    @Test func everyIntegerEncodingOfRAndSVerifies() throws {
        let privateKey = try PrivateKey.generateP256()
        let key = try privateKey.publicKey()
        var (sawHighByte, sawLeadingZero, signed) = (false, false, 0)
        while !(sawHighByte && sawLeadingZero), signed < 20_000 {
            let message = Data("transaction \(signed)".utf8)
            let signature = try privateKey.signES256(message)
            signed += 1
            for half in [signature.prefix(32), signature.suffix(32)] {
                if half.first! >= 0x80 { sawHighByte = true }
                if half.first! == 0 { sawLeadingZero = true }
            }
            #expect(key.verifyES256(message: message, rawSignature: signature), "signature \(signed): \(signature.lowercaseHex)")
            let der = try #require(PublicKey.derSignature(fromRawSignature: signature))
            #expect(key.verifyECDSASHA256(message: message, derSignature: der), "OpenSSL's own verify accepts the DER written")
        }
        #expect(sawHighByte && sawLeadingZero, "\(signed) signatures met both encodings")
    }

    @Test func aWrongSignatureMessageOrKeyFailsAndTheContextsStillWork() throws {
        let privateKey = try PrivateKey.generateP256()
        let key = try privateKey.publicKey()
        let otherKey = try PrivateKey.generateP256().publicKey()
        let message = Data("purchase".utf8)
        let signature = try privateKey.signES256(message)
        var flipped = signature
        flipped[40] ^= 0x01
        #expect(!key.verifyES256(message: message, rawSignature: flipped))
        #expect(!key.verifyES256(message: Data("purchasE".utf8), rawSignature: signature))
        #expect(!otherKey.verifyES256(message: message, rawSignature: signature))
        #expect(!key.verifyES256(message: message, rawSignature: signature.prefix(63)), "63 bytes")
        #expect(!key.verifyES256(message: message, rawSignature: Data(count: 64)), "r = s = 0")
        #expect(key.verifyES256(message: message, rawSignature: signature), "after the failures, on the same contexts")
        #expect(!key.verifyES256(message: message, rawSignature: PublicKey.derSignature(fromRawSignature: signature).map { Data($0) }!),
                "a DER signature where r‖s is expected")
    }

    /// ES256 is ECDSA on P-256 only: a key on another 256-bit curve (secp256k1 here) verifies nothing, even its own
    /// signatures, and is not read as a signing key.
    @Test func aKeyOnAnother256BitCurveIsNotP256() throws {
        let otherCurve = try PrivateKey.generate(curveNamed: "secp256k1")
        let key = try otherCurve.publicKey()
        let message = Data("purchase".utf8)
        #expect(!key.isP256)
        #expect(!key.verifyES256(message: message, rawSignature: try otherCurve.signES256(message)))
        #expect(throws: CryptoError.self) { try PrivateKey(pem: Data(try otherCurve.pemRepresentation().utf8)) }
        #expect(try PrivateKey.generateP256().publicKey().isP256)
    }

    @Test func concurrentVerificationsOnOneKeyEachGetTheirAnswer() async throws {
        let privateKey = try PrivateKey.generateP256()
        let key = try privateKey.publicKey()
        let signed = try (0..<64).map { index in
            let message = Data("message \(index)".utf8)
            return (message, try privateKey.signES256(message))
        }
        let wrong = await withTaskGroup(of: Int.self) { group in
            for task in 0..<8 {
                group.addTask {
                    var wrong = 0
                    for round in 0..<50 {
                        for (index, (message, signature)) in signed.enumerated() {
                            // Every other pairing is deliberately mismatched: the answers must still follow the inputs.
                            let mismatched = (index + round + task) % 2 == 1
                            let other = signed[(index + 1) % signed.count].1
                            if key.verifyES256(message: message, rawSignature: mismatched ? other : signature) == mismatched { wrong += 1 }
                        }
                    }
                    return wrong
                }
            }
            return await group.reduce(0, +)
        }
        #expect(wrong == 0)
    }
}
