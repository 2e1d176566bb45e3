import Foundation
import Kafka
import Testing
import TestSupport

/// TLS to the broker through librdkafka's own settings (`security.protocol=ssl`, `ssl.ca.location`), against a
/// Tansu behind a TLS-terminating proxy (`ProxiedBroker`) with a certificate made for this run.
@Suite(TestServices.pythonTools, .timeLimit(.minutes(3)))
struct BrokerTLSTests {
    @Test func producerAndConsumerTalkTLSAndRefuseACertificateTheyDoNotTrust() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("tls"))
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        func path(_ name: String) -> String { directory.appendingPathComponent(name).path }
        // A CA and a server certificate for 127.0.0.1 (librdkafka checks the name), and a CA nobody used.
        for arguments in [
            ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path("ca.key"), "-out", path("ca.pem"),
             "-days", "1", "-subj", "/CN=iap-pipeline test CA"],
            ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path("broker.key"), "-out", path("broker.csr"),
             "-subj", "/CN=127.0.0.1"],
            ["x509", "-req", "-in", path("broker.csr"), "-CA", path("ca.pem"), "-CAkey", path("ca.key"), "-CAcreateserial", "-out", path("broker.pem"),
             "-days", "1", "-extfile", path("san.cnf")],
            ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path("other.key"), "-out", path("other.pem"),
             "-days", "1", "-subj", "/CN=another CA"],
        ] {
            try Data("subjectAltName=IP:127.0.0.1\n".utf8).write(to: URL(fileURLWithPath: path("san.cnf")))
            let result = try await offPool { try runCommand("/usr/bin/openssl", arguments) }
            try #require(result.status == 0, "openssl \(arguments[0]): \(result.output)")
        }

        let broker = try await ProxiedBroker(tls: (path("broker.pem"), path("broker.key")))
        defer { broker.stop() }

        let tls = KafkaConfiguration(["bootstrap.servers": broker.bootstrapServers, "security.protocol": "ssl", "ssl.ca.location": path("ca.pem")])
        let topic = uniqueName("tls")
        try await waitUntil("the broker answers over TLS") {
            (try? await offPool { try KafkaAdmin(kafka: tls).createTopics([topic], partitions: 1) }) != nil
        }
        let producer = try KafkaProducer(configuration: .init(kafka: tls))
        try await producer.send(KafkaProducerMessage(topic: topic, key: "k", value: Data("over TLS".utf8)))
        var consumerKafka = testConsumerKafka(broker.bootstrapServers)
        consumerKafka["security.protocol"] = "ssl"
        consumerKafka["ssl.ca.location"] = path("ca.pem")
        let recorder = Recorder()
        let consumer = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: consumerKafka, groupID: uniqueName("g"), topics: [topic]))) {
            await recorder.record($0)
        }
        try await waitUntil("the message comes back over TLS") { await recorder.count == 1 }
        try await consumer.stop()
        #expect(await recorder.values == ["over TLS"])

        // Trusting another CA, the client refuses the broker: no plaintext fallback, a clear error.
        var other = tls
        other["ssl.ca.location"] = path("other.pem")
        other["log_level"] = "0"
        let untrusting = other
        let error = await #expect(throws: KafkaError.self) { try await offPool { _ = try KafkaAdmin(kafka: untrusting).metadata(timeout: .seconds(5)) } }
        #expect(error?.isRetriable == true)
    }
}
