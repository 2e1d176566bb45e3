import Kafka
import Testing
@testable import WorkerRuntime

/// librdkafka's `range` assignment, and a member's assignment judged against it.
@Suite struct RangeShareTests {
    static func share(_ member: String, _ members: [String], _ partitions: Int) -> Set<Int32>? {
        RangeShare(members: members).share(of: member, topic: "t", partitions: partitions).map { Set($0.map(\.partition)) }
    }

    static func partitions(_ topic: String, _ numbers: [Int32]) -> Set<TopicPartition> {
        Set(numbers.map { TopicPartition(topic: topic, partition: $0) })
    }

    /// Members sorted by id, the first P mod n get one partition more.
    @Test func eachMemberGetsItsRunOfEveryTopicAsLibrdkafkasRangeAssignorGivesIt() {
        #expect(Self.share("a", ["c", "a", "b"], 8) == [0, 1, 2])
        #expect(Self.share("b", ["c", "a", "b"], 8) == [3, 4, 5])
        #expect(Self.share("c", ["c", "a", "b"], 8) == [6, 7])
        #expect(Self.share("a", ["c", "a", "b"], 2) == [0])
        #expect(Self.share("c", ["c", "a", "b"], 2) == [], "more members than partitions: the last ones get none")
        #expect(Self.share("x", ["c", "a", "b"], 8) == nil, "not a member")
        #expect(Self.share("only", ["only"], 4) == [0, 1, 2, 3])
    }

    /// librdkafka compares the ids' bytes: "Z" (0x5A) before "a" (0x61), and a precomposed "é" (0xC3 0xA9) after "e" + U+0301
    /// (0x65 0xCC 0x81), which Swift's `String` holds equal.
    @Test func membersAreOrderedByTheBytesOfTheirIds() {
        #expect(Self.share("Z", ["a", "Z"], 2) == [0])
        let composed = "caf\u{E9}", decomposed = "cafe\u{301}"
        #expect(Self.share(decomposed, [composed, decomposed], 2) == [0])
        #expect(Self.share(composed, [decomposed, composed], 2) == [1])
    }

    @Test func aMemberHoldingItsShareOfEveryTopicHasNoMismatch() {
        let share = RangeShare(members: ["m1", "m0"])
        let held = Self.partitions("in", [2, 3]).union(Self.partitions("other", [1]))
        #expect(share.mismatches(of: "m1", holding: held, topics: ["in", "other"], partitions: ["in": 4, "other": 2]).isEmpty)
    }

    @Test func aMemberHoldingAnotherSliceIsToldWhichAndWhatItsShareIs() {
        let share = RangeShare(members: ["m0"])
        let mismatches = share.mismatches(of: "m0", holding: Self.partitions("in", [0, 1]), topics: ["in", "other", "unknown"],
                                          partitions: ["in": 4, "other": 1])
        #expect(mismatches.map(\.topic) == ["in", "other"], "a topic without a partition count is passed over")
        #expect(mismatches.map(\.description) == ["[0,1] of in's 4, its share being [0,1,2,3]", "no partition of other's 1, its share being [0]"])
        let stranger = RangeShare(members: ["m1"]).mismatches(of: "m0", holding: Self.partitions("in", [0]), topics: ["in"], partitions: ["in": 1])
        #expect(stranger.map(\.description) == ["[0] of in's 1, its share being none (not a member)"])
        #expect(RangeShare(members: ["m0"]).mismatches(of: "m0", holding: [], topics: ["empty"], partitions: ["empty": 0]).isEmpty)
    }

    @Test func onlyAGroupWithMoreMembersThanPartitionsHasIdleMembers() {
        #expect(RangeShare.hasIdleMembers(members: 3, mostPartitions: 2))
        #expect(!RangeShare.hasIdleMembers(members: 2, mostPartitions: 2))
        #expect(!RangeShare.hasIdleMembers(members: 3, mostPartitions: 0), "no partitions known: not idle, stalled")
    }
}
