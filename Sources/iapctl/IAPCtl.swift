import Foundation
import Crypto
import Kafka
import PurchaseDomain
import StoreVerification

/// `iapctl`: the operator's command-line tool.
enum IAPCtl {
    static let usage = """
        usage: iapctl <command> [options]

        commands:
          version                       librdkafka, OpenSSL, libpq and SQLite versions in use
          topics create NAME... | --all [--topic-prefix P] [--partitions N] [--replication-factor R] [--brokers HOST:PORT]
                                        create missing topics (--all: every topic of the pipeline)
          topics list [--brokers HOST:PORT] [--kafka key=value]...
          verify [--kind KIND] [--root FILE]... [--receipt-root FILE]... [--bundle-id ID] [--environment ENV] [--app-apple-id N]
                 [--allow-unsigned-test-data] [--online-checks] [--appcoins-url URL] [--appcoins-app PACKAGE=FILE]... [--lines] [FILE|-]
                                        verify store payloads; one JSON verdict each (see `iapctl verify --help`)
          submit --store appstore|appcoins --kind signedTransaction|appReceipt|appcoinsPurchase --user USER
                 [--signature SIG (AppCoins: the input is the purchase JSON)] [--source client|server|restore] [FILE|-]
                                        wrap a raw payload into a purchase.submitted event and publish it
          produce --topic T [FILE|-]    publish JSON lines, each checked against the topic's schema first
          tail --topic T [--from-beginning] [--max N] [--timeout SECONDS]
                                        print events as they arrive, one JSON line each
          dlq list|replay [--reason R] [--since TIME] [--topic-prefix P] [--dry-run]
                                        show dead letters; re-publish their original messages to their source topic
          migrate --store URL [--password-file F] [--catalog FILE]
                                        apply the purchase store's schema migrations (sqlite:PATH or postgres://…);
                                        --catalog names the product type of purchases recorded before types were kept
          lifecycle                     the purchase lifecycle by product type, as a Markdown table
          user USER (--store URL [--password-file F] | --ingest URL [--read-secret-file F])
                                        what a user owns: balances, entitlements in force, purchases granted not finished
                                        (from the store, or from iap-ingest's GET /v1/users/{userId} as apps ask it)
          demo [--brokers HOST:PORT] [--store URL] [--purchases N] [--users N] [--kill-workers] [--json]
                                        run the four workers on signed purchases and check the books
          bench [--store URL] [--purchases N] [--users N] [--rate R] [--latency-seconds S] [--partitions P] [--json]
                                        end-to-end purchases/s, latency p50/p99 at a fixed rate, hop efficiency
                                        against raw librdkafka, per-stage rates and peak RSS of the workers
          bench verify [--seconds N | --lines N] [--json]
                                        signed-transaction verifications/s beside raw OpenSSL ECDSA verify/s
          chaos --store URL [--purchases N] [--users N] [--kills-per-worker K] [--store-down CMD --store-up CMD]
                [--outage-seconds S] [--timeout S] [--json]
                                        the four workers killed (SIGKILL) and restarted at random, the store taken
                                        down once, then the invariants against the input; exit 0 only without a violation

        Kafka settings: KAFKA_BOOTSTRAP_SERVERS and any KAFKA_<PROPERTY> environment variable
        (dots as underscores), overridden by --brokers and --kafka key=value.
        """

    static func main(_ arguments: [String]) async -> Int32 {
        do {
            try KafkaLibrary.requireSupportedVersion()
            guard let command = arguments.first else {
                print(usage)
                return 2
            }
            let rest = Array(arguments.dropFirst())
            switch command {
            case "version":
                print(VersionReport.current().text)
                return 0
            case "topics":
                return try TopicsCommand.run(rest)
            case "verify":
                if rest.contains("--help") {
                    print(VerifyCommand.usage)
                    return 0
                }
                return try await VerifyCommand.run(rest)
            case "submit":
                return try await ProduceCommands.submit(rest)
            case "produce":
                return try await ProduceCommands.produce(rest)
            case "tail":
                return try await ProduceCommands.tail(rest)
            case "migrate":
                return try await MigrateCommand.run(rest)
            case "user":
                return try await UserCommand.run(rest)
            case "lifecycle":
                print(Lifecycle.markdownTable())
                return 0
            case "demo":
                return try await DemoCommand.run(rest)
            case "dlq":
                return try await DeadLetterCommand.run(rest)
            case "chaos":
                return try await ChaosCommand.run(rest)
            case "bench":
                if rest.first == "verify" { return try BenchVerifyCommand.run(Array(rest.dropFirst())) }
                return try await BenchPipelineCommand.run(rest)
            case "help", "--help", "-h":
                print(usage)
                return 0
            default:
                throw UsageError("unknown command '\(command)'")
            }
        } catch let error as UsageError {
            FileHandle.standardError.write(Data("iapctl: \(error.message)\n\n\(usage)\n".utf8))
            return 2
        } catch {
            FileHandle.standardError.write(Data("iapctl: \(error)\n".utf8))
            // A verifier that cannot be configured, or a root certificate that cannot be read, is a usage error.
            return error is VerifierConfigurationError || error is CryptoError ? 2 : 1
        }
    }
}

struct UsageError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
