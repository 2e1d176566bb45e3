import Foundation
import JSON
import Kafka
import PurchaseEvents
import PurchaseStore
import StageTestSupport
import StoreFixtures
import Testing
import TestSupport

/// A message that traps its worker every time it is handled is dead-lettered `crashedWorker` after two crashes, and the
/// messages before and after it on its partition are handled as usual: the real `iap-verifier` executable, restarted
/// after each crash as a supervisor would, with the test-only fault that traps on a marked message. The second trap,
/// with the message alone in hand, leaves the trap record that names it.
@Suite(TestServices.broker, .timeLimit(.minutes(5)))
struct CrashedWorkerTests {
    @Test func aMessageThatCrashesTheWorkerIsDeadLetteredAfterTwoCrashesAndItsPartitionGoesOn() async throws {
        let servers = try TestServices.requireBrokers()
        let pki = try TestPKI.make()
        let engine = StoreEngine.available.last ?? .sqlite // PostgreSQL when there is one: two processes share the store
        let storeURL = try await engine.freshURL()
        let pipeline = try await PipelineTests.start(servers: servers, pki: pki, storeURL: storeURL)
        // The verifier runs as an executable instead of in this process, where a trap would end the test.
        pipeline.runners[0].triggerGracefulShutdown()
        try await pipeline.tasks[0].value
        var variables = pipeline.variables
        variables["IAP_STORE_URL"] = storeURL
        variables["IAP_TEST_FAULT_MARK"] = "crash-me"
        variables["IAP_LEAVE_GROUP"] = "false"
        // A group of its own: the in-process verifier's group may still be settling after it left.
        variables["IAP_GROUP_PREFIX", default: ""] += "crash."
        variables["IAP_LOG_LEVEL"] = "info"
        let trapRecords = FileManager.default.temporaryDirectory.appendingPathComponent("trap-records-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: trapRecords) }
        variables["IAP_TRAP_RECORDS"] = trapRecords
        func startVerifier() throws -> ExecutableProcess { try ExecutableProcess("iap-verifier", [], environment: variables) }

        // One user, so one partition: purchases before and after the marked one.
        let signer = JWSSigner(pki: pki)
        let now = Date()
        var submissions: [KafkaProducerMessage] = []
        for index in 0..<9 {
            let jws = try signer.sign(AppStorePayloads.transaction(transactionId: "\(5_000_000 + index)", productId: "coins.100",
                                                                   bundleId: PipelineTests.bundle, purchaseDate: now))
            var message = try pipeline.codec.message(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws,
                                                                       userId: "crash-user", submittedAt: now, source: .client), time: now)
            if index == 4 { message.headers.append(KafkaHeader(key: "iap-fault", string: "crash-me")) }
            submissions.append(message)
        }
        let deadLetters = Locked<[JSONValue]>([])
        let deadLetterConsumer = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: uniqueName("dl"),
                                                                        topics: [pipeline.codec.topic(.deadLetter)]))
        let reading = RunningConsumer(deadLetterConsumer) { message in
            if let value = message.value, let event = JSONValue.parse(value) { deadLetters.withLock { $0.append(event) } }
        }

        var verifier = try startVerifier()
        do { _ = try await verifier.waitForLog("partitions assigned") } catch { print(verifier.log.suffix(30).joined(separator: "\n")); throw error }
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        for result in await producer.send(contentsOf: submissions) { _ = try result.get() }

        // Restarted after each crash, as Kubernetes restarts a container.
        var crashes: [Int32] = []
        try await waitUntil("the eight unmarked purchases are finished", timeout: .seconds(240)) {
            if !verifier.process.isRunning {
                crashes.append(verifier.process.terminationStatus)
                print("crash \(crashes.count) of iap-verifier:\n" + verifier.log.filter { $0.contains("resuming") || $0.contains("Fatal error") }.joined(separator: "\n"))
                #expect(crashes.count <= 2, "a third crash: \(verifier.log.suffix(5))")
                if crashes.count > 2 { throw CancellationError() }
                verifier = try startVerifier()
            }
            return try await pipeline.store.statistics().purchasesByState[.finished] == 8
        }
        try await waitUntil("the marked message is dead-lettered") { !deadLetters.withLock { $0 }.isEmpty }
        #expect(crashes == [SIGILL, SIGILL] || crashes == [SIGTRAP, SIGTRAP], "two crashes by a trap: \(crashes)")
        let letters = deadLetters.withLock { $0 }
        #expect(letters.count == 1)
        let data = letters.first?.objectValue // binary mode: the value is the event's data
        #expect(data?["reason"]?.stringValue == "crashedWorker")
        #expect(data?["stage"]?.stringValue == "verifier")
        #expect(data?["sourceOffset"]?.int64Value != nil)
        #expect(data?["detail"]?.stringValue?.contains("trapped while it had this message alone in hand") == true)
        // Nothing about the marked purchase was recorded, and every other one was verified once.
        #expect(try await pipeline.store.statistics().purchasesByState.values.reduce(0, +) == 8)
        #expect(verifier.log.contains { $0.contains("the worker trapped on a message handled alone") })
        #expect(verifier.log.contains { $0.contains("a message trapped the worker: dead-lettered") })
        #expect(try FileManager.default.contentsOfDirectory(atPath: trapRecords).isEmpty, "the record is taken once")

        _ = try await verifier.terminate()
        try await reading.stop()
        try await pipeline.stop()
    }
}
