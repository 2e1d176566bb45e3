import Foundation
import Kafka
import Synchronization

/// Crash containment: a message that crashes the worker is found and dead-lettered (`crashedWorker`), and the rest of
/// its partition goes on.
///
/// Before a partition's messages are handed to the stage, their offsets are marked in the `InFlightLedger`; the holder
/// of a partition reads the mark once per assignment (a process's own marks are known to it after that). A mark left
/// `handling` offsets the partition resumes at or before was left by a crash: those offsets become suspects, handed to
/// the stage one at a time, each marked alone and handled with nothing else in the process (`handling`); one the worker
/// traps on is named by its trap record (`TrapRecords`), made a culprit by the next process of the stage
/// (`confirmTraps`), and dead-lettered without being handed to the stage again (`CrashEvidence`). An interrupted batch
/// (shutdown, revocation) clears its mark, so neither counts as a crash; a batch done before a shutdown leaves its
/// mark, which the partition's committed offset has passed.
extension StageRunner {
    /// What a runner knows of the marks of the partitions it holds (nil without an `InFlightLedger`).
    final class CrashGuard: Sendable {
        let ledger: any InFlightLedger
        /// The mark each held partition has, by the assignment that wrote it: valid only while that assignment lasts.
        private let known = Mutex<[TopicPartition: (assignment: UInt64, mark: InFlightMark)]>([:])

        init(ledger: any InFlightLedger) { self.ledger = ledger }

        /// The mark this process wrote for `partition` in the current assignment; nil when it must be read.
        func knownMark(_ partition: TopicPartition, assignment: UInt64?) -> InFlightMark? {
            guard let assignment else { return nil }
            return known.withLock { known in known[partition].flatMap { $0.assignment == assignment ? $0.mark : nil } }
        }

        func remember(_ mark: InFlightMark, _ partition: TopicPartition, assignment: UInt64?) {
            guard let assignment else { return }
            known.withLock { $0[partition] = (assignment, mark) }
        }
    }

    /// Handles a partition's batch under its in-flight marks (see above); `completions` gets one per message handled.
    func processGuarded(batch messages: [KafkaMessage], guard crashGuard: CrashGuard,
                        into completions: inout [KafkaConsumer.Completion]) async throws {
        guard let first = messages.first else { return }
        var marks = try await PartitionMarks(self, crashGuard, resuming: first)
        do {
            for segment in CrashSegments.split(messages.map(\.offset), suspect: marks.evidence.suspect, culprits: marks.evidence.culprits) {
                switch segment {
                case .batch(let run):
                    try await marks.mark(messages[run.lowerBound].offset...messages[run.upperBound - 1].offset)
                    try await process(batch: Array(messages[run]), into: &completions)
                case .culprit(let index):
                    let message = messages[index]
                    let letter = StageResult.deadLetter(reason: "crashedWorker", detail: crashedWorkerDetail(message))
                    // Never handed to the stage again: a dead letter the broker does not take yet is tried again as it is.
                    let done = series.begin(metrics, started: .now)
                    defer { done() }
                    try await processWithRetries(message, first: .success(letter), parkable: false) { .success(letter) }
                    completions.append({})
                case .alone(let index):
                    let message = messages[index]
                    try await marks.mark(message.offset...message.offset)
                    completions.append(try await handleSuspect(message) { try await processAlone(message) })
                }
            }
        } catch {
            // Interrupted (shutdown, revocation) or failed: not a crash, so nothing is left in hand for the next holder.
            await marks.release()
            throw error
        }
    }

    /// Hands a record of the retry topic to the re-driver under its in-flight mark: the re-driver takes one record at a
    /// time; a culprit record (it trapped the worker as a suspect) has its original dead-lettered and its parking released.
    func redriveGuarded(_ record: KafkaMessage) async throws {
        guard let crashGuard else { return try await redrive(record) }
        var marks = try await PartitionMarks(self, crashGuard, resuming: record)
        if marks.evidence.culprits.contains(record.offset) {
            let original = ParkedRecord(record)
            let message = original?.original ?? record
            try await inPlace { try await self.deadLetter(message, reason: "crashedWorker", detail: self.crashedWorkerDetail(record)) }
            if let parking, let origin = original?.origin {
                try await inPlace { try await parking.withLedger { try await $0.releaseParked(origin) } }
            }
            return
        }
        do {
            try await marks.mark(record.offset...record.offset)
            if marks.evidence.suspect?.contains(record.offset) == true {
                try await handleSuspect(record) { try await redrive(record) }
            } else {
                try await redrive(record)
            }
        } catch {
            await marks.release()
            throw error
        }
    }

    /// Runs `body` as the suspect of a crash `message` is: its handling by the stage (`handling`) goes alone in the
    /// process, holding its trap record.
    private func handleSuspect<T>(_ message: KafkaMessage, _ body: () async throws -> T) async throws -> T {
        let record = TrapRecord(stage: stage.name, partition: TopicPartition(topic: message.topic, partition: message.partition), offset: message.offset)
        return try await Suspect.$current.withValue(record) { try await body() }
    }

    /// Runs the stage's handling of messages (`body`: `MessageStage.handle`, and the test-only trap) through the process's
    /// `HandlingGate`: beside every other handling, or, for a suspect of a crash (`Suspect.current`), with nothing else
    /// in hand in the process and its trap record held, so that if the process traps meanwhile, the record names this
    /// message and the next process of the stage makes it the culprit. Only the handling: the waits between retries,
    /// and the re-driver's wait for a parked message to fall due, hold nothing. Without an `InFlightLedger`, just `body`.
    func handling<T>(_ body: () async throws -> T) async rethrows -> T {
        guard crashGuard != nil else { return try await body() }
        guard let record = Suspect.current else { return try await HandlingGate.process.shared(body) }
        return try await HandlingGate.process.exclusive { try await TrapRecords.holding(record, body) }
    }

    /// The stage's answer to `message` alone, through the handling gate (`handling`).
    func handled(_ message: KafkaMessage) async throws -> StageResult {
        try await handling {
            trapIfMarked(CollectionOfOne(message))
            return try await stage.handle(message)
        }
    }

    /// The suspect of a crash the calling task is handling (`handleSuspect`).
    enum Suspect {
        @TaskLocal static var current: TrapRecord?
    }

    /// Makes the suspects that processes of this stage trapped on (their `TrapRecords` in `directory`) culprits in their
    /// partitions' marks, for whichever replica holds each partition to dead-letter. Before consuming.
    func confirmTraps(in directory: String, ledger: any InFlightLedger) async throws {
        for record in try TrapRecords.collect(directory: directory, stage: stage.name) {
            let fields: [String: any Sendable] = ["topic": record.partition.topic, "partition": record.partition.partition, "offset": record.offset]
            let mark = try await inPlace("reading the in-flight mark") { try await ledger.mark(stage: record.stage, partition: record.partition) }
            guard let mark, let confirmed = mark.confirmingTrap(at: record.offset) else {
                logger.info("a trap record the partition has moved past: its message, if still a suspect, is handled again alone", fields)
                continue
            }
            try await inPlace("naming a crash's culprit") {
                try await ledger.replaceMark(mark, with: confirmed, stage: record.stage, partition: record.partition)
            }
            logger.error("the worker trapped on a message handled alone: it is dead-lettered crashedWorker", fields)
        }
    }

    /// What a `crashedWorker` dead letter says.
    private func crashedWorkerDetail(_ message: KafkaMessage) -> String {
        logger.error("a message trapped the worker: dead-lettered", ["topic": message.topic, "partition": message.partition, "offset": message.offset])
        return "the \(stage.name) worker trapped while it had this message alone in hand, after a crash with it in flight: \(message.topic)[\(message.partition)]@\(message.offset)"
    }

    /// The marks of one partition while a holder works through what it was handed.
    struct PartitionMarks {
        let runner: StageRunner
        let crashGuard: CrashGuard
        let partition: TopicPartition
        let assignment: UInt64?
        /// What the mark found on resuming says.
        let evidence: CrashEvidence
        /// The mark as the ledger holds it now.
        private var current: InFlightMark
        /// Reads the partition's mark (once per assignment: after that the process's own marks are known) and judges it.
        init(_ runner: StageRunner, _ crashGuard: CrashGuard, resuming first: KafkaMessage) async throws {
            self.runner = runner
            self.crashGuard = crashGuard
            partition = TopicPartition(topic: first.topic, partition: first.partition)
            assignment = KafkaConsumer.handlingAssignment
            let previous: InFlightMark?
            let known = crashGuard.knownMark(partition, assignment: assignment)
            if let known {
                previous = known
            } else {
                let (stage, partition) = (runner.stage.name, partition)
                previous = try await runner.inPlace("reading the in-flight mark") { try await crashGuard.ledger.mark(stage: stage, partition: partition) }
            }
            // Read from the ledger: the assignment's first batch, which starts where the partition was committed.
            evidence = CrashEvidence(after: previous, resumingAt: first.offset, resumed: known == nil)
            current = previous ?? InFlightMark(handling: nil, suspect: nil)
            if evidence.crashed, let suspect = evidence.suspect {
                runner.count("crashesFound")
                runner.logger.warning("resuming after a crash: its messages go to the stage one at a time",
                                      ["topic": partition.topic, "partition": partition.partition, "offsets": "\(suspect.lowerBound)-\(suspect.upperBound)",
                                       "culprits": evidence.culprits.isEmpty ? "none yet" : evidence.culprits.map(String.init).joined(separator: ",")])
            }
        }

        /// Marks `handling` in flight, with the suspects the partition has not passed and the culprits, before the stage gets it.
        mutating func mark(_ handling: ClosedRange<Int64>) async throws {
            let next = InFlightMark(handling: handling, suspect: evidence.suspect.flatMap { $0.upperBound >= handling.upperBound ? $0 : nil },
                                    culprits: evidence.culprits)
            if next != current {
                let (stage, partition) = (runner.stage.name, partition)
                try await runner.inPlace("marking messages in flight") { try await crashGuard.ledger.setMark(next, stage: stage, partition: partition) }
                current = next
            }
            crashGuard.remember(next, partition, assignment: assignment)
        }

        /// Leaves nothing in hand: what this holder had was not a crash's. Its suspects and culprits stay for the next
        /// holder. Only while the ledger still holds this holder's mark: a holder interrupted late (past the revocation's
        /// wait) must not clear the mark of the partition's next holder.
        func release() async {
            let mark = InFlightMark(handling: nil, suspect: current.suspect, culprits: evidence.culprits)
            do {
                try await crashGuard.ledger.replaceMark(current, with: mark, stage: runner.stage.name, partition: partition)
                crashGuard.remember(mark, partition, assignment: assignment)
            } catch {
                // The next holder then takes what was in hand for a crash's: handled one at a time, never dead-lettered for this.
                runner.logger.warning("cannot clear the in-flight mark", ["topic": partition.topic, "partition": partition.partition, "error": "\(error)"])
            }
        }
    }

    /// Traps on a message carrying the fault header with the configured mark (`Configuration.faultMark`): the test-only
    /// crash that shows containment. Never set in a deployment.
    func trapIfMarked(_ messages: some Sequence<KafkaMessage>) {
        guard let faultMark = configuration.faultMark else { return }
        for message in messages where message.headers.contains(where: { $0.key == Self.faultHeader && $0.value == faultMark }) {
            fatalError("injected fault: \(message.topic)[\(message.partition)]@\(message.offset) carries the fault mark")
        }
    }

    /// The header a message carries to reach the test-only fault.
    public static let faultHeader = "iap-fault"
}
