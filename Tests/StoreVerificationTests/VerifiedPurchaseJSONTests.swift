import Foundation
import JSON
import PurchaseDomain
import StoreFixtures
import StoreVerification
import Testing

/// `VerifiedPurchase.jsonValue` is what its `Codable` conformance encodes (ISO 8601 dates), field for field.
struct VerifiedPurchaseJSONTests {
    static func encoded(_ purchase: VerifiedPurchase) throws -> JSONValue? {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        return JSONValue.parse(Array(try encoder.encode(purchase)))
    }

    @Test func jsonValueMatchesTheCodableEncodingWithEveryFieldAndWithTheFewest() throws {
        let pki = try TestPKI.make()
        let jws = try JWSSigner(pki: pki).sign(AppStorePayloads.transaction(
            transactionId: "2000000000000123", productId: "coins.100", bundleId: "com.example.coins", environment: .sandbox,
            appAccountToken: UUID().uuidString.lowercased()))
        let verifier = try SignedDataVerifier(configuration: .init(trustedRoots: [pki.root], bundleId: "com.example.coins", environment: .sandbox))
        var full = VerifiedPurchase(try verifier.verifyTransaction(jws).get())
        full.price = 990
        full.currency = "EUR"
        full.revocationDate = Date(timeIntervalSince1970: 1_800_000_000.756)
        full.revocationReason = 1
        full.expiresDate = Date(timeIntervalSince1970: 1_900_000_000)
        full.consumed = true
        full.originalTransactionId = "2000000000000100"
        #expect(full.jsonValue == (try Self.encoded(full)))
        #expect(full.jsonValue.objectValue?.count == 17, "every field present")

        var fewest = full
        (fewest.originalTransactionId, fewest.productType, fewest.purchaseDate, fewest.signedDate, fewest.appAccountToken) = (nil, nil, nil, nil, nil)
        (fewest.environment, fewest.price, fewest.currency, fewest.revocationDate, fewest.revocationReason) = (nil, nil, nil, nil, nil)
        (fewest.expiresDate, fewest.consumed, fewest.raw) = (nil, nil, [:])
        #expect(fewest.jsonValue == (try Self.encoded(fewest)))
    }
}
