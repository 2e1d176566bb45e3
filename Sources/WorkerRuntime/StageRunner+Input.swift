import Foundation
import Kafka

/// A partition's messages from the input: handed to the stage (in runs, or alone), their outputs published in order,
/// and transient failures retried in place until done, parked or dead-lettered.
extension StageRunner {
    /// Handles consecutive messages of a partition: runs of them whose keys have nothing parked go to the stage at
    /// once (`MessageStage.handle(batch:)`); a message the batch did not answer, or whose key has a parked message,
    /// goes through `processAlone(_:)`, and the run after it is formed anew (`BatchSplit`). One completion per
    /// message, in order.
    func process(batch messages: [KafkaMessage]) async throws -> [KafkaConsumer.Completion] {
        var completions: [KafkaConsumer.Completion] = []
        completions.reserveCapacity(messages.count)
        do {
            if let crashGuard {
                try await processGuarded(batch: messages, guard: crashGuard, into: &completions)
            } else {
                try await process(batch: messages, into: &completions)
            }
        } catch {
            // Interrupted (shutdown, revocation) or failed at a message: the ones before it are done and their offsets may
            // be stored; the partition's worker stops there.
            throw KafkaConsumer.BatchFailure(completions: completions, error: error)
        }
        return completions
    }

    func process(batch messages: [KafkaMessage], into completions: inout [KafkaConsumer.Completion]) async throws {
        let started = ContinuousClock.now
        var split = BatchSplit(count: messages.count)
        while !split.isDone {
            switch split.step(unparked: await unparked(messages[split.next...])) {
            case .alone(let index):
                completions.append(try await processAlone(messages[index]))
            case .batch(let run):
                let results = await handling {
                    trapIfMarked(messages[run])
                    return await stage.handle(batch: Array(messages[run]))
                }
                // What the stage answered was decided together; the rest is handled alone or batched again, and counted then.
                let answer = split.answered(results.count, of: run)
                if let size = answer.decidedTogether { metrics.observe(series.batchSize, Double(size)) }
                if answer.severalMessages { count("batches") }
                if answer.cut { count("batchesCut") }
                for (index, result) in zip(answer.final, results) {
                    completions.append(try await complete(messages[index], first: result, started: started))
                }
                if let alone = answer.alone { completions.append(try await processAlone(messages[alone])) }
            }
        }
    }

    /// How many messages from the start of `messages` have keys without a parked message (all of them without
    /// parking); none when the ledger cannot tell (the first message then goes alone, retried).
    private func unparked(_ messages: ArraySlice<KafkaMessage>) async -> Int {
        guard let parking else { return messages.count }
        let keys = messages.map(orderingKey)
        do {
            let parked = try await parking.withLedger { try await $0.parkedKeys(stage: stage.name, among: Set(keys.compactMap { $0 })) }
            return BatchSplit.unparked(keys, parked: parked)
        } catch {
            return 0
        }
    }

    /// Handles `message` alone and hands its outputs to the producer (see `complete`).
    func processAlone(_ message: KafkaMessage) async throws -> KafkaConsumer.Completion {
        let completion = try await complete(message, first: await attempt(message), started: ContinuousClock.now)
        metrics.observe(series.batchSize, 1) // handled alone: a batch of one
        return completion
    }

    /// Takes a message from the first outcome of its handling to done: outputs handed to the producer, or retried,
    /// parked or dead-lettered before it returns. The returned completion awaits the outputs' acknowledgement, so the
    /// next message of the partition is handled meanwhile (the consumer stores offsets only as completions return, in
    /// order). Outputs the broker did not take are sent again as they were, until it takes them: a broker refusing them
    /// refuses every partition's, and the message cannot be parked (later messages of the partition were handled
    /// already). Then the later messages' outputs, enqueued before and perhaps delivered first, are sent again after
    /// them (`OutputOrder`).
    func complete(_ message: KafkaMessage, first: Result<StageResult, any Error>,
                          started: ContinuousClock.Instant) async throws -> KafkaConsumer.Completion {
        let done = series.begin(metrics, started: started)
        guard case .success(.publish(let outputs)) = first else {
            defer { done() }
            try await processWithRetries(message, first: first) { [self] in await attempt(message) }
            return {}
        }
        let partition = TopicPartition(topic: message.topic, partition: message.partition)
        let mark = outputOrder.mark(partition)
        let sent = ContinuousClock.now
        let pending = await producer.enqueue(contentsOf: outputs)
        return { [self] in
            defer { done() }
            var first = Result<StageResult, any Error>.success(.publish(outputs))
            if let failure = await acknowledged(pending, sentAt: sent) {
                outputOrder.failed(partition)
                first = .failure(failure)
            }
            if outputOrder.failedSince(mark, partition) {
                // Ours failed, or an earlier message's did and was sent again after ours: sent (again) after those.
                try await processWithRetries(message, first: first, parkable: false) { .success(.publish(outputs)) }
            } else {
                countPublished(outputs)
                count("handled")
            }
        }
    }

    /// One attempt at a message from the input: the stage's answer, or `ParkedAhead` when its key has a parked message.
    private func attempt(_ message: KafkaMessage) async -> Result<StageResult, any Error> {
        do {
            if let parking, let key = orderingKey(message) {
                let ahead = try await parking.withLedger { try await $0.parked(stage: stage.name, key: key) }
                if let first = ahead.first { throw ParkedAhead(first: first) }
            }
            return .success(try await handled(message))
        } catch {
            return .failure(error)
        }
    }

    /// Handles a message from the input until it is done (outputs acknowledged, dead-lettered or parked), starting
    /// from the outcome of a first attempt and trying `again`; transient failures are retried with backoff while
    /// the partition stays assigned, and past `retryBudget` the message is parked when `parkable` (`MessageRetries`).
    func processWithRetries(_ message: KafkaMessage, first: Result<StageResult, any Error>, parkable: Bool = true,
                                    again: () async -> Result<StageResult, any Error>) async throws {
        var retries = MessageRetries(backoff: configuration.backoff, budget: parkable && parking != nil ? configuration.retryBudget : nil,
                                     started: ContinuousClock.now)
        var outcome = first
        while true {
            let failure: MessageRetries.Failure
            // Why it is parked, should it be; what the retry logs.
            let reason: String
            do {
                try await finish(message, outcome.get())
                return
            } catch let ahead as ParkedAhead {
                // Behind a parked message of the same key (possibly itself, parked before a crash): parked too.
                failure = .parkedAhead
                reason = "behind \(ahead.first), parked earlier with the same key"
            } catch let error where isTransient(error) {
                count("retries")
                failure = .transient(retryAfter: (error as? TransientError)?.retryAfter)
                reason = "\(error)"
            } catch {
                logger.error("cannot process message", ["topic": message.topic, "partition": message.partition, "offset": message.offset,
                                                        "error": "\(error)"])
                do {
                    try await deadLetter(message, reason: "processingFailed", detail: "\(error)")
                    return
                } catch where stage.isTransient(error) {
                    failure = .deadLetterUnpublished
                    reason = "\(error)"
                }
            }
            let delay: Duration
            switch retries.failed(failure, at: .now) {
            case .park(let otherwise):
                if try await parkTried(message, reason: reason) { return }
                delay = otherwise
            case .retry(let after):
                delay = after
            }
            if case .transient = failure {
                logger.warning("transient failure, retrying", ["topic": message.topic, "partition": message.partition, "offset": message.offset,
                                                               "attempt": retries.attempts, "delayMs": delay.milliseconds, "error": reason])
            }
            try await sleep(delay)
            outcome = await again()
        }
    }

    /// Does what the stage answered: publishes its outputs, its dead letter, or parks it to be asked again.
    private func finish(_ message: KafkaMessage, _ result: StageResult) async throws {
        switch result {
        case .publish(let outputs):
            try await publish(outputs)
            countPublished(outputs)
            count("handled")
        case .deadLetter(let reason, let detail):
            try await deadLetter(message, reason: reason, detail: detail)
        case .recheck(let outputs, let after):
            try await publish(outputs)
            countPublished(outputs)
            count("handled")
            if parking != nil {
                try await park(ParkedRecord(parking: message, stage: stage.name, reason: "re-check", answered: true, at: Date(),
                                            due: Date().addingTimeInterval(after.seconds)), recheck: true)
            }
        }
    }
}
