import Foundation
import Kafka
import Testing
import TestSupport

/// Describing a consumer group while its broker fails, on a Tansu broker of the test's own.
@Suite(.timeLimit(.minutes(5)))
struct GroupDescriptionFaultTests {
    /// Describing a group while the broker's connections are cut, or it stops answering, fails with an error and
    /// never aborts the process; once the broker is back the group is described again. (librdkafka's Admin API
    /// `DescribeConsumerGroups` aborted the process here within seconds: see `KafkaAdmin.describeGroup`.)
    @Test(TestServices.pythonTools) func describingAGroupWhileItsBrokerFailsNeverAbortsTheProcess() async throws {
        // The broker behind a proxy whose connections the test cuts: a broker killed and restarted would lose its topics
        // (in memory), and librdkafka 2.8 can crash on such metadata changes (confluentinc/librdkafka#5280), which is
        // not what this test is about.
        let broker = try await ProxiedBroker()
        let (proxy, servers) = (broker.proxy, broker.bootstrapServers)
        let admin = try KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers, "log_level": "0"]))
        try await waitUntil("the broker answers") { (try? await admin.metadata(timeout: .seconds(2))) != nil }
        let topic = uniqueName("described")
        let group = uniqueName("g")
        try await admin.createTopics([topic], partitions: 4)
        let member = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group, topics: [topic]))) { _ in }
        try await waitUntil("the member owns partitions") { !member.consumer.assignment.isEmpty }

        let faultsUntil = Date().addingTimeInterval(45)
        let answered = Locked(0)
        let failed = Locked(0)
        // Four callers with short, different deadlines, so that requests are in flight whenever a connection drops.
        let callers = (0..<4).map { index in
            Thread {
                while Date() < faultsUntil {
                    do {
                        _ = try admin.describeGroup(group, timeout: .milliseconds(200 + 150 * index))
                        answered.withLock { $0 += 1 }
                    } catch {
                        failed.withLock { $0 += 1 }
                    }
                }
            }
        }
        callers.forEach { $0.start() }
        var faults = 0
        while Date() < faultsUntil {
            if faults % 2 == 0 {
                proxy.signal(SIGUSR1) // connections reset, then refused: a broker gone
                try await Task.sleep(for: .milliseconds(Int.random(in: 0...300)))
                proxy.signal(SIGUSR2)
            } else {
                proxy.signal(SIGSTOP) // connections open, nothing answered: a broker hung
                try await Task.sleep(for: .milliseconds(Int.random(in: 100...1_500)))
                proxy.signal(SIGCONT)
            }
            faults += 1
            try await Task.sleep(for: .milliseconds(Int.random(in: 100...1_000)))
        }
        try await waitUntil("the callers are done") { callers.allSatisfy(\.isFinished) }
        #expect(failed.value > 0, "the faults failed no description: they did not reach the describe calls")
        #expect(answered.value > 0)
        try await waitUntil("the group is described again, with its member") {
            (try? await admin.describeGroup(group, timeout: .seconds(2)))?.members.count == 1
        }
        try await member.stop()
        broker.stop()
    }

    /// A broker without DescribeGroups (librdkafka's mock cluster) fails a description with the reason, rather than
    /// leaving it unanswered, and the client goes on answering. Unfixed, librdkafka freed the request when it could not be sent and then used it:
    /// the handle hung or the process aborted.
    @Test func describingAGroupOnABrokerWithoutTheAPIFailsWithTheReason() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic("in", partitions: 2)
        let admin = try KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": cluster.bootstrapServers]))
        for _ in 0..<3 {
            // An answer, not a description that waited out its deadline (`.timeout`): the broker said it lacks the API.
            await #expect {
                try await admin.describeGroup(uniqueName("g"), timeout: .seconds(30))
            } throws: { error in
                (error as? KafkaError)?.code == .admin
            }
        }
        #expect(try await admin.metadata(timeout: .seconds(5)).brokers == 1)
    }
}
