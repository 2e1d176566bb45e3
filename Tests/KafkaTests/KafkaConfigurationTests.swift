import Kafka
import Testing

@Suite struct KafkaConfigurationTests {
    @Test func environmentVariablesBecomeProperties() {
        let configuration = KafkaConfiguration.fromEnvironment([
            "KAFKA_BOOTSTRAP_SERVERS": "b1:9092,b2:9092",
            "KAFKA_SASL_MECHANISMS": "PLAIN",
            "KAFKA_": "ignored",
            "PATH": "/bin",
        ])
        #expect(configuration.properties == ["bootstrap.servers": "b1:9092,b2:9092", "sasl.mechanisms": "PLAIN"])
    }

    @Test func explicitSettingsOverrideEnvironment() throws {
        var configuration = KafkaConfiguration.fromEnvironment(["KAFKA_ACKS": "1"])
        try configuration.apply(settings: ["acks=all", "ssl.ca.location=/etc/ca=1.pem"])
        #expect(configuration["acks"] == "all")
        #expect(configuration["ssl.ca.location"] == "/etc/ca=1.pem")
    }

    @Test(arguments: ["novalue", "=x"])
    func malformedSettingIsRejected(_ setting: String) {
        var configuration = KafkaConfiguration()
        #expect(throws: KafkaError.self) { try configuration.apply(settings: [setting]) }
    }

    @Test func unknownPropertyFailsAtCreationNamingIt() {
        let error = #expect(throws: KafkaError.self) {
            _ = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["no.such.property": "1"])))
        }
        #expect(error?.code == .configuration)
        #expect(error?.message.contains("no.such.property") == true)
    }

    @Test func loadedLibrdkafkaIsSupported() throws {
        try KafkaLibrary.requireSupportedVersion()
        let version = KafkaLibrary.versionComponents
        #expect(version >= (2, 2, 0), "librdkafka \(KafkaLibrary.version) loaded")
        #expect(KafkaLibrary.version.hasPrefix("\(version.major).\(version.minor).\(version.patch)"))
    }
}
