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
    private let entries = Mutex<(map: [Substring: Entry], counter: UInt64)>(([:], 0))

    init(capacity: Int, timeToLive: TimeInterval) {
        self.capacity = max(1, capacity)
        self.timeToLive = timeToLive
    }

    /// The leaf key of a chain verified before, if that verification still holds for `date` at `now`.
    func key(for header: Substring, validAt date: Date, now: Date) -> PublicKey? {
        entries.withLock { state in
            guard let entry = state.map[header] else { return nil }
            guard now < entry.expires else {
                state.map[header] = nil
                return nil
            }
            return (entry.validFrom...entry.validUntil).contains(date) ? entry.leafKey : nil
        }
    }

    func insert(_ header: Substring, leafKey: PublicKey, validFrom: Date, validUntil: Date, now: Date) {
        entries.withLock { state in
            if state.map.count >= capacity, state.map[header] == nil,
               let oldest = state.map.min(by: { $0.value.inserted < $1.value.inserted })?.key {
                state.map[oldest] = nil
            }
            state.counter += 1
            // Own the key's storage: a Substring would keep the whole JWS string alive.
            state.map[Substring(String(header))] = Entry(
                leafKey: leafKey, validFrom: validFrom, validUntil: validUntil,
                expires: now.addingTimeInterval(timeToLive), inserted: state.counter)
        }
    }
}
