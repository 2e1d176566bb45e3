import Foundation

/// Reading librdkafka's statistics JSON (see its STATISTICS.md: `topics.<name>.partitions.<id>`).
enum KafkaStatistics {
    /// `consumer_lag` of each of `partitions` (-1 where librdkafka does not know it yet).
    static func consumerLag(json: Data, of partitions: Set<TopicPartition>) -> [TopicPartition: Int64] {
        guard let root = (try? JSONSerialization.jsonObject(with: json)) as? [String: Any], // malformed statistics: no lag rather than a crash
              let topics = root["topics"] as? [String: Any] else { return [:] }
        var lag: [TopicPartition: Int64] = [:]
        for partition in partitions {
            let entry = ((topics[partition.topic] as? [String: Any])?["partitions"] as? [String: Any])?[String(partition.partition)] as? [String: Any]
            lag[partition] = (entry?["consumer_lag"] as? NSNumber)?.int64Value ?? -1
        }
        return lag
    }
}
