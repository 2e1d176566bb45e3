import Kafka

/// Which partitions each member of a consumer group should hold under librdkafka's `range` assignor, and where a
/// member's assignment differs from that. Pure: `GroupWatchdog` asks the cluster and times what this finds.
///
/// `range` sorts the members by id and gives the k-th of n members the k-th run of ⌊P/n⌋ partitions of every topic,
/// the first P mod n one more. A member holding another slice than its group's members make its own means partitions
/// owned twice or, what happens, by nobody (a coordinator that gave a dead member's slice to no one).
struct RangeShare {
    /// The group's member ids as librdkafka orders them: by their bytes.
    let members: [String]

    init(members: [String]) { self.members = members.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } }

    /// What `member` should hold of `topic`'s `partitions` partitions; nil when it is not a member.
    func share(of member: String, topic: String, partitions: Int) -> Set<TopicPartition>? {
        // By bytes, as librdkafka tells members apart: `String`'s == holds canonically equivalent ids equal.
        guard let k = members.firstIndex(where: { $0.utf8.elementsEqual(member.utf8) }) else { return nil }
        let (each, extra) = partitions.quotientAndRemainder(dividingBy: members.count)
        let start = k * each + min(k, extra)
        return Set((start..<(start + each + (k < extra ? 1 : 0))).map { TopicPartition(topic: topic, partition: Int32($0)) })
    }

    /// A topic of which a member holds another slice than its share.
    struct Mismatch: Equatable, CustomStringConvertible {
        var topic: String
        var partitions: Int
        var held: Set<TopicPartition>
        /// Nil: the member is not among the group's members.
        var share: Set<TopicPartition>?

        var description: String {
            "\(Self.names(held)) of \(topic)'s \(partitions), its share being \(share.map(Self.names) ?? "none (not a member)")"
        }

        private static func names(_ partitions: Set<TopicPartition>) -> String {
            partitions.isEmpty ? "no partition" : "[" + partitions.map(\.partition).sorted().map(String.init).joined(separator: ",") + "]"
        }
    }

    /// The topics among `topics` of which `member`, holding `assignment`, holds another slice than its share.
    /// `partitions` counts each topic's partitions; a topic with none (or not counted) is passed over.
    func mismatches(of member: String, holding assignment: Set<TopicPartition>, topics: [String], partitions: [String: Int]) -> [Mismatch] {
        topics.compactMap { topic in
            let count = partitions[topic] ?? 0
            guard count > 0 else { return nil }
            let held = assignment.filter { $0.topic == topic }
            let share = share(of: member, topic: topic, partitions: count)
            return share == held ? nil : Mismatch(topic: topic, partitions: count, held: held, share: share)
        }
    }

    /// Whether a group of `members` leaves a member without partitions by right: `range` gives a member a partition of
    /// every topic with more partitions than its place, so only a group with more members than the most partitions of
    /// its topics has idle members.
    static func hasIdleMembers(members: Int, mostPartitions: Int) -> Bool { mostPartitions > 0 && members > mostPartitions }
}
