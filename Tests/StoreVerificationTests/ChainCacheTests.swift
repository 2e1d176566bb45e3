import Crypto
import Foundation
@testable import StoreVerification
import Testing

/// The chain cache answers the header it found last without hashing it again, and that shortcut forgets nothing the
/// cache itself would: an entry expired, one evicted by a newer chain, a date outside the chain's validity.
@Suite struct ChainCacheTests {
    let now = Date(timeIntervalSince1970: 1_764_600_000)

    func header(_ tag: UInt8) -> ArraySlice<UInt8> { ArraySlice(Array(repeating: tag, count: 2_500)) }

    @Test func theLastHeaderFoundIsAnsweredAsTheCacheWouldAnswerIt() throws {
        let key = try PrivateKey.generateP256().publicKey()
        let cache = ChainCache(capacity: 1, timeToLive: 60)
        cache.insert(header(1), leafKey: key, validFrom: now.addingTimeInterval(-100), validUntil: now.addingTimeInterval(100), now: now)
        #expect(cache.key(for: header(1), validAt: now, now: now) === key)
        #expect(cache.key(for: header(1), validAt: now, now: now) === key, "again: the header found last")
        #expect(cache.key(for: header(1), validAt: now.addingTimeInterval(200), now: now) == nil, "a date outside the chain's validity")
        var other = header(1)
        other[other.endIndex - 1] = 2
        #expect(cache.key(for: other, validAt: now, now: now) == nil, "a header that differs in its last byte")
        #expect(cache.key(for: header(1), validAt: now, now: now.addingTimeInterval(61)) == nil, "expired")
        #expect(cache.key(for: header(1), validAt: now, now: now) == nil, "expired entries are gone")

        cache.insert(header(1), leafKey: key, validFrom: now.addingTimeInterval(-100), validUntil: now.addingTimeInterval(100), now: now)
        #expect(cache.key(for: header(1), validAt: now, now: now) === key)
        cache.insert(header(3), leafKey: key, validFrom: now.addingTimeInterval(-100), validUntil: now.addingTimeInterval(100), now: now)
        #expect(cache.key(for: header(1), validAt: now, now: now) == nil, "evicted by the newer chain (capacity 1)")
        #expect(cache.key(for: header(3), validAt: now, now: now) === key)
    }
}
