import Foundation
import PurchaseDomain
import StoreFixtures
@testable import StoreVerification
import TestData
import Testing
import TestSupport
import JSON

/// Mutation fuzzing of the decoders: every input ends in a verdict, none crashes or hangs.
/// Deterministic (seeded) so that a failure can be replayed.
@Suite(.timeLimit(.minutes(10)))
struct FuzzTests {
    /// The loops run off Swift's cooperative pool (`offPool`): minutes of synchronous work on one of its two threads
    /// here, twice, starved every async test running beside them into its timeouts.
    @Test func mutatedJWSStringsAlwaysEndInAVerdict() async throws {
        let jws = Array(try signedTransaction().utf8)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/{}\"".utf8)
        let count = 600_000
        let verifier = try verifier()
        let (parsed, verified) = try await offPool {
            var rng = SeededGenerator(seed: 0x1A9)
            var parsed = 0
            for iteration in 0..<count {
                let mutated = mutate(jws, alphabet: iteration % 2 == 0 ? alphabet : nil, using: &rng)
                // Not every mutation is valid UTF-8; the decoder sees what a Kafka consumer would after decoding.
                if case .success = CompactJWS.parse(String(decoding: mutated, as: UTF8.self)) { parsed += 1 }
            }
            // Through the whole verifier too (fewer: a new chain costs an X.509 verification).
            var verified = 0
            for _ in 0..<20_000 {
                let mutated = mutate(jws, alphabet: alphabet, using: &rng)
                if case .success = verifier.verifyTransaction(String(decoding: mutated, as: UTF8.self)) { verified += 1 }
            }
            return (parsed, verified)
        }
        // Some mutations keep the structure (e.g. edits inside a certificate's base64), most break it.
        #expect(parsed > 0 && parsed < count)
        // A forgery that verifies would be a hole; edits that do not change the signed bytes (e.g. a
        // trailing byte of padding-free base64 whose decoded value is unchanged) are not forgeries.
        #expect(verified < 200, "\(verified) mutated JWS verified")
    }

    @Test func mutatedDERAlwaysEndsInAVerdict() async throws {
        let receipt = AppReceipt(receiptType: ReceiptSigner.sandbox, bundleId: BundleID(bundleId), appVersion: "1", creationDate: Date(), inAppPurchases: (0..<3).map {
            InAppPurchaseReceipt(quantity: 1, productId: "coins.\($0)", transactionId: "10000\($0)", purchaseDate: Date())
        })
        let payload = Array(ReceiptSigner.payload(receipt))
        let count = 400_000
        // Whole signed receipts through OpenSSL's PKCS#7 parser and the verifier.
        let signed = Array(try ReceiptSigner(pki: sharedPKI).signedDER(receipt))
        let verifier = try ReceiptVerifier(configuration: .init(trustedRoots: [sharedPKI.root], bundleId: BundleID(bundleId), environment: .sandbox))
        let original = try #require(verifier.verify(base64: Data(signed).base64EncodedString()).value)
        let (decoded, accepted, forged) = try await offPool {
            var rng = SeededGenerator(seed: 0xDE7)
            var decoded = 0
            for _ in 0..<count {
                if (try? AppReceiptParser.parse(Data(mutate(payload, alphabet: nil, using: &rng)))) != nil { decoded += 1 }
            }
            var accepted = 0
            var forged = 0
            for _ in 0..<20_000 {
                if case .success(let verified) = verifier.verify(base64: Data(mutate(signed, alphabet: nil, using: &rng)).base64EncodedString()) {
                    accepted += 1
                    if verified != original { forged += 1 }
                }
            }
            return (decoded, accepted, forged)
        }
        #expect(decoded > 0 && decoded < count)
        // A forgery is a mutation that verifies and says something else. Edits to bytes nothing vouches for verify and
        // change nothing: most land in the embedded root (receipts carry theirs, as Apple's do), which the configured
        // root stands in for.
        #expect(forged == 0, "\(forged) mutated receipts verified with other content")
        #expect(accepted < 1_000, "\(accepted) mutated receipts verified")
    }

    @Test func deeplyNestedJSONIsRejectedWithoutRecursionTrouble() {
        let deep = Array(repeating: UInt8(ascii: "["), count: 100_000) + Array(repeating: UInt8(ascii: "]"), count: 100_000)
        #expect(JSONValue.parse(deep) == nil)
        #expect(JSONValue.parse(Array("[[[1]]]".utf8)) == .array([.array([.array([.integer(1)])])]))
        #expect(JSONValue.parseDocument(deep) == .failure(.tooDeep(128)))
    }

    /// Objects that name a key twice — at any depth, with the same or another value, spelled with escapes — are
    /// refused with the key named; the same objects with distinct keys parse. Seeded random documents.
    @Test func objectsNamingAKeyTwiceAreRefusedWhereverTheyAre() {
        var rng = SeededGenerator(seed: 0xD0B1E)
        func key(_ index: Int) -> String { "k\(index)" }
        func object(depth: Int, duplicate: Bool) -> (text: String, duplicated: String?) {
            let count = Int.random(in: 1...5, using: &rng)
            var members = (0..<count).map { index -> String in
                let value = depth > 0 && Bool.random(using: &rng) ? object(depth: depth - 1, duplicate: false).text : String(Int.random(in: -9...9, using: &rng))
                return "\"\(key(index))\":\(value)"
            }
            var duplicated: String?
            if duplicate {
                let index = Int.random(in: 0..<count, using: &rng)
                // The same key again, sometimes spelled with an escape (\u006b is "k").
                let spelled = Bool.random(using: &rng) ? "\\u006b\(index)" : key(index)
                members.insert("\"\(spelled)\":\(Int.random(in: 0...9, using: &rng))", at: Int.random(in: 0...members.count, using: &rng))
                duplicated = key(index)
            }
            return ("{" + members.joined(separator: ",") + "}", duplicated)
        }
        for _ in 0..<20_000 {
            let duplicate = Bool.random(using: &rng)
            let (inner, duplicated) = object(depth: 2, duplicate: duplicate)
            let document = Bool.random(using: &rng) ? "[{\"outer\":\(inner)}]" : inner
            switch JSONValue.parseDocument(Array(document.utf8)) {
            case .success: #expect(duplicated == nil, "\(document)")
            case .failure(let error): #expect(duplicated.map { error == .duplicateKey($0) } == true, "\(document): \(error)")
            }
        }
    }

    /// Timestamps a store may send beyond any real date end as an absent date, never as a trap.
    @Test func extremeStoreTimestampsAreOutOfRangeNotATrap() {
        for milliseconds in [Int64.max, Int64.min, -1, EpochMilliseconds.latest + 1] { #expect(EpochMilliseconds.date(milliseconds) == nil, "\(milliseconds)") }
        #expect(EpochMilliseconds.date(EpochMilliseconds.latest).map(EpochMilliseconds.milliseconds) == EpochMilliseconds.latest)
        #expect(EpochMilliseconds.milliseconds(Date(timeIntervalSince1970: 1e300)) == .max)
        #expect(EpochMilliseconds.milliseconds(Date(timeIntervalSince1970: -.infinity)) == .min)
        let fields = JSONFields(object: ["purchaseDate": .integer(.max), "expiresDate": .integer(1_764_400_000_000)])
        #expect(fields.date("purchaseDate") == nil)
        #expect(fields.date("expiresDate") == Date(timeIntervalSince1970: 1_764_400_000))
    }
}
