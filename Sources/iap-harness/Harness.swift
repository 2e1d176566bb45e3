import CommandLineOptions
import Crypto
import Foundation
import StoreVerification

/// `iap-harness`: the pipeline run end to end on stand-ins — demo, benchmark, chaos — for developers and CI. Not part
/// of the production image: it signs Apple-shaped test data with a CA of its own (`StoreFixtures`).
enum Harness {
    static let usage = """
        usage: iap-harness <command> [options]

        commands:
          demo [--brokers HOST:PORT] [--store URL] [--purchases N] [--users N] [--kill-workers] [--json]
                                        run the four workers on signed purchases and check the books
          bench [--store URL] [--purchases N] [--users N] [--rate R] [--latency-seconds S] [--partitions P] [--json]
                                        end-to-end purchases/s, latency p50/p99 at a fixed rate, hop efficiency
                                        against raw librdkafka, per-stage rates and peak RSS of the workers
          bench verify [--seconds N | --lines N [--rounds N]] [--json]
                                        signed-transaction verifications/s beside raw OpenSSL ECDSA verify/s
          bench codec [--rounds N] [--json]
                                        µs to decode and to encode each event of a purchase's walk, beside
                                        JSONSerialization parsing the same bytes
          bench ingest-memory [--requests N] [--body NAME]... [--brokers HOST:PORT] [--publish-timeout S] [--json]
                                        iap-ingest's resident memory before, at its peak and after N concurrent
                                        requests, each in two writes, of each costliest body (notification-values,
                                        notification-payload, submission-values, submission-receipt: 250 each;
                                        notification-oversized: 256 of 256 KiB), /healthz on its operations port
                                        meanwhile; without --brokers the broker is unreachable: each request is
                                        held --publish-timeout
          bench reconcile [--notifications N] [--seen-share F] [--store URL] [--brokers HOST:PORT] [--json]
                                        one reconciliation pass over a stand-in App Store notification history: time
                                        and CPU a page, and the defaults' calls an hour at 1,000,000 notifications a day
          bench webhooks [--events N] [--users N] [--latency-ms MS] [--connections C] [--partitions P] [--store URL] [--brokers HOST:PORT] [--json]
                                        grants forwarded by iap-webhooks to a receiver answering after MS: events/s
                                        beside the same requests sent straight by one client, and CPU per 1,000
          chaos --store URL [--purchases N] [--users N] [--kills-per-worker K] [--store-down CMD --store-up CMD]
                [--outage-seconds S] [--timeout S] [--lose-notifications F] [--unsubmitted F]
                [--googleplay-notifications F] [--json]
                                        the four workers killed (SIGKILL) and restarted at random, the store taken
                                        down once, a share F (0.1) of the App Store's notifications never delivered
                                        (the sweeper reads them back from its history), a share F (0.05) of the
                                        consumables paid and never submitted (only the store announces them), a
                                        share F (0.5) of the Google Play one-time purchases announced by Google's
                                        push to iap-ingest too, then the invariants against the input; exit 0 only
                                        without a violation
          probe-abuse [--port N] [--connections N] [--trickle-ms MS] [--reopen-ms MS] [--seconds S] [--json]
                                        slow connections held open against an operations port (without --port: a
                                        started iap-ingest's) while /healthz and /readyz are probed with a 1 s
                                        timeout; how many probes failed, exit 1 if any

        \(CommandOptions.kafkaSettingsHelp)
        """

    static func main(_ arguments: [String]) async -> Int32 {
        // A verifier that cannot be configured, or a root certificate that cannot be read, is a usage error.
        await runTool("iap-harness", usage: usage, arguments: arguments, isUsageError: { $0 is VerifierConfigurationError || $0 is CryptoError }) { command, rest in
            switch command {
            case "demo":
                return try await DemoCommand.run(rest)
            case "chaos":
                return try await ChaosCommand.run(rest)
            case "probe-abuse":
                return try await ProbeAbuseCommand.run(rest)
            case "bench":
                if rest.first == "verify" { return try BenchVerifyCommand.run(Array(rest.dropFirst())) }
                if rest.first == "codec" { return try BenchCodecCommand.run(Array(rest.dropFirst())) }
                if rest.first == "ingest-memory" { return try await BenchIngestMemoryCommand.run(Array(rest.dropFirst())) }
                if rest.first == "reconcile" { return try await BenchReconcileCommand.run(Array(rest.dropFirst())) }
                if rest.first == "webhooks" { return try await BenchWebhooksCommand.run(Array(rest.dropFirst())) }
                return try await BenchPipelineCommand.run(rest)
            default:
                throw UsageError("unknown command '\(command)'")
            }
        }
    }
}

/// A figure for a report, to three decimals.
func thousandths(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }
