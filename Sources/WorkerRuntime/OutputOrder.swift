import Kafka
import Synchronization

/// Keeps a partition's outputs in the order of its inputs when a delivery fails.
///
/// A runner hands a message's outputs to the producer and handles the next messages before they are acknowledged
/// (`StageRunner.complete`). When some fail — e.g. `_MSG_TIMED_OUT` after an outage longer than `message.timeout.ms`,
/// ending before the later outputs' timeouts — outputs enqueued after them may be delivered meanwhile, and the failed
/// ones, sent again, land after those. So each completion of the partition whose outputs were enqueued before such a
/// failure sends its outputs again once acknowledged: completions run in offset order, so they follow the failed ones
/// again, in order. The topic then holds those outputs twice (repeats, which change nothing), the last time in order.
/// Outputs published while a message is handled (a re-check's answer, a dead letter) are awaited there and not sent
/// again: a re-check's answer can still land ahead of an earlier message's outputs sent again.
final class OutputOrder: Sendable {
    /// Per input partition: deliveries of its outputs that failed.
    private let failures = Mutex<[TopicPartition: Int]>([:])

    /// Taken before a message's outputs are enqueued, for `failedSince`.
    func mark(_ partition: TopicPartition) -> Int { failures.withLock { $0[partition, default: 0] } }

    /// A delivery of outputs of a message of `partition` failed.
    func failed(_ partition: TopicPartition) { failures.withLock { $0[partition, default: 0] += 1 } }

    /// Whether a delivery of `partition`'s outputs failed since `mark` was taken.
    func failedSince(_ mark: Int, _ partition: TopicPartition) -> Bool { failures.withLock { $0[partition, default: 0] } != mark }
}
