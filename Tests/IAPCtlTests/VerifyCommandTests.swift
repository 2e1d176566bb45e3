import Foundation
import PurchaseDomain
import PurchaseStore
import StoreFixtures
import StoreVerification
import Testing
import JSON
import TestSupport

/// Runs the built `iapctl` binary as an operator would.
@Suite struct VerifyCommandTests {
    /// Runs `iapctl` to its end (see `ExecutableProcess.run`).
    static func run(_ arguments: [String], input: String) async throws -> ExecutableProcess.Outcome {
        try await ExecutableProcess.run("iapctl", arguments, input: Data(input.utf8))
    }

    /// With input bytes that need not be UTF-8.
    static func run(_ arguments: [String], input: Data) async throws -> ExecutableProcess.Outcome {
        try await ExecutableProcess.run("iapctl", arguments, input: input)
    }

    static func fields(_ line: String) -> [String: JSONValue] { JSONValue.parse(Array(line.utf8))?.objectValue ?? [:] }

    @Test func verifiesRejectsAndExitsAccordingly() async throws {
        let pki = try TestPKI.make()
        let rootFile = FileManager.default.temporaryDirectory.appendingPathComponent("iapctl-root-\(UUID().uuidString).pem")
        try Data(pki.root.pemRepresentation.utf8).write(to: rootFile)
        defer { try? FileManager.default.removeItem(at: rootFile) }
        let signer = JWSSigner(pki: pki)
        let good = try signer.sign(AppStorePayloads.transaction(transactionId: "42", productId: "coins.100", bundleId: "com.example.coins"))
        let forged = try JWSSigner(pki: try TestPKI.make(name: "forger"))
            .sign(AppStorePayloads.transaction(transactionId: "43", productId: "coins.100", bundleId: "com.example.coins"))
        let common = ["verify", "--kind", "transaction", "--root", rootFile.path, "--bundle-id", "com.example.coins", "--environment", "Sandbox"]

        let verified = try await Self.run(common, input: good)
        #expect(verified.status == 0)
        #expect(Self.fields(verified.lines[0])["verdict"] == .string("verified"))
        #expect(Self.fields(verified.lines[0])["transactionId"] == .string("42"))

        let rejected = try await Self.run(common, input: forged)
        #expect(rejected.status == 1)
        #expect(Self.fields(rejected.lines[0])["reason"] == .string("untrustedChain"))
        #expect(Self.fields(rejected.lines[0])["retryable"] == .bool(false))

        let both = try await Self.run(common + ["--lines"], input: "\(good)\n\(forged)\n")
        #expect(both.status == 1, "--lines exits 0 only if all verified")
        #expect(both.lines.map { Self.fields($0)["verdict"] } == [.string("verified"), .string("rejected")])
        // Blank lines skipped; a line's spaces, tabs and CR trimmed; the last line needs no newline.
        let ragged = try await Self.run(common + ["--lines"], input: "\n \t\(good)\r\n\n  \n\(forged)")
        #expect(ragged.lines.map { Self.fields($0)["verdict"] } == [.string("verified"), .string("rejected")], "\(ragged.lines)")

        #expect(try await Self.run(["verify", "--kind", "nonsense"], input: "").status == 2)
        #expect(try await Self.run(["verify", "--kind", "transaction", "--bundle-id", "x", "--environment", "Production"], input: good).status == 2,
                "production without --app-apple-id is a usage error")
    }
}

@Suite struct MigrateCommandTests {
    @Test func migrateAppliesOnceThenReportsUpToDate() async throws {
        let url = "sqlite:" + FileManager.default.temporaryDirectory.appendingPathComponent("migrate-\(UUID().uuidString).sqlite").path
        let first = try await VerifyCommandTests.run(["migrate", "--store", url], input: "")
        #expect(first.status == 0)
        #expect(first.lines.first?.hasSuffix("applied " + (1...SQLPurchaseStore.schemaVersion).map { "v\($0)" }.joined(separator: ", ")) == true, "\(first.lines)")
        let second = try await VerifyCommandTests.run(["migrate", "--store", url], input: "")
        #expect(second.lines.first?.hasSuffix("up to date") == true, "\(second.lines)")
        #expect(try await VerifyCommandTests.run(["migrate", "--store", "mysql://nope"], input: "").status != 0)
        let badCatalog = FileManager.default.temporaryDirectory.appendingPathComponent("catalog-\(UUID().uuidString).json")
        try Data(#"{"products":{"x":{"type":"consumable"}}}"#.utf8).write(to: badCatalog)
        let refused = try await VerifyCommandTests.run(["migrate", "--store", url, "--catalog", badCatalog.path], input: "")
        #expect(refused.status == 2, "a catalog that does not match its schema is a usage error: \(refused.lines)")
    }

    @Test func lifecyclePrintsTheStateMachinesTable() async throws {
        let result = try await VerifyCommandTests.run(["lifecycle"], input: "")
        #expect(result.status == 0)
        #expect(result.lines.joined(separator: "\n") == Lifecycle.markdownTable())
    }

    /// `iapctl verify --kind appcoins` judges as the verifier does: only the named app, signed by its key.
    @Test func appCoinsPurchasesAreVerifiedOnlyForTheNamedAppsAndTheirKey() async throws {
        let signer = try AppCoinsSigner()
        let forger = try AppCoinsSigner()
        let api = try AppCoinsAPIStandIn(purchases: [
            "tok-1": .init(packageName: "com.example.coins", sku: "coins.100", orderId: "o-1"),
            "tok-x": .init(packageName: "com.attacker.app", sku: "coins.100", orderId: "o-x"),
        ])
        let keyFile = FileManager.default.temporaryDirectory.appendingPathComponent("appcoins-\(UUID().uuidString).txt")
        try Data(try signer.publicKeyBase64().utf8).write(to: keyFile)
        defer { try? FileManager.default.removeItem(at: keyFile) }
        func line(_ package: String, _ token: String, _ who: AppCoinsSigner) throws -> String {
            let signed = try who.sign(packageName: package, sku: "coins.100", purchaseToken: token, orderId: "o")
            return String(decoding: try JSONEncoder().encode(JSONValue.object(["purchaseData": .string(signed.purchaseData),
                                                                               "signature": .string(signed.signature)])), as: UTF8.self)
        }
        let input = [try line("com.example.coins", "tok-1", signer), try line("com.attacker.app", "tok-x", forger)].joined(separator: "\n")
        let result = try await VerifyCommandTests.run(["verify", "--kind", "appcoins", "--lines", "--appcoins-url", api.baseURL.absoluteString,
                                         "--appcoins-app", "com.example.coins=\(keyFile.path)"], input: input)
        #expect(result.status == 1, "one of the two is refused")
        #expect(result.lines.map { VerifyCommandTests.fields($0)["verdict"]?.stringValue } == ["verified", "rejected"], "\(result.lines)")
        #expect(VerifyCommandTests.fields(result.lines.last ?? "")["reason"]?.stringValue == "wrongPackage")
        #expect(try await VerifyCommandTests.run(["verify", "--kind", "appcoins"], input: "").status == 2, "no app named: a usage error")
    }
}
