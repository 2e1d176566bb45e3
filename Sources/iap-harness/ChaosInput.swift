import Foundation
import Kafka
import PurchaseEvents
import StoreFixtures
import StoreVerification

/// What `iap-harness chaos` submits, and what it expects of each message.
struct ChaosInput {
    struct Purchase {
        let transactionId: String
        let user: String
        let amount: Int64
    }

    /// Each valid purchase once; `messages` carries these plus `duplicates` repeats of them.
    let unique: [Purchase]
    let duplicates: Int
    /// Submissions signed by a key outside the trusted chain, by submission id (rejections carry no transaction id
    /// taken from unverified data) with the transaction id they claim: each must be rejected, none granted.
    let forged: [String: String]
    /// Keys of messages that are not a submission (truncated JSON, schema violations, invalid UTF-8): each must be dead-lettered.
    let malformed: Set<String>
    /// Everything, shuffled: duplicates may come before their original.
    let messages: [KafkaProducerMessage]

    /// `total` messages: 20 % duplicates, 1 % forged, 0.5 % malformed, the rest unique valid purchases.
    static func make(total: Int, users: Int, pki: TestPKI, codec: EventCodec, now: Date) throws -> ChaosInput {
        let duplicates = total / 5, forgedCount = max(1, total / 100), malformedCount = max(1, total / 200)
        let uniqueCount = total - duplicates - forgedCount - malformedCount
        let signer = JWSSigner(pki: pki)
        let forger = JWSSigner(pki: try TestPKI.make(name: "chaos forger"))
        var generator = SystemRandomNumberGenerator()
        func submission(_ jws: String, user: String, id: String = UUID().uuidString.lowercased()) throws -> KafkaProducerMessage {
            try codec.message(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws, userId: user, submittedAt: now,
                                                source: .client, submissionId: id), time: now)
        }
        var unique: [Purchase] = []
        var valid: [KafkaProducerMessage] = []
        for index in 0..<uniqueCount {
            let id = String(5_000_000_000_000 + index)
            let product = index % 3 == 0 ? "coins.500" : "coins.100"
            let user = "chaos-user-\(Int.random(in: 1...users, using: &generator))"
            let jws = try signer.sign(AppStorePayloads.transaction(transactionId: id, productId: product, bundleId: DemoCommand.bundleId,
                                                                   purchaseDate: now, signedDate: now))
            unique.append(Purchase(transactionId: id, user: user, amount: product == "coins.500" ? 500 : 100))
            valid.append(try submission(jws, user: user))
        }
        var messages = valid
        // A repeat is the same signed transaction from the same user: a retry, a restore, a producer duplicate.
        for _ in 0..<duplicates { messages.append(valid.randomElement(using: &generator)!) }
        var forged: [String: String] = [:]
        for index in 0..<forgedCount {
            let id = String(6_000_000_000_000 + index)
            let submissionId = UUID().uuidString.lowercased()
            forged[submissionId] = id
            let jws = try forger.sign(AppStorePayloads.transaction(transactionId: id, productId: "coins.500", bundleId: DemoCommand.bundleId,
                                                                   purchaseDate: now, signedDate: now))
            messages.append(try submission(jws, user: "chaos-user-\(index % users + 1)", id: submissionId))
        }
        var malformed = Set<String>()
        let bodies = [Data(#"{"store": "appstore", "kind": "signedTransaction", truncated"#.utf8),
                      Data(#"{"store": "appstore", "kind": "signedTransaction", "userId": 42}"#.utf8),
                      Data([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d])]
        for index in 0..<malformedCount {
            let key = "chaos-malformed-\(index)"
            malformed.insert(key)
            // The headers of a real submission, so that the message reaches the verifier's decoding.
            messages.append(KafkaProducerMessage(topic: valid[0].topic, key: Data(key.utf8), value: bodies[index % bodies.count], headers: valid[0].headers))
        }
        messages.shuffle(using: &generator)
        return ChaosInput(unique: unique, duplicates: duplicates, forged: forged, malformed: malformed, messages: messages)
    }

    /// Messages that end in a distinct outcome: unique valid purchases, forgeries, malformed messages.
    var outcomesExpected: Int { unique.count + forged.count + malformed.count }
}
