import Foundation
import Kafka
import Testing
import TestSupport

/// Group descriptions and rejoining as a new member, against the local broker (Tansu under `make test`).
@Suite(TestServices.broker, .timeLimit(.minutes(5)))
struct GroupRejoinTests {
    /// The coordinator describes the group's members; a member that rejoins comes back under a new member id, the group
    /// assigns every partition anew, and nothing produced before or after is lost.
    @Test func aMemberThatRejoinsComesBackAsANewMemberAndNothingIsLost() async throws {
        let servers = try TestServices.requireBrokers()
        let topic = uniqueName("rejoin")
        let group = uniqueName("g")
        let admin = try KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers]))
        try await admin.createTopics([topic], partitions: 4)
        let all = Set((0..<4).map { TopicPartition(topic: topic, partition: $0) })
        let recorder = Recorder()
        let members = try (0..<2).map { _ in
            RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group, topics: [topic]))) {
                await recorder.record($0)
            }
        }
        try await waitUntil("both members own partitions") {
            members.allSatisfy { !$0.consumer.assignment.isEmpty } && members[0].consumer.assignment.union(members[1].consumer.assignment) == all
        }
        // The coordinator lists both members (the local broker leaves their assignments out of the description).
        var before = try await admin.describeGroup(group)
        try await waitUntil("the coordinator describes both members") {
            before = try admin.describeGroup(group)
            return before.members.count == 2
        }
        #expect(Set(before.members.map(\.memberID)).count == 2)

        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        for result in await producer.send(contentsOf: BrokerIntegrationTests.keyedMessages(topic: topic, count: 200, keys: 20)) { _ = try result.get() }
        try await waitUntil("the first 200 messages are handled") { await recorder.count >= 200 }

        members[0].consumer.rejoinGroup()
        let oldIDs = Set(before.members.map(\.memberID))
        try await waitUntil("the group is whole again, with a new member") {
            let now = try admin.describeGroup(group)
            return now.members.count == 2 && !oldIDs.isSuperset(of: now.members.map(\.memberID))
                && members.allSatisfy { !$0.consumer.assignment.isEmpty }
                && members[0].consumer.assignment.union(members[1].consumer.assignment) == all
        }
        let later = (200..<400).map { index in
            KafkaProducerMessage(topic: topic, key: "user-\(index % 20)", value: Data("user-\(index % 20):\(index / 20)".utf8))
        }
        for result in await producer.send(contentsOf: later) { _ = try result.get() }
        try await waitUntil("all 400 messages are handled") { Set(await recorder.values).count == 400 }
        for member in members { try await member.stop() }
    }

    /// A member that does not leave its group at shutdown (`leavesGroupOnShutdown` false, for the local broker) commits
    /// what it handled, then goes silently: the coordinator keeps it until its session ends, then the other member
    /// gets its partitions and continues after its commits, handling nothing twice.
    @Test func aMemberThatGoesSilentlyCommitsFirstAndIsExpelledWhenItsSessionEnds() async throws {
        let servers = try TestServices.requireBrokers()
        let topic = uniqueName("silent")
        let group = uniqueName("g")
        let admin = try KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers]))
        try await admin.createTopics([topic], partitions: 4)
        let all = Set((0..<4).map { TopicPartition(topic: topic, partition: $0) })
        let recorder = Recorder()
        let members = try [false, true].map { leaves in
            var configuration = KafkaConsumer.Configuration(kafka: testConsumerKafka(servers), groupID: group, topics: [topic])
            configuration.leavesGroupOnShutdown = leaves
            return RunningConsumer(try KafkaConsumer(configuration: configuration)) { await recorder.record($0) }
        }
        try await waitUntil("both members own partitions") {
            members.allSatisfy { !$0.consumer.assignment.isEmpty } && members[0].consumer.assignment.union(members[1].consumer.assignment) == all
        }
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        for result in await producer.send(contentsOf: BrokerIntegrationTests.keyedMessages(topic: topic, count: 200, keys: 20)) { _ = try result.get() }
        try await waitUntil("the first 200 messages are handled") { await recorder.count >= 200 }
        let silent = try #require(members[0].consumer.memberID)

        let stopping = ContinuousClock.now
        try await members[0].stop()
        let listed = try await admin.describeGroup(group).members.contains { $0.memberID == silent }
        // Its session (librdkafka's default, 45 s) may have ended already when the whole suite slowed the stop and the
        // describe that much: only an answer within it tells a silent stop from a LeaveGroup.
        #expect(listed || ContinuousClock.now - stopping >= .seconds(45), "a LeaveGroup would have removed it at once")
        try await waitUntil("the other member owns every partition") { members[1].consumer.assignment == all }
        #expect(try await !admin.describeGroup(group).members.contains { $0.memberID == silent })

        let later = (200..<400).map { index in
            KafkaProducerMessage(topic: topic, key: "user-\(index % 20)", value: Data("user-\(index % 20):\(index / 20)".utf8))
        }
        for result in await producer.send(contentsOf: later) { _ = try result.get() }
        try await waitUntil("all 400 messages are handled") { Set(await recorder.values).count == 400 }
        #expect(await recorder.count == 400, "a message handled twice: the silent member did not commit before it went")
        try await members[1].stop()
    }
}
