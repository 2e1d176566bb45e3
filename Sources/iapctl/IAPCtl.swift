import CommandLineOptions
import Crypto
import Foundation
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
          submit --store appstore|appcoins|googleplay --kind signedTransaction|appReceipt|appcoinsPurchase|googlePlayPurchase --user USER
                 [--signature SIG (AppCoins, Google Play: the input is the purchase JSON)] [--source client|server|restore] [FILE|-]
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
          adjust --user USER --id ID --by OPERATOR --reason TEXT (--currency CODE=AMOUNT | --entitlement CODE[@TIME])... | --reverse ID
                                        an operator's correction of a user's books (user.adjustment), applied once per --id
                                        by the granter and answered on user.adjusted
          appstore test-notification [--api-url URL] [--key-id ID] [--issuer-id ID] [--private-key FILE] [--bundle-id ID] [--timeout S]
                                        ask the App Store to send a TEST notification to the server URL; report whether it arrived
          appstore order ORDER_ID [--store URL] [--root FILE]... [--app-apple-id N] [API settings as above]
                                        the transactions of an order id a customer quotes (Look Up Order ID), verified,
                                        each with its owner and state in the pipeline
          user USER (--store URL [--password-file F] | --ingest URL [--read-secret-file F] [--sync])
               [--history [--limit N] [--before CURSOR]]
                                        what a user owns: balances, entitlements in force, purchases granted not finished
                                        (from the store, or from iap-ingest's GET /v1/users/{userId} as apps ask it);
                                        --sync: the ingest syncs the user with the App Store's history first;
                                        --history: what happened to the user's purchases and items, newest first, with
                                        reasons (a page of N, 50 by default; --before the page's "next" for the one after)
          user erase USER --store URL [--password-file F]
                                        erase a user on request: ids, tokens and consent go, the books stay under a pseudonym
          books --store URL [--password-file F]
                                        whether the store's books agree with themselves: every balance the sum of its ledger
                                        entries, every entry with its purchase or adjustment, nothing finished ungranted (exit 1 if not)

        The demo, the benchmarks and the chaos run are `iap-harness`'s (not in the production image).

        \(CommandOptions.kafkaSettingsHelp)
        """

    static func main(_ arguments: [String]) async -> Int32 {
        // A verifier that cannot be configured, or a root certificate that cannot be read, is a usage error.
        await runTool("iapctl", usage: usage, arguments: arguments, isUsageError: { $0 is VerifierConfigurationError || $0 is CryptoError }) { command, rest in
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
            case "adjust":
                if rest.contains("--help") {
                    print(AdjustCommand.usage)
                    return 0
                }
                return try await AdjustCommand.run(rest)
            case "lifecycle":
                print(Lifecycle.markdownTable())
                return 0
            case "appstore":
                if rest.contains("--help") {
                    print(AppStoreCommand.usage + "\n" + AppStoreOrderCommand.usage)
                    return 0
                }
                return try await AppStoreCommand.run(rest)
            case "dlq":
                return try await DeadLetterCommand.run(rest)
            case "books":
                return try await BooksCommand.run(rest)
            default:
                throw UsageError("unknown command '\(command)'")
            }
        }
    }
}
