import Foundation
import JSON
import StoreFixtures
import StoreVerification
import Testing
import TestSupport

/// The verifier's trust settings as an operator meets them: `iap-verifier` refusing to start, and `iapctl verify`
/// taking each kind's own roots. No broker needed: the verifier stops before it consumes, or is stopped by the test.
@Suite(.timeLimit(.minutes(3)))
struct VerifierSettingsTests {
    /// Settings the caller's environment might hold, cleared so that only the test's own count.
    static let clean = ["IAP_ALLOW_UNSIGNED_TEST_DATA": "", "IAP_ROOT_CERTIFICATES": "", "IAP_RECEIPT_ROOT_CERTIFICATES": "", "IAP_ACCEPT_SANDBOX": ""]

    static func verifier(_ environment: [String: String], directory: URL, arguments: [String] = []) throws -> ExecutableProcess {
        try ExecutableProcess("iap-verifier", ["--brokers", "127.0.0.1:1", "--bundle-id", "com.example.coins", "--shutdown-timeout", "1",
                                               "--store", "sqlite:" + directory.appendingPathComponent("store.sqlite").path] + arguments,
                              environment: clean.merging(environment) { _, new in new })
    }

    @Test(arguments: ["Xcode", "LocalTesting"])
    func aTestEnvironmentAloneDoesNotStartTheVerifier(_ environment: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("verifier-settings-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }

        let refused = try Self.verifier(["IAP_ENVIRONMENT": environment], directory: directory)
        try await waitUntil("iap-verifier refuses to start") { !refused.process.isRunning }
        #expect(refused.process.terminationStatus == 2, "\(refused.log)")
        // Its standard error is read asynchronously: the last line may arrive after the exit is seen.
        try await waitUntil("the refusal names the setting") {
            refused.log.contains { $0.contains("--allow-unsigned-test-data (IAP_ALLOW_UNSIGNED_TEST_DATA)") }
        }

        // With the second key it starts: past its settings, it serves /healthz (a refusal would end it with exit 2 first).
        let allowed = try Self.verifier(["IAP_ENVIRONMENT": environment, "IAP_ALLOW_UNSIGNED_TEST_DATA": "true"], directory: directory,
                                        arguments: ["--http-port", "0", "--http-host", "127.0.0.1"])
        let health = "http://127.0.0.1:\(try await allowed.httpPort())/healthz"
        try await waitUntil("iap-verifier serves /healthz") { try await httpRequest(health).status == 200 }
        // Its exit status after SIGTERM says how a broker-less consumer shut down, not what this test is about.
        try await allowed.terminate()
    }

    /// `iap-verifier` with `environment` stops before it consumes (exit 2), saying `refusal`.
    static func expectRefusal(_ environment: [String: String], saying refusal: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("verifier-settings-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let refused = try verifier(environment, directory: directory)
        try await waitUntil("iap-verifier refuses to start") { !refused.process.isRunning }
        #expect(refused.process.terminationStatus == 2, "\(refused.log)")
        try await waitUntil("the refusal names the setting") { refused.log.contains { $0.contains(refusal) } }
    }

    @Test func thePermissionIsRefusedInProductionAndSandbox() async throws {
        try await Self.expectRefusal(["IAP_ENVIRONMENT": "Sandbox", "IAP_ALLOW_UNSIGNED_TEST_DATA": "true"],
                                     saying: "--allow-unsigned-test-data (IAP_ALLOW_UNSIGNED_TEST_DATA) is only for")
    }

    /// Accepting sandbox purchases is what a production deployment may do for App Review; elsewhere it means nothing.
    @Test func acceptingSandboxPurchasesIsForProductionOnly() async throws {
        try await Self.expectRefusal(["IAP_ENVIRONMENT": "Sandbox", "IAP_ACCEPT_SANDBOX": "true"],
                                     saying: "--accept-sandbox (IAP_ACCEPT_SANDBOX) is only for --environment Production")
    }

    @Test func iapctlVerifiesReceiptsAgainstTheReceiptRootOnly() async throws {
        let pki = try TestPKI.make()
        let rootFile = FileManager.default.temporaryDirectory.appendingPathComponent("iapctl-receipt-root-\(UUID().uuidString).pem")
        try Data(pki.root.pemRepresentation.utf8).write(to: rootFile)
        defer { try? FileManager.default.removeItem(at: rootFile) }
        let receipt = try ReceiptSigner(pki: pki).sign(AppReceipt(
            receiptType: ReceiptSigner.sandbox, bundleId: "com.example.coins", creationDate: Date(),
            inAppPurchases: [InAppPurchaseReceipt(quantity: 1, productId: "coins.100", transactionId: "5000000001", purchaseDate: Date())]))
        let common = ["verify", "--kind", "receipt", "--bundle-id", "com.example.coins"]

        let verified = try await VerifyCommandTests.run(common + ["--environment", "Sandbox", "--receipt-root", rootFile.path], input: receipt)
        #expect(verified.status == 0, "\(verified.lines)")
        let fields = VerifyCommandTests.fields(verified.lines.first ?? "")
        #expect(fields["receiptType"] == .string("ProductionSandbox"))
        #expect(fields["purchases"]?.arrayValue?.first?.objectValue?["environment"] == .string("Sandbox"))

        let production = try await VerifyCommandTests.run(common + ["--environment", "Production", "--receipt-root", rootFile.path], input: receipt)
        #expect(production.status == 1)
        #expect(VerifyCommandTests.fields(production.lines.first ?? "")["reason"] == .string("wrongEnvironment"))

        let unconfigured = try await VerifyCommandTests.run(common + ["--environment", "Sandbox"], input: receipt)
        #expect(unconfigured.status == 1)
        #expect(VerifyCommandTests.fields(unconfigured.lines.first ?? "")["reason"] == .string("storeRejected"))

        // The signed-data root option is not the receipts' one; the test environments need the second key.
        #expect(try await VerifyCommandTests.run(common + ["--environment", "Sandbox", "--root", rootFile.path], input: receipt).status == 2)
        #expect(try await VerifyCommandTests.run(common + ["--environment", "Xcode"], input: receipt).status == 2)
    }

    /// Durations from settings become integer milliseconds: an infinite or absurd one is a configuration error
    /// (exit 2 naming the setting), not a trap.
    @Test(arguments: ["inf", "nan", "1e300", "-1", "0.0001"])
    func anImpossibleDurationIsRefusedNotATrap(_ value: String) async throws {
        let ingest = try ExecutableProcess("iap-ingest", ["--brokers", "127.0.0.1:1", "--http-port", "0", "--http-host", "127.0.0.1",
                                                          "--publish-timeout", value])
        try await waitUntil("iap-ingest refuses to start") { !ingest.process.isRunning }
        #expect(ingest.process.terminationStatus == 2, "\(value): \(ingest.log)")
    }
}
