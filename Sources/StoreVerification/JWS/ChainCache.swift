import Crypto
import Foundation
import Synchronization

/// Certificate chains already verified, so that steady state costs one ECDSA verification per JWS.
///
/// Keyed by the JWS header segment (which holds the x5c certificates). An entry remembers the window
/// in which every certificate of the chain is valid, and expires after `timeToLive` so that trust
/// changes (a root removed, OCSP state) are picked up. Bounded: the oldest entry goes first.
final class ChainCache: Sendable {
    struct Entry: Sendable {
        let leafKey: PublicKey
        let validFrom: Date
        let validUntil: Date
        let expires: Date
        let inserted: UInt64
    }

    private let capacity: Int
    private let timeToLive: TimeInterval
    /// `last`: the entry `key(for:validAt:now:)` found last (forgotten at every insert, which may evict it).
    private let entries = Mutex<(map: [HeaderKey: Entry], counter: UInt64, last: (key: HeaderKey, entry: Entry)?)>(([:], 0, nil))

    init(capacity: Int, timeToLive: TimeInterval) {
        self.capacity = max(1, capacity)
        self.timeToLive = timeToLive
    }

    /// The leaf key of a chain verified before, if that verification still holds for `date` at `now`.
    func key(for header: ArraySlice<UInt8>, validAt date: Date, now: Date) -> PublicKey? {
        // The header found last, compared in place: one store signs with one chain for months, so most lookups find it
        // without copying and hashing ~2.5 KiB.
        let found: Entry? = entries.withLock { state in
            if let last = state.last, last.key.equals(header), now < last.entry.expires { return last.entry }
            let key = HeaderKey(header)
            guard let entry = state.map[key] else { return nil }
            guard now < entry.expires else {
                state.map[key] = nil
                state.last = nil
                return nil
            }
            state.last = (key, entry)
            return entry
        }
        guard let found else { return nil }
        return (found.validFrom...found.validUntil).contains(date) ? found.leafKey : nil
    }

    func insert(_ header: ArraySlice<UInt8>, leafKey: PublicKey, validFrom: Date, validUntil: Date, now: Date) {
        let key = HeaderKey(header)
        entries.withLock { state in
            if state.map.count >= capacity, state.map[key] == nil,
               let oldest = state.map.min(by: { $0.value.inserted < $1.value.inserted })?.key {
                state.map[oldest] = nil
            }
            state.counter += 1
            state.last = nil
            state.map[key] = Entry(
                leafKey: leafKey, validFrom: validFrom, validUntil: validUntil,
                expires: now.addingTimeInterval(timeToLive), inserted: state.counter)
        }
    }
}

/// The header bytes as a dictionary key, hashed in bulk (a JWS header with x5c is ~2.5 KiB).
struct HeaderKey: Hashable {
    let bytes: [UInt8]

    init(_ slice: ArraySlice<UInt8>) { bytes = Array(slice) }

    func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    /// Whether `slice` holds these bytes (compared with `memcmp`).
    func equals(_ slice: ArraySlice<UInt8>) -> Bool {
        guard slice.count == bytes.count else { return false }
        return bytes.withUnsafeBytes { mine in
            slice.withUnsafeBytes { theirs in
                guard let mine = mine.baseAddress, let theirs = theirs.baseAddress else { return true } // both empty
                return memcmp(mine, theirs, bytes.count) == 0
            }
        }
    }
}
