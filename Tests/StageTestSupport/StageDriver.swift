import Kafka
import WorkerRuntime

/// Hands `messages` (one partition's, in order) to `stage` as the runner does: a run to `handle(batch:)`; the first
/// message the batch did not answer alone to `handle(_:)`; the rest batched anew. One result per message, in order (a
/// failure is where the runner would retry, park or dead-letter the message, and then go on).
public func handleAsTheRunnerDoes(_ stage: some MessageStage, _ messages: [KafkaMessage]) async -> [Result<StageResult, any Error>] {
    var results: [Result<StageResult, any Error>] = []
    var rest = messages[...]
    while !rest.isEmpty {
        let answered = await stage.handle(batch: Array(rest)).prefix(rest.count)
        results += answered
        rest = rest.dropFirst(answered.count)
        if case .failure? = answered.last { continue }
        guard let alone = rest.first else { break }
        do { results.append(.success(try await stage.handle(alone))) } catch { results.append(.failure(error)) }
        rest = rest.dropFirst()
    }
    return results
}
