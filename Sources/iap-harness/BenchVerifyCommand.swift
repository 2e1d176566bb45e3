import PurchaseDomain
import CommandLineOptions
import Crypto
import ChildProcesses
import Foundation
import JSON
import StoreFixtures
import StoreVerification

/// `iap-harness bench verify`: signed-transaction verifications per second on one core, beside OpenSSL's
/// raw ECDSA P-256 verify rate over the same bytes, measured in the same run. With `--lines N`: `iapctl verify
/// --lines` over N distinct signed transactions (one chain), beside `openssl speed ecdsap256`, in `--rounds` alternating
/// rounds (3 by default): this shared machine's speed drifts within seconds, so one pair says little.
enum BenchVerifyCommand {
    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--seconds", "--lines", "--rounds"], flags: ["--json"])
        if let lines = try options.int("--lines") {
            let rounds = try options.int("--rounds") ?? 3
            guard lines >= 1, rounds >= 1 else { throw UsageError("--lines and --rounds must be positive") }
            return try runLines(lines, rounds: rounds, json: options.flags.contains("--json"))
        }
        let seconds = Double(try options.int("--seconds") ?? 3)
        guard seconds > 0 else { throw UsageError("--seconds must be positive") }

        let pki = try TestPKI.make()
        let jws = try JWSSigner(pki: pki).sign(AppStorePayloads.transaction(
            transactionId: "2000000000000001", productId: "coins.100", bundleId: "com.example.coins", environment: .sandbox,
            appAccountToken: UUID().uuidString.lowercased()))
        let verifier = try SignedDataVerifier(configuration: .init(trustedRoots: [pki.root], bundleId: "com.example.coins", environment: .sandbox))
        guard case .success = verifier.verifyTransaction(jws) else { throw UsageError("benchmark JWS does not verify") }

        // Baseline: EVP_DigestVerify (SHA-256 + ECDSA P-256) over the same signing input, DER signature prepared once.
        let parts = jws.split(separator: ".")
        let signingInput = Array("\(parts[0]).\(parts[1])".utf8)
        guard let rawSignature = Base64URL.decode(parts[2]) else { throw UsageError("bad base64url signature") }
        guard let der = PublicKey.derSignature(fromRawSignature: rawSignature) else { throw UsageError("cannot convert signature") }
        let key = try pki.leaf.publicKey()

        // Interleaved rounds, so that a noisy neighbour or frequency change hits both alike; medians.
        var jwsRates: [Double] = []
        var rawRates: [Double] = []
        let rounds = 10
        for _ in 0..<rounds {
            jwsRates.append(measure(seconds: seconds / Double(rounds)) { _ = verifier.verifyTransaction(jws) })
            rawRates.append(measure(seconds: seconds / Double(rounds)) { _ = key.verifyECDSASHA256(message: signingInput, derSignature: der) })
        }
        let jwsRate = jwsRates.sorted()[rounds / 2]
        let rawRate = rawRates.sorted()[rounds / 2]
        let ratio = jwsRate / rawRate
        if options.flags.contains("--json") {
            print(#"{"jwsVerificationsPerSecond":\#(Int(jwsRate)),"rawECDSAVerificationsPerSecond":\#(Int(rawRate)),"ratio":\#(String(format: "%.3f", ratio)),"signedBytes":\#(signingInput.count),"seconds":\#(seconds)}"#)
        } else {
            print("signed transaction verification (chain cached, one thread): \(Int(jwsRate)) /s")
            print("OpenSSL ECDSA P-256 + SHA-256 verify, same \(signingInput.count) bytes:   \(Int(rawRate)) /s")
            print(String(format: "ratio: %.3f (target >= 0.7)", ratio))
        }
        return 0
    }

    /// Runs `body` repeatedly for about `seconds` on this thread; returns calls per second.
    static func measure(seconds: Double, _ body: () -> Void) -> Double {
        for _ in 0..<50 { body() } // warm up
        let clock = ContinuousClock()
        let start = clock.now
        var calls = 0
        var elapsed = Duration.zero
        while elapsed < .milliseconds(Int(seconds * 1000)) {
            for _ in 0..<100 { body() }
            calls += 100
            elapsed = clock.now - start
        }
        return Double(calls) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }

    /// `iapctl verify --lines` (the `iapctl` next to this executable, as a child process) over `count` distinct signed
    /// transactions, alternating with `openssl speed`; the medians and the median of the rounds' ratios.
    private static func runLines(_ count: Int, rounds: Int, json: Bool) throws -> Int32 {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("iap-bench-verify-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let pki = try TestPKI.make()
        let signer = JWSSigner(pki: pki)
        let root = directory.appendingPathComponent("root.pem")
        try Data(pki.root.pemRepresentation.utf8).write(to: root)
        var input = Data()
        for index in 0..<count {
            let jws = try signer.sign(AppStorePayloads.transaction(
                transactionId: "\(2_000_000_000_000_000 + index)", productId: "coins.100", bundleId: "com.example.coins", environment: .sandbox,
                appAccountToken: UUID().uuidString.lowercased()))
            input.append(contentsOf: jws.utf8)
            input.append(UInt8(ascii: "\n"))
        }
        let file = directory.appendingPathComponent("transactions.txt")
        try input.write(to: file)
        let iapctl = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("iapctl")
        guard FileManager.default.isExecutableFile(atPath: iapctl.path) else { throw UsageError("iapctl not found next to iap-harness (\(iapctl.path)); build all products") }

        var (openSSLRates, lineRates, seconds) = ([Double](), [Double](), [Double]())
        for _ in 0..<rounds {
            openSSLRates.append(try opensslVerifyRate())
            let elapsed = try verifyLines(count, iapctl: iapctl, file: file, root: root, output: directory.appendingPathComponent("verdicts.jsonl"))
            seconds.append(elapsed)
            lineRates.append(Double(count) / elapsed)
        }
        let median = { (values: [Double]) in values.sorted()[values.count / 2] }
        let ratios = zip(lineRates, openSSLRates).map { $0 / $1 }
        let (rate, openSSL, ratio) = (median(lineRates), median(openSSLRates), median(ratios))
        let list = { (values: [Double], format: String) in values.map { String(format: format, $0) }.joined(separator: ",") }
        if json {
            print(#"{"lines":\#(count),"rounds":\#(rounds),"linesPerSecond":\#(Int(rate)),"opensslSpeedVerifyPerSecond":\#(Int(openSSL)),"ratio":\#(String(format: "%.3f", ratio)),"# +
                  #""ratios":[\#(list(ratios, "%.3f"))],"linesPerSecondByRound":[\#(list(lineRates, "%.0f"))],"opensslByRound":[\#(list(openSSLRates, "%.0f"))],"# +
                  #""seconds":[\#(list(seconds, "%.2f"))]}"#)
        } else {
            print("iapctl verify --lines, \(count) distinct signed transactions: \(Int(rate)) /s (median of \(rounds) rounds: \(list(lineRates, "%.0f")))")
            print("openssl speed ecdsap256, verify:                        \(Int(openSSL)) /s (\(list(openSSLRates, "%.0f")))")
            print(String(format: "ratio: %.3f, the median of the rounds' (target >= 0.7)", ratio))
        }
        return 0
    }

    /// One run of `iapctl verify --lines` over `file`; its wall-clock seconds, once every line's verdict was checked.
    private static func verifyLines(_ count: Int, iapctl: URL, file: URL, root: URL, output: URL) throws -> Double {
        guard FileManager.default.createFile(atPath: output.path, contents: nil) else { throw UsageError("cannot create \(output.path)") }
        let verdicts = try FileHandle(forWritingTo: output)
        let clock = ContinuousClock()
        let started = clock.now
        let process = try ChildProcess(iapctl.path, ["verify", "--lines", "--bundle-id", "com.example.coins", "--environment", "Sandbox", "--root", root.path, file.path],
                                       standardOutput: verdicts.fileDescriptor, standardError: 2)
        try verdicts.close()
        process.waitUntilExit()
        let elapsed = clock.now - started
        guard process.terminationStatus == 0 else { throw UsageError("iapctl verify --lines exited \(process.terminationStatus)") }
        let verified = try Data(contentsOf: output).split(separator: UInt8(ascii: "\n")).filter { $0.starts(with: Array(#"{"#.utf8)) && $0.contains(Array(#""verdict":"verified""#.utf8)) }.count
        guard verified == count else { throw UsageError("\(verified) of \(count) lines verified") }
        return elapsed.seconds
    }

    /// The verify/s column of `openssl speed -seconds 3 ecdsap256` (one core).
    private static func opensslVerifyRate() throws -> Double {
        let pipe = Pipe()
        let process = try ChildProcess("/usr/bin/openssl", ["speed", "-seconds", "3", "ecdsap256"], standardOutput: pipe.fileHandleForWriting.fileDescriptor)
        try pipe.fileHandleForWriting.close()
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        // "256 bits ecdsa (nistp256)   0.0000s   0.0001s  37000.0  11258.0": the last column is verify/s.
        guard let line = text.split(separator: "\n").last(where: { $0.contains("nistp256") }),
              let rate = line.split(separator: " ").last.flatMap({ Double($0) }) else {
            throw UsageError("cannot read openssl speed's output: \(text.suffix(300))")
        }
        return rate
    }
}
