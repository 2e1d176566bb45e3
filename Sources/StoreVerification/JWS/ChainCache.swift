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
    private let entries = Mutex<(map: [HeaderKey: Entry], counter: UInt64)>(([:], 0))

    init(capacity: Int, timeToLive: TimeInterval) {
        self.capacity = max(1, capacity)
        self.timeToLive = timeToLive
    }

    /// The leaf key of a chain verified before, if that verification still holds for `date` at `now`.
    func key(for header: ArraySlice<UInt8>, validAt date: Date, now: Date) -> PublicKey? {
        let key = HeaderKey(header)
        return entries.withLock { state in
            guard let entry = state.map[key] else { return nil }
            guard now < entry.expires else {
                state.map[key] = nil
                return nil
            }
            return (entry.validFrom...entry.validUntil).contains(date) ? entry.leafKey : nil
        }
    }

    func insert(_ header: ArraySlice<UInt8>, leafKey: PublicKey, validFrom: Date, validUntil: Date, now: Date) {
        let key = HeaderKey(header)
        entries.withLock { state in
            if state.map.count >= capacity, state.map[key] == nil,
               let oldest = state.map.min(by: { $0.value.inserted < $1.value.inserted })?.key {
                state.map[oldest] = nil
            }
            state.counter += 1
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
}
