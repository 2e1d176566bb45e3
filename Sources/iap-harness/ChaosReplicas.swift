import Foundation
import PipelineHarness
import JSON

/// Replicas of the verifier, granter and finisher joining and leaving their groups while purchases flow.
///
/// - `churn` (the default): per stage, a second replica joins early; it leaves (SIGTERM) mid-run and a third
///   joins at that moment, during the rebalance the leave started; the third leaves by SIGKILL late in the run.
///   Two joins and two leaves per stage, the first replica staying.
/// - `oneTwoOne` (`make scale`): per stage, a second replica joins at a third of the run and the first leaves
///   (SIGTERM) at two thirds; the second must have done work.
struct ReplicaPlan {
    enum Mode: String { case none, churn, oneTwoOne = "one-two-one" }
    enum Action { case join, leave(replica: Int, signal: Int32) }

    static let stages = ["iap-verifier", "iap-granter", "iap-finisher"]

    let mode: Mode
    private var events: [(stage: String, action: Action, at: Double)]
    private(set) var joins: [String: Int] = [:]
    private(set) var leaves: [String: Int] = [:]
    /// Input messages each replica had handled (outcome `handled`) when it left or the run ended (from its /metrics), by stage.
    private(set) var handled: [String: [Int: Int64]] = [:]
    /// Times each replica rejoined a stalled group (`iap_group_rejoins_total`), read as `handled` is, by stage.
    private(set) var rejoins: [String: [Int: Int64]] = [:]
    /// When each stage last had a replica join or leave.
    private(set) var lastEvent: [String: Date] = [:]

    /// The rejoins of all of `stage`'s replicas.
    func groupRejoins(of stage: String) -> Int64 { (rejoins[stage] ?? [:]).values.reduce(0, +) }

    init(mode: Mode) {
        self.mode = mode
        var generator = SystemRandomNumberGenerator()
        var events: [(String, Action, Double)] = []
        for stage in Self.stages {
            switch mode {
            case .none:
                break
            case .churn:
                let leaveAt = Double.random(in: 0.35...0.5, using: &generator)
                events += [(stage, .join, Double.random(in: 0.08...0.25, using: &generator)),
                           (stage, .leave(replica: 2, signal: SIGTERM), leaveAt), (stage, .join, leaveAt),
                           (stage, .leave(replica: 3, signal: SIGKILL), Double.random(in: 0.6...0.8, using: &generator))]
            case .oneTwoOne:
                events += [(stage, .join, 1.0 / 3), (stage, .leave(replica: 1, signal: SIGTERM), 2.0 / 3)]
            }
        }
        // In order of progress; a join at the same point as a leave comes right after it.
        self.events = events.enumerated().sorted { ($0.element.2, $0.offset) < ($1.element.2, $1.offset) }.map(\.element)
    }

    var isComplete: Bool { events.isEmpty }

    /// Joins and leaves due at `progress`, done in order; `say` reports each.
    mutating func perform(at progress: Double, workers: WorkerProcesses, say: (String) -> Void) async throws {
        while let next = events.first, next.at <= progress {
            events.removeFirst()
            lastEvent[next.stage] = Date()
            switch next.action {
            case .join:
                let replica = try workers.join(next.stage)
                joins[next.stage, default: 0] += 1
                say(String(format: "  replica %d of %@ joined at %.0f %%", replica, next.stage, progress * 100))
            case .leave(let replica, let signal):
                await record(next.stage, replica: replica, workers: workers)
                workers.leave(next.stage, replica: replica, signal: signal)
                leaves[next.stage, default: 0] += 1
                say(String(format: "  replica %d of %@ left (%@) at %.0f %%", replica, next.stage, signal == SIGKILL ? "SIGKILL" : "SIGTERM",
                           progress * 100))
            }
        }
    }

    /// Reads what each running replica handled, before the workers stop.
    mutating func recordRunning(_ workers: WorkerProcesses) async {
        for stage in Self.stages {
            for replica in workers.replicas(of: stage) { await record(stage, replica: replica, workers: workers) }
        }
    }

    /// What the plan requires beyond the books: in `oneTwoOne`, each stage's second replica handled messages.
    var violations: [String] {
        guard mode == .oneTwoOne else { return [] }
        return Self.stages.filter { (handled[$0]?[2] ?? 0) == 0 }.map { "the second replica of \($0) handled nothing" }
    }

    var summary: JSONValue {
        .object(Dictionary(uniqueKeysWithValues: Self.stages.map { stage in
            (stage, JSONValue.object([
                "joins": .integer(Int64(joins[stage] ?? 0)), "leaves": .integer(Int64(leaves[stage] ?? 0)),
                "handledByReplica": .object(Dictionary(uniqueKeysWithValues: (handled[stage] ?? [:]).map { (String($0.key), .integer($0.value)) })),
                "groupRejoins": .integer(groupRejoins(of: stage)),
            ]))
        }))
    }

    private mutating func record(_ stage: String, replica: Int, workers: WorkerProcesses) async {
        guard let port = try? await workers.port(of: stage, replica: replica) else { return }
        let metrics = await localHTTPGet(port: port, path: "/metrics")
        guard metrics.status == 200 else { return }
        let lines = metrics.body.split(separator: "\n")
        let sum = { (matching: (Substring) -> Bool) in
            Int64(lines.filter(matching).compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +))
        }
        handled[stage, default: [:]][replica] = sum { $0.hasPrefix("iap_messages_total{") && $0.contains("outcome=\"handled\"") }
        rejoins[stage, default: [:]][replica] = sum { $0.hasPrefix("iap_group_rejoins_total{") }
    }
}
