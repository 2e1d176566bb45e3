import Crypto
import Foundation
import JSON
import StoreFixtures
import StoreVerification

/// `iapctl bench verify`: signed-transaction verifications per second on one core, beside OpenSSL's
/// raw ECDSA P-256 verify rate over the same bytes, measured in the same run.
enum BenchVerifyCommand {
    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--seconds"], flags: ["--json"])
        let seconds = Double(try options.int("--seconds") ?? 3)
        guard seconds > 0 else { throw UsageError("--seconds must be positive") }

        let pki = try TestPKI.make()
        let jws = try JWSSigner(pki: pki).sign(AppStorePayloads.transaction(
            transactionId: "2000000000000001", productId: "coins.100", bundleId: "com.example.coins", environment: .sandbox,
            appAccountToken: UUID().uuidString.lowercased()))
        let verifier = try SignedDataVerifier(configuration: .init(trustedRoots: [pki.root], bundleId: "com.example.coins", environment: .sandbox))
        guard case .success = verifier.verifyTransaction(jws) else { throw UsageError("benchmark JWS does not verify") }

        // Baseline: EVP_DigestVerify (SHA-256 + ECDSA P-256) over the same signing input, DER signature prepared once.
        let parts = jws.split(separator: ".")
        let signingInput = Array("\(parts[0]).\(parts[1])".utf8)
        guard let rawSignature = Base64URL.decode(parts[2]) else { throw UsageError("bad base64url signature") }
        guard let der = PublicKey.derSignature(fromRawSignature: rawSignature) else { throw UsageError("cannot convert signature") }
        let key = try pki.leaf.publicKey()

        // Interleaved rounds, so that a noisy neighbour or frequency change hits both alike; medians.
        var jwsRates: [Double] = []
        var rawRates: [Double] = []
        let rounds = 10
        for _ in 0..<rounds {
            jwsRates.append(measure(seconds: seconds / Double(rounds)) { _ = verifier.verifyTransaction(jws) })
            rawRates.append(measure(seconds: seconds / Double(rounds)) { _ = key.verifyECDSASHA256(message: signingInput, derSignature: der) })
        }
        let jwsRate = jwsRates.sorted()[rounds / 2]
        let rawRate = rawRates.sorted()[rounds / 2]
        let ratio = jwsRate / rawRate
        if options.flags.contains("--json") {
            print(#"{"jwsVerificationsPerSecond":\#(Int(jwsRate)),"rawECDSAVerificationsPerSecond":\#(Int(rawRate)),"ratio":\#(String(format: "%.3f", ratio)),"signedBytes":\#(signingInput.count),"seconds":\#(seconds)}"#)
        } else {
            print("signed transaction verification (chain cached, one thread): \(Int(jwsRate)) /s")
            print("OpenSSL ECDSA P-256 + SHA-256 verify, same \(signingInput.count) bytes:   \(Int(rawRate)) /s")
            print(String(format: "ratio: %.3f (target >= 0.7)", ratio))
        }
        return 0
    }

    /// Runs `body` repeatedly for about `seconds` on this thread; returns calls per second.
    private static func measure(seconds: Double, _ body: () -> Void) -> Double {
        for _ in 0..<50 { body() } // warm up
        let clock = ContinuousClock()
        let start = clock.now
        var calls = 0
        var elapsed = Duration.zero
        while elapsed < .milliseconds(Int(seconds * 1000)) {
            for _ in 0..<100 { body() }
            calls += 100
            elapsed = clock.now - start
        }
        return Double(calls) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }
}
