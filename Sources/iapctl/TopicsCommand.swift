import CommandLineOptions
import Foundation
import Kafka
import PurchaseEvents

/// `iapctl topics create [--all [--topic-prefix P] | NAME…] [--partitions N] [--replication-factor R]` and `iapctl topics list`.
enum TopicsCommand {
    static func run(_ arguments: [String]) throws -> Int32 {
        guard let action = arguments.first else { throw UsageError("topics: expected create or list") }
        let options = try CommandOptions(Array(arguments.dropFirst()), valued: ["--partitions", "--replication-factor", "--brokers", "--kafka", "--topic-prefix"],
                                         flags: ["--all"])
        // Checked before the broker is asked anything.
        let partitions = try options.int("--partitions", in: 1...100_000) ?? 4
        let replicationFactor = try options.int("--replication-factor", in: 1...Int(Int16.max)) ?? 1
        let admin = try KafkaAdmin(kafka: try options.kafkaConfiguration())
        switch action {
        case "create":
            // --all: every topic of the pipeline (what a deployment creates before starting the workers).
            let names = options.flags.contains("--all") ? EventCodec.pipelineTopics(prefix: options.string("--topic-prefix") ?? "") : options.positional
            guard !names.isEmpty else { throw UsageError("topics create: name at least one topic, or --all") }
            try admin.createTopics(names, partitions: Int32(partitions), replicationFactor: Int32(replicationFactor))
            print("created or present: \(names.joined(separator: " "))")
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
