import PurchaseDomain
import CommandLineOptions
import Crypto
import Foundation
import JSON
import JSONSchema
import Kafka
import PipelineHarness
import PurchaseEvents
import PurchaseStore
import StoreFixtures
import Synchronization

/// `iap-harness bench [--store URL] [--purchases N] [--users N] [--rate R] [--latency-seconds S] [--partitions P] [--google-play] [--json]`:
/// the pipeline's speed on this machine and broker, beside librdkafka's own.
///
/// 1. Raw passthrough: N messages of a submission's size produced to and consumed from one topic, concurrently.
/// 2. Throughput: N signed purchases submitted at once to the verifier, granter and finisher (worker processes);
///    the finisher finishes each through a stand-in App Store Server API in this process; the clock stops at
///    the last `transaction.finished`. Hop efficiency = purchases/s × 4 hops ÷ raw messages/s.
/// 3. Latency: purchases offered at a fixed rate; submitted → `transaction.finished` seen, p50 and p99.
/// With `--google-play` a third of the purchases are Google Play coins, each asked of a stand-in Android Publisher API by
/// the verifier and consumed there by the finisher (one call each, not batched).
/// Peak RSS of each worker comes from /proc (VmHWM), and the CPU time per purchase of each worker and of the whole machine
/// over the throughput run from /proc too; per-stage rates from the workers' /metrics. Then the books of the
/// run (`PipelineBooks`): exit 1 unless each purchase was granted once and finished once.
enum BenchPipelineCommand {
    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--brokers", "--kafka", "--store", "--purchases", "--users", "--rate", "--latency-seconds",
                                                             "--partitions"], flags: ["--json", "--google-play"])
        let total = try options.int("--purchases") ?? 50_000
        let users = try options.int("--users") ?? 5_000
        let rate = try options.int("--rate") ?? 1_000
        let latencySeconds = try options.int("--latency-seconds") ?? 10
        let partitions = try options.int("--partitions") ?? 4
        guard total >= 100, users >= 1, rate >= 1, latencySeconds >= 1, partitions >= 1 else { throw UsageError("bench: counts must be positive (--purchases ≥ 100)") }
        let json = options.flags.contains("--json")
        let say: (String) -> Void = { line in FileHandle.standardError.write(Data((line + "\n").utf8)) }
        let kafka = try options.kafkaConfiguration()
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("iap-bench-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let storeURL = options.string("--store") ?? ProcessInfo.processInfo.environment["IAP_STORE_URL"] ?? "sqlite:" + work.appendingPathComponent("bench.sqlite").path
        let prefix = "bench-\(UUID().uuidString.prefix(6).lowercased())."
        let schemas = try JSONSchemaRegistry.eventSchemas()
        let codec = EventCodec(schemas: schemas, source: "/iap-pipeline/bench", topicPrefix: prefix)
        let admin = try KafkaAdmin(kafka: kafka)
        try await admin.createTopics(codec.pipelineTopics + [prefix + "raw"], partitions: Int32(partitions))
        let store = try SQLPurchaseStore(url: storeURL)
        try await store.migrate()
        let durability = try await store.durability()
        say("bench: \(total) purchases for \(users) users, \(partitions) partitions, store \(store.location) "
            + "(\(durability.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))), broker \(kafka.bootstrapServers ?? "")")

        // Signed purchases, made before any clock starts: the throughput run's, then the paced ones, in purchase order.
        let pki = try TestPKI.make(name: "iap-pipeline bench")
        let latencyCount = rate * latencySeconds
        var plan = PurchaseInput.Plan(unique: total + latencyCount, users: users, firstTransactionId: 3_000_000_000)
        plan.userPrefix = "bench-user-"
        plan.shuffled = false
        // With Google Play: a third of the purchases (every third) are its coins.
        let googlePlay = options.flags.contains("--google-play") ? try StandInGooglePlay() : nil
        if googlePlay != nil {
            plan.products = [PurchaseInput.Product(id: "coins.500", coins: 500), PurchaseInput.Product(id: "coins.100", coins: 100),
                             PurchaseInput.Product(id: "coins.100", store: .googleplay, kind: .coins(100))]
        }
        let input = try PurchaseInput.make(plan, pki: pki, codec: codec, now: Date(), googlePlay: googlePlay)
        let messages = input.messages
        say("signed \(messages.count) purchases")

        // 1. Raw passthrough on the same broker, same message size.
        let raw = try await rawPassthrough(kafka: kafka, topic: prefix + "raw", template: messages[0], count: total)
        say(String(format: "raw librdkafka passthrough: %.0f messages/s", raw))

        // The workers, with the stand-in App Store Server API (every Finish Transaction accepted).
        let appStore = try StandInAppStore()
        let workers = try WorkerProcesses.withStandInStores(directory: work, kafka: kafka, storeURL: storeURL, prefix: prefix, pki: pki, schemas: schemas,
                                                              catalog: PurchaseInput.catalog, appStore: appStore, googlePlay: googlePlay)
        defer { workers.stopAll() }
        let stages = ["iap-verifier", "iap-granter", "iap-finisher"]
        for name in stages { try workers.start(name) }
        let watcher = try PipelineWatcher(kafka: kafka, codec: codec, groupID: prefix + "bench-watcher")
        let ports = try await workers.waitUntilReady(stages, say: say) { watcher.isAssigned ? nil : "watcher not assigned" }
        let producer = try KafkaProducer(configuration: .init(kafka: kafka))
        // The machine's speed just before the throughput run (workers ready and idle) and just after it: this shared host's
        // runs a few minutes apart differ by a third, all processes alike, and this says which kind of minutes a run had.
        let ecdsaBefore = try ecdsaVerificationsPerSecond(seconds: 1)
        say(String(format: "one core: %.0f ECDSA P-256 verifications/s", ecdsaBefore))

        // 2. Throughput: everything at once. CPU time counted over it: each worker's, PostgreSQL's processes', the
        // broker's, this process's (its stand-in APIs, watcher and producer), and the whole machine's.
        let harness = ProcessInfo.processInfo.processIdentifier
        func cpu() -> [String: Double] {
            var seconds = ["iap-harness": ProcessAccounting.cpuSeconds(harness) ?? 0,
                           "postgres": ProcessAccounting.cpuSeconds(ofProcessesNamed: "postgres"),
                           "broker": ProcessAccounting.cpuSeconds(ofProcessesNamed: "tansu")]
            for name in stages { seconds[name] = workers.pid(of: name).flatMap(ProcessAccounting.cpuSeconds) ?? 0 }
            return seconds
        }
        let cpuAtStart = cpu()
        let machineAtStart = ProcessAccounting.machineTime()
        let throughputStart = Date()
        for chunk in stride(from: 0, to: total, by: 5_000) {
            for result in await producer.send(contentsOf: Array(messages[chunk..<min(total, chunk + 5_000)])) { _ = try result.get() }
        }
        say(String(format: "submitted %d in %.1f s", total, Date().timeIntervalSince(throughputStart)))
        // A worker that exited, or a broker or store that went away, ends the run at once or after two minutes without
        // a purchase finished, not after the whole timeout.
        func requireWorkers() throws {
            for name in stages where workers.replicas(of: name).isEmpty {
                throw HarnessError("\(name) exited during the run; its log: \(workers.logFile(of: name).path)")
            }
        }
        // Polled every 20 ms: the CPU times and the cores' shares are read when it returns, and polled twice a second they
        // took in up to half a second of a machine idle after the last purchase. Progress is said in tenths.
        let tenth = max(1, total / 10)
        try await waitFor(say, "all \(total) finished", timeout: max(600, Double(total) / 20), stalledAfter: 120, every: .milliseconds(20)) {
            try requireWorkers()
            let finished = watcher.read { $0.firstFinishedAt.count }
            return finished >= total ? nil : "finished \(finished / tenth * tenth)+/\(total)"
        }
        let throughputSeconds = (watcher.read(\.lastFirstFinishedAt) ?? Date()).timeIntervalSince(throughputStart)
        var cpuMilliseconds = cpu().merging(cpuAtStart) { end, start in (end - start) * 1000 / Double(total) }
        // What the machine's cores did meanwhile: a run with no idle time and much stolen was bound by what the
        // hypervisor left it, which moves from hour to hour on a shared host.
        let machine = ProcessAccounting.machineTime().flatMap { end in machineAtStart.map { end - $0 } }
        cpuMilliseconds["machine"] = (machine?.busy ?? 0) * 1000 / Double(total)
        let machineShares: [String: Double] = machine.map { time in
            let all = max(time.busy + time.idle + time.stolen, .leastNonzeroMagnitude)
            return ["busy": time.busy / all, "idle": time.idle / all, "stolen": time.stolen / all]
        } ?? [:]
        let endToEnd = Double(total) / throughputSeconds
        let ecdsaAfter = try ecdsaVerificationsPerSecond(seconds: 1)
        say(String(format: "one core: %.0f ECDSA P-256 verifications/s", ecdsaAfter))
        let ecdsaRate = (ecdsaBefore + ecdsaAfter) / 2
        let perThousandVerifications = endToEnd / ecdsaRate * 1000
        var stageRates: [String: Double] = [:]
        var handlerMilliseconds: [String: Double] = [:]
        var publishMilliseconds: [String: Double] = [:]
        var batchSizes: [String: Double] = [:]
        for (name, port) in ports {
            let metrics = await localHTTPGet(port: port, path: "/metrics").body
            func value(_ prefix: String) -> Double {
                metrics.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
            }
            stageRates[name] = value("iap_messages_total{outcome=\"handled\"") / throughputSeconds
            // Mean time in the handler (store transaction + publishing + the broker's ack), per message.
            handlerMilliseconds[name] = value("iap_handler_duration_seconds_sum") / max(1, value("iap_handler_duration_seconds_count")) * 1000
            publishMilliseconds[name] = value("iap_publish_duration_seconds_sum") / max(1, value("iap_publish_duration_seconds_count")) * 1000
            // Messages a store transaction decided: the per-batch costs (statements, commit, produce request) spread over them.
            batchSizes[name] = value("iap_batch_size_sum") / max(1, value("iap_batch_size_count"))
        }

        // 3. Latency at a fixed offered rate.
        let latencyMessages = Array(messages[total...])
        let latencyIds = input.unique[total...].map(\.transactionId)
        let sentAt = Mutex<[TransactionID: Date]>([:])
        let batch = max(1, rate / 100)
        let latencyStart = ContinuousClock.now
        for (index, start) in stride(from: 0, to: latencyMessages.count, by: batch).enumerated() {
            try await Task.sleep(until: latencyStart + .milliseconds(10 * index), clock: .continuous)
            let slice = Array(latencyMessages[start..<min(latencyMessages.count, start + batch)])
            let stamp = Date()
            sentAt.withLock { sent in for id in latencyIds[start..<min(latencyIds.count, start + batch)] { sent[id] = stamp } }
            Task { for result in await producer.send(contentsOf: slice) { _ = try result.get() } }
        }
        try await waitFor(say, "the paced purchases finished", timeout: 600, stalledAfter: 120) {
            try requireWorkers()
            let finished = watcher.read { $0.firstFinishedAt.count }
            return finished >= total + latencyCount ? nil : "finished \(finished - total)/\(latencyCount)"
        }
        let finishedAt = watcher.read(\.firstFinishedAt)
        let latencies = sentAt.withLock { $0 }.compactMap { id, sent in finishedAt[id].map { $0.timeIntervalSince(sent) } }.sorted()
        let p50 = latencies[latencies.count / 2]
        let p99 = latencies[min(latencies.count - 1, Int(Double(latencies.count) * 0.99))]

        var rss: [String: Double] = [:]
        for name in stages { rss[name] = workers.pid(of: name).flatMap(ProcessAccounting.peakRSSMiB) ?? -1 }
        await producer.shutdown()
        workers.stopAll()
        // The books of the whole run, once every output is in: each purchase granted once and finished once.
        try await waitFor(say, "every grant answer read", timeout: 120) {
            let answers = watcher.read { $0.grantAnswers + $0.alreadyGrantedAnswers }
            return answers >= input.unique.count ? nil : "\(answers)/\(input.unique.count) grant answers"
        }
        let books = try await PipelineBooks.check(input: input, seen: watcher.seen, store: store, finishCalls: appStore.api.finishTimes)
        await watcher.stop()
        appStore.api.server.shutdown()

        let efficiency = endToEnd * 4 / raw
        let googlePlayViolations = googlePlay?.completionViolations(input.unique) ?? []
        googlePlay?.api.server.shutdown()
        let report: [String: JSONValue] = [
            "purchases": .integer(Int64(total)),
            "googlePlayPurchases": .integer(Int64(input.purchases(of: .googleplay).count)),
            "googlePlayCompletedOnce": .integer(Int64(input.purchases(of: .googleplay).count - googlePlayViolations.count)), "store": .string(store.location.hasPrefix("sqlite:") ? "sqlite" : "postgres"),
            "partitions": .integer(Int64(partitions)), "storeDurability": .object(durability.mapValues(JSONValue.string)),
            "endToEndPurchasesPerSecond": .number(endToEnd.rounded()), "rawPassthroughMessagesPerSecond": .number(raw.rounded()),
            "hopEfficiency": .number(thousandths(efficiency)), "ecdsaVerificationsPerSecondOneCore": .number(ecdsaRate.rounded()),
            "ecdsaVerificationsPerSecondBeforeAndAfter": .array([.number(ecdsaBefore.rounded()), .number(ecdsaAfter.rounded())]),
            "purchasesPerThousandECDSAVerifications": .number((perThousandVerifications * 10).rounded() / 10),
            "offeredRate": .integer(Int64(rate)), "latencyP50Seconds": .number(thousandths(p50)),
            "latencyP99Seconds": .number(thousandths(p99)),
            "stageMessagesPerSecond": .object(stageRates.mapValues { .number($0.rounded()) }),
            "peakRSSMiB": .object(rss.mapValues { .number(($0 * 10).rounded() / 10) }),
            "cpuMillisecondsPerPurchase": .object(cpuMilliseconds.mapValues { .number(thousandths($0)) }),
            "machineShareDuringThroughput": .object(machineShares.mapValues { .number(thousandths($0)) }),
            "meanHandlerMilliseconds": .object(handlerMilliseconds.mapValues { .number(($0 * 100).rounded() / 100) }),
            "meanPublishMilliseconds": .object(publishMilliseconds.mapValues { .number(($0 * 100).rounded() / 100) }),
            "meanBatchSize": .object(batchSizes.mapValues { .number(($0 * 10).rounded() / 10) }),
            "finishTransactionCalls": .integer(Int64(books.finishCalls)),
            "books": .object(["grantedOnce": .integer(Int64(books.grantedOnce)), "finished": .integer(Int64(books.finished)),
                              "violations": .array(books.violations.map(JSONValue.string))]),
        ]
        let table = [
            ("end-to-end (submitted → finished)", String(format: "%.0f purchases/s over %.1f s", endToEnd, throughputSeconds)),
            ("raw librdkafka passthrough", String(format: "%.0f messages/s", raw)),
            ("hop efficiency (×4 hops ÷ raw)", String(format: "%.3f", efficiency)),
            ("the machine's speed", String(format: "%.0f ECDSA P-256 verifications/s on one core, mean of %.0f before the run and %.0f after (%.1f purchases/s per 1,000 of them)",
                                          ecdsaRate, ecdsaBefore, ecdsaAfter, perThousandVerifications)),
            ("latency at \(rate)/s", String(format: "p50 %.3f s, p99 %.3f s", p50, p99)),
            ("CPU per purchase (throughput run)", String(format: "%.3f ms on the machine: ", cpuMilliseconds["machine"] ?? 0)
                + (stages + ["postgres", "broker", "iap-harness"]).map { $0 + String(format: " %.3f", cpuMilliseconds[$0] ?? 0) }.joined(separator: ", ")),
            ("the cores meanwhile", String(format: "%.0f %% busy, %.0f %% idle, %.0f %% taken by the hypervisor (steal)",
                                           100 * (machineShares["busy"] ?? 0), 100 * (machineShares["idle"] ?? 0), 100 * (machineShares["stolen"] ?? 0))),
        ] + stages.map {
            ("\($0)", String(format: "%.0f messages/s, %.1f ms per message (%.1f ms of it awaiting the ack), peak RSS %.1f MiB",
                              stageRates[$0] ?? 0, handlerMilliseconds[$0] ?? 0, publishMilliseconds[$0] ?? 0, rss[$0] ?? -1))
        }
        for (label, value) in table { print(label.padding(toLength: 38, withPad: " ", startingAt: 0) + value) }
        if googlePlay != nil {
            print("Google Play".padding(toLength: 38, withPad: " ", startingAt: 0)
                  + "\(input.purchases(of: .googleplay).count) purchases, each asked of and consumed at the stand-in API once: "
                  + (googlePlayViolations.isEmpty ? "yes" : "NO (\(googlePlayViolations.count))"))
        }
        let violations = books.violations + googlePlayViolations.prefix(20)
        print(violations.isEmpty ? "books balance: each of the \(books.grantedOnce) purchases granted once and finished once"
                                 : "BOOKS DO NOT BALANCE:\n" + violations.map { "  - \($0)" }.joined(separator: "\n"))
        if json { print(JSONValue.object(report).serializedText) }
        return violations.isEmpty ? 0 : 1
    }

    /// ECDSA P-256 verifications (SHA-256 of a 1 KiB message, then the signature, as a transaction's is checked) per
    /// second on this thread, over about `seconds`: what one core does at the moment, a yardstick for runs made minutes apart.
    static func ecdsaVerificationsPerSecond(seconds: Double) throws -> Double {
        let key = try PrivateKey.generateP256()
        let message = Data(repeating: 0x2E, count: 1024)
        let signature = try key.signES256(message)
        let publicKey = try key.publicKey()
        guard publicKey.verifyES256(message: message, rawSignature: signature) else { throw HarnessError("a signature made here does not verify") }
        return BenchVerifyCommand.measure(seconds: seconds) { _ = publicKey.verifyES256(message: message, rawSignature: signature) }
    }

    /// Produce and consume `count` copies of `template` on `topic` at the same time; messages per second. The consumer
    /// prefetches as librdkafka does by default (100,000 messages and 64 MiB, 1 MiB a partition a fetch, refilled after a
    /// second), as a client
    /// tuned for throughput alone would, not with the workers' small prefetch (which bounds their memory): the broker's
    /// ceiling, not ours.
    static func rawPassthrough(kafka: KafkaConfiguration, topic: String, template: KafkaProducerMessage, count: Int) async throws -> Double {
        var tuned = kafka
        tuned["queued.min.messages"] = "100000"
        tuned["fetch.queue.backoff.ms"] = "1000"
        tuned["fetch.message.max.bytes"] = "1048576"
        tuned["queued.max.messages.kbytes"] = "65536"
        let consumer = try KafkaConsumer(configuration: .init(kafka: tuned, groupID: topic + "-group", topics: [topic], maxBufferedPerPartition: 100_000))
        let received = Atomic<Int>(0)
        let done = Task {
            try await consumer.run { _ in
                if received.add(1, ordering: .relaxed).newValue >= count { consumer.triggerGracefulShutdown() }
            }
        }
        while consumer.assignment.isEmpty { try await Task.sleep(for: .milliseconds(50)) }
        let producer = try KafkaProducer(configuration: .init(kafka: kafka))
        let started = Date()
        for chunk in stride(from: 0, to: count, by: 5_000) {
            let batch = (chunk..<min(count, chunk + 5_000)).map { index in
                KafkaProducerMessage(topic: topic, key: Data("raw-\(index % 5_000)".utf8), value: template.value, headers: template.headers)
            }
            for result in await producer.send(contentsOf: batch) { _ = try result.get() }
        }
        try await done.value
        let seconds = Date().timeIntervalSince(started)
        await producer.shutdown()
        return Double(count) / seconds
    }

}
