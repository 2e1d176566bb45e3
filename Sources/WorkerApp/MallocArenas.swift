import CMalloc

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
}
