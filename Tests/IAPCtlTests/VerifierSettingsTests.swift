import Foundation
import JSON
import StoreFixtures
import StoreVerification
import Testing
import TestSupport

/// The verifier's trust settings as an operator meets them: `iapctl verify` taking each kind's own roots.
@Suite(.timeLimit(.minutes(3)))
struct VerifierSettingsTests {
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

        // The signed-data root option is not the receipts' one.
        #expect(try await VerifyCommandTests.run(common + ["--environment", "Sandbox", "--root", rootFile.path], input: receipt).status == 2)
    }
}
