import Foundation
import PurchaseStore
import Testing
import TestSupport
import WorkerApp

/// The workers' producers: their outputs compressed (lz4) unless the operator names a compression of their own.
@Suite struct WorkerProducerTests {
    static func environment(_ variables: [String: String]) async throws -> WorkerApp.Environment {
        let store = try SQLPurchaseStore(url: try await StoreEngine.sqlite.freshURL())
        return try WorkerApp.embedded(command: "iap-granter", settings: [], variables: [
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9", "IAP_SCHEMAS_DIR": TestServices.packageRoot.appendingPathComponent("schemas").path,
        ].merging(variables) { _, set in set }, store: store)
    }

    @Test func outputsAreCompressedWithLZ4UnlessTheOperatorSaysOtherwise() async throws {
        let plain = try await Self.environment([:])
        #expect(plain.producerKafka["compression.type"] == "lz4")
        #expect(plain.kafka["compression.type"] == nil, "the consumers' configuration is left as it was")
        #expect(try await Self.environment(["KAFKA_COMPRESSION_TYPE": "zstd"]).producerKafka["compression.type"] == "zstd")
        #expect(try await Self.environment(["KAFKA_COMPRESSION_TYPE": "none"]).producerKafka["compression.type"] == "none")
        let legacy = try await Self.environment(["KAFKA_COMPRESSION_CODEC": "snappy"]).producerKafka
        #expect(legacy["compression.type"] == nil && legacy["compression.codec"] == "snappy")
    }
}
