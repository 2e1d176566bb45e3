import CMalloc
import Synchronization
import WorkerRuntime

/// glibc's allocator gives a thread that allocates while another holds its arena an arena of its own, up to eight per
/// core, and memory freed into an arena stays with it. A worker's thirty-odd threads (librdkafka's, the HTTP client's,
/// the concurrency pool's) spread over many arenas that way: under the benchmark, two arenas held the verifier's peak RSS
/// at 58–61 MiB against 61–66 MiB (four pairs of runs; CPU per purchase within the runs' spread), the room its batches
/// need under the 64 MiB a worker is sized for.
enum MallocArenas {
    /// The number of arenas a worker keeps to, unless `MALLOC_ARENA_MAX` says otherwise.
    static let workerDefault: Int32 = 2

    /// Holds this process to `workerDefault` arenas, before its threads allocate; `MALLOC_ARENA_MAX` in the environment,
    /// which glibc read at start-up, is left to decide.
    static func limit(environment: [String: String]) {
        guard environment["MALLOC_ARENA_MAX"] == nil else { return }
        _ = mallopt(M_ARENA_MAX, workerDefault)
    }

    /// Hands the memory freed into the arenas back to the kernel (`malloc_trim`), each `interval` while work goes on and
    /// once more after it ended.
    ///
    /// glibc returns an arena's free memory only from the top of its heap, and only past a threshold: memory freed below a
    /// block still in use stays resident. After a burst of requests (each holding its body and the event made of it until
    /// the broker answers) the ingest's resident memory otherwise stayed near its peak, idle, its free blocks scattered
    /// between the few that outlived the burst. `malloc_trim` gives back every free page of every arena.
    final class Trimmer: Service {
        private let interval: Duration
        /// A count that changes while there is work (the ingest: requests answered).
        private let activity: @Sendable () -> Int
        private let stopping = Mutex(false)

        init(interval: Duration = .seconds(1), activity: @escaping @Sendable () -> Int) {
            self.interval = interval
            self.activity = activity
        }

        func run() async throws {
            var seen = activity()
            var quietTicks = 2
            while !stopping.withLock({ $0 }) {
                try await ContinuousClock().sleep(for: interval, unless: { stopping.withLock { $0 } })
                let now = activity()
                quietTicks = now == seen ? quietTicks + 1 : 0
                seen = now
                // The tick after the last work too: what it held (a connection's thread, a delivered message) goes after it answered.
                if quietTicks <= 1 { _ = malloc_trim(0) }
            }
        }

        func triggerGracefulShutdown() { stopping.withLock { $0 = true } }
    }
}
