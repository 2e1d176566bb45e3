import Foundation
import PurchaseDomain
import TestData
import Testing

/// An identifier is its UTF-8 bytes: equal, hashed and ordered as the broker and the databases compare it, whatever Swift's
/// `String` makes of it. No broker, no database.
@Suite struct IdentifierTests {
    /// Spellings Swift's `String` takes as equal (canonically equivalent) while their bytes differ.
    static let canonicalTwins: [(String, String)] = ConfusableIdentifiers.groups.filter { $0[0] == $0[1] }.map { ($0[0], $0[1]) }

    @Test func theCorpusHoldsCanonicalTwins() { #expect(Self.canonicalTwins.count >= 6) }

    @Test(arguments: canonicalTwins) func canonicallyEquivalentSpellingsAreDifferentIdentifiers(_ first: String, _ second: String) throws {
        try #require(first == second, "Swift's String takes them as equal")
        #expect(UserID(first) != UserID(second))
        #expect(Set([UserID(first), UserID(second)]).count == 2)
        var balances: [UserID: Int] = [:]
        balances[UserID(first), default: 0] += 1
        balances[UserID(second), default: 0] += 1
        #expect(balances.count == 2 && balances.values.allSatisfy { $0 == 1 }, "two users, two balances")
        #expect(PurchaseKey(store: .appstore, transactionId: TransactionID(first)) != PurchaseKey(store: .appstore, transactionId: TransactionID(second)))
    }

    /// Text drawn from scalars that compose, decompose, reorder and fold: equality, hashing and order follow the bytes,
    /// for every pair of a few thousand draws.
    @Test(arguments: [1, 2, 3] as [UInt64]) func equalityHashingAndOrderFollowTheBytes(_ seed: UInt64) {
        var generator = SeededGenerator(seed: seed)
        let alphabet: [Unicode.Scalar] = ["e", "E", "K", "A", "a", ";", "\u{E9}", "\u{301}", "\u{323}", "\u{30A}", "\u{C5}", "\u{212A}", "\u{212B}",
                                          "\u{37E}", "\u{1EA1}", "\u{D55C}", "\u{1112}", "\u{1161}", "\u{11AB}", "\u{FB01}", "\u{200D}", "\u{1F469}"]
        let texts = (0..<400).map { _ in
            String(String.UnicodeScalarView((0..<Int.random(in: 0...4, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }))
        }
        var stringEqualBytesNot = 0
        for first in texts {
            for second in texts {
                let sameBytes = Array(first.utf8) == Array(second.utf8)
                let (a, b) = (ProductID(first), ProductID(second))
                #expect((a == b) == sameBytes)
                if sameBytes { #expect(a.hashValue == b.hashValue) }
                #expect((a < b) == first.utf8.lexicographicallyPrecedes(second.utf8))
                if first == second && !sameBytes { stringEqualBytesNot += 1 }
            }
        }
        #expect(stringEqualBytesNot > 0, "the draws hold spellings Swift takes as equal")
        #expect(Set(texts.map { ProductID($0) }).count == Set(texts.map { Array($0.utf8) }).count, "a set keeps one of each byte sequence")
    }

    /// Through JSON (events) and through interpolation (ids built from parts) the bytes stay as they were.
    @Test(arguments: canonicalTwins) func encodingKeepsTheBytes(_ first: String, _ second: String) throws {
        for text in [first, second] {
            let id = TransactionID(text)
            let decoded = try JSONDecoder().decode(TransactionID.self, from: JSONEncoder().encode(id))
            #expect(Array(decoded.rawValue.utf8) == Array(text.utf8))
            let built: TransactionID = "order-\(text)"
            #expect(Array(built.rawValue.utf8) == Array(("order-" + text).utf8))
            #expect(TransactionID(PurchaseToken(text)) == id, "the same bytes named as another kind")
        }
    }

    /// Account tokens (UUIDs) are the same account in either case of their hex digits, never across other bytes.
    @Test func accountTokensIgnoreOnlyTheCaseOfASCIILetters() {
        let token: AccountToken = "5d3a0f0e-8a7c-4c1e-9d57-00000000a11c"
        #expect(token.isSameAccount(as: "5D3A0F0E-8A7C-4C1E-9D57-00000000A11C"))
        #expect(!token.isSameAccount(as: "5d3a0f0e-8a7c-4c1e-9d57-00000000a11d"))
        #expect(!token.isSameAccount(as: "5d3a0f0e-8a7c-4c1e-9d57-00000000a11"))
        #expect(!AccountToken("caf\u{E9}").isSameAccount(as: "cafe\u{301}"))
        #expect(!AccountToken("\u{212A}").isSameAccount(as: "k"), "only ASCII letters fold")
    }
}
