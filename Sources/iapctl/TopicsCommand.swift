import Foundation
import Kafka

/// `iapctl topics create|list`.
enum TopicsCommand {
    static func run(_ arguments: [String]) throws -> Int32 {
        guard let action = arguments.first else { throw UsageError("topics: expected create or list") }
        let options = try CommandOptions(Array(arguments.dropFirst()), valued: ["--partitions", "--brokers", "--kafka"])
        let admin = try KafkaAdmin(kafka: try options.kafkaConfiguration())
        switch action {
        case "create":
            let partitions = try options.int("--partitions") ?? 4
            guard !options.positional.isEmpty else { throw UsageError("topics create: name at least one topic") }
            try admin.createTopics(options.positional, partitions: Int32(partitions))
            print("created or present: \(options.positional.joined(separator: " "))")
        case "list":
            for (topic, partitions) in try admin.metadata().topics.sorted(by: { $0.key < $1.key }) {
                print("\(topic)\t\(partitions)")
            }
        default:
            throw UsageError("topics: unknown action '\(action)'")
        }
        return 0
    }
}
