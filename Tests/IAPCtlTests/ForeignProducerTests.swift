import Foundation
import JSON
import StoreFixtures
import Testing
import TestSupport

/// Producers that know only schemas/README.md: a Python backend with confluent-kafka, and kcat running the
/// documented command. The worker executables verify, grant and finish what they publish.
@Suite(TestServices.broker, TestServices.pythonTools, .timeLimit(.minutes(5)))
struct ForeignProducerTests {
    static let topics = ["iap.purchase.submitted", "iap.store.notification", "iap.purchase.consumed", "iap.purchase.verified", "iap.purchase.rejected",
                         "iap.item.granted", "iap.transaction.finished", "iap.refund.due", "iap.purchase.revoked", "iap.deadletter"]

    @Test func purchasesFromPythonAndKcatAreVerifiedGrantedAndFinished() async throws {
        let servers = try TestServices.requireBrokers()
        let python = try TestServices.requirePython()
        let prefix = "fp\(UUID().uuidString.prefix(6).lowercased())."
        let create = ["topics", "create"] + Self.topics.map { prefix + $0 } + ["--partitions", "2", "--brokers", servers]
        #expect(try await VerifyCommandTests.run(create, input: "").status == 0)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("foreign-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let pki = try TestPKI.make()
        let root = directory.appendingPathComponent("root.pem")
        try Data(pki.root.pemRepresentation.utf8).write(to: root)
        let common = ["--brokers", servers, "--store", "sqlite:" + directory.appendingPathComponent("store.sqlite").path, "--topic-prefix", prefix,
                      "--shutdown-timeout", "5"]
        let workers = [
            try ExecutableProcess("iap-verifier", common + ["--bundle-id", "com.example.coins", "--environment", "Sandbox", "--root", root.path]),
            try ExecutableProcess("iap-granter", common + ["--catalog", TestServices.packageRoot.appendingPathComponent("schemas/examples/catalog.json").path]),
            try ExecutableProcess("iap-finisher", common),
        ]

        let signer = JWSSigner(pki: pki)
        func jwsFile(_ transactionId: String) throws -> URL {
            let file = directory.appendingPathComponent("\(transactionId).jws")
            try Data(try signer.sign(AppStorePayloads.transaction(transactionId: transactionId, productId: "coins.100", bundleId: "com.example.coins")).utf8)
                .write(to: file)
            return file
        }
        let script = TestServices.packageRoot.appendingPathComponent("Tests/IAPCtlTests/foreign_producer.py").path

        // Python: a submission, then the app's consumption report.
        let submission = try jwsFile("8001").path
        let fromPython = try await offPool { try runCommand(python, [script, "submitted", servers, prefix, "py-user", submission]) }
        #expect(fromPython.status == 0, "\(fromPython.output)")

        // kcat: the README's command as written, with the transaction in ./transaction.jws.
        let kcatDirectory = directory.appendingPathComponent("kcat")
        try FileManager.default.createDirectory(at: kcatDirectory, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: try jwsFile("8002"), to: kcatDirectory.appendingPathComponent("transaction.jws"))
        let command = try #require(try documentedBlocks(in: TestServices.packageRoot.appendingPathComponent("schemas/README.md"))
            .first { $0.marker == "test: kcat" }?.text, "schemas/README.md shows the kcat command")
        let fromKcat = try await offPool {
            try runCommand("/bin/bash", ["-euo", "pipefail", "-c", command], environment: [
                "KAFKA_BOOTSTRAP_SERVERS": servers, "IAP_TOPIC_PREFIX": prefix,
                "LD_LIBRARY_PATH": TestServices.packageRoot.appendingPathComponent(".deps/lib").path,
            ], directory: kcatDirectory)
        }
        #expect(fromKcat.status == 0, "\(fromKcat.output)")

        for (user, transaction) in [("py-user", "8001"), ("user-17", "8002")] {
            let consumed = try await offPool { try runCommand(python, [script, "consumed", servers, prefix, user, "appstore", transaction]) }
            #expect(consumed.status == 0, "\(consumed.output)")
        }

        let tailFinished = ["tail", "--topic", prefix + "iap.transaction.finished", "--from-beginning", "--max", "2", "--timeout", "150", "--brokers", servers]
        let finished = try await VerifyCommandTests.run(tailFinished, input: "")
        let transactions = Set(finished.lines.compactMap { JSONValue.parse(Array($0.utf8))?.objectValue?["value"]?.objectValue?["transactionId"]?.stringValue })
        #expect(transactions == ["8001", "8002"], "both purchases end finished; finisher log:\n\(workers[2].log.suffix(20).joined(separator: "\n"))")
        let tailGranted = ["tail", "--topic", prefix + "iap.item.granted", "--from-beginning", "--max", "2", "--timeout", "60", "--brokers", servers]
        let granted = try await VerifyCommandTests.run(tailGranted, input: "")
        #expect(granted.lines.compactMap { JSONValue.parse(Array($0.utf8))?.objectValue?["value"]?.objectValue?["alreadyGranted"] } == [.bool(false), .bool(false)])
        for worker in workers { #expect(try await worker.terminate() == 0) }
    }
}
