#if canImport(Glibc)
import Glibc
#endif

/// The connection slots: who holds one, who may take one, and who gives one up for a newer connection.
extension HTTPServer {
    struct ConnectionState {
        var running = true
        var accepted = 0
        /// The connections being served, by descriptor. An entry goes before its descriptor is closed, so a descriptor
        /// found here under the lock is still this connection's.
        var connections: [Int32: Connection] = [:]
        /// Stamps each start of a wait for a request head: the longest waiting has the smallest.
        var waits: UInt64 = 0
    }

    struct Connection {
        let address: UInt32
        /// When it began waiting for its request head (a stamp of `waits`); nil while it reads a body or is answered.
        var waitingSince: UInt64?
        /// Its reads were shut for a newer connection: it ends within moments and holds no slot meanwhile.
        var evicted = false
    }

    enum Admission { case admitted, refused, afterEvictedEnd }

    /// Whether `descriptor`, just accepted from `address`, may be served: a slot is free (at most `maxConnections`, and
    /// `maxConnectionsPerAddress` from one address), or, with `evictsWaitingConnections`, one is taken from the
    /// connection that has waited longest for its request head (from the same address when that address is at its cap).
    /// `afterEvictedEnd`: ask again once an evicted connection has ended.
    func admit(_ descriptor: Int32, from address: UInt32) -> Admission {
        state.withLock { state in
            let holding = state.connections.values.filter { !$0.evicted }
            let full = holding.count >= configuration.maxConnections
            let addressFull = holding.count { $0.address == address } >= configuration.maxConnectionsPerAddress
            if full || addressFull {
                guard configuration.evictsWaitingConnections else { return .refused }
                // An evicted connection ends as soon as its thread runs: never more than twice the slots meanwhile.
                guard state.connections.count < 2 * configuration.maxConnections else { return .afterEvictedEnd }
                var victim: (descriptor: Int32, since: UInt64)?
                for (candidate, connection) in state.connections where !connection.evicted && (!addressFull || connection.address == address) {
                    if let since = connection.waitingSince, since < victim?.since ?? .max { victim = (candidate, since) }
                }
                guard let victim else { return .refused }
                // Its reads end (a blocked read returns at once), its writes do not: bytes it had already received are
                // still read, so a whole head that had arrived is answered. Under the lock: the descriptor is still its own.
                Glibc.shutdown(victim.descriptor, Int32(SHUT_RD))
                state.connections[victim.descriptor]?.evicted = true
            }
            state.waits += 1
            state.accepted += 1
            state.connections[descriptor] = Connection(address: address, waitingSince: state.waits)
            return .admitted
        }
    }

    /// `descriptor` waits for a request head (the next one on a kept-alive connection): it may be evicted.
    func waitingForHead(_ descriptor: Int32) {
        state.withLock { state in
            state.waits += 1
            state.connections[descriptor]?.waitingSince = state.waits
        }
    }

    /// `descriptor` has its request head: it reads the body and is answered without being evicted.
    func headReceived(_ descriptor: Int32) {
        state.withLock { $0.connections[descriptor]?.waitingSince = nil }
    }

    /// Gives up `descriptor`'s slot and closes it.
    func release(_ descriptor: Int32) {
        let ended = state.withLock { $0.connections.removeValue(forKey: descriptor) }
        close(descriptor)
        if ended?.evicted == true { evictedEnded.signal() }
    }
}
