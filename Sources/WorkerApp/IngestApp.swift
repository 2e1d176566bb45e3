import Foundation
import HTTPServer
import Ingest
import Kafka
import Metrics
import PurchaseEvents
import PurchaseStore
import RequestSigning
import StoreVerification
import WorkerRuntime

extension Workers {
    /// `iap-ingest`: the HTTP bridge from store webhooks and client submissions to the pipeline's topics.
    public static func ingest() async -> Int32 {
        let settings = [
            Setting("--http-port", env: "IAP_HTTP_PORT", default: "8080", help: "port of the API and of /metrics, /healthz, /readyz (0 picks a free port)"),
            Setting("--max-body-bytes", env: "IAP_INGEST_MAX_BODY_BYTES", default: "262144", help: "larger bodies are answered 413"),
            Setting("--max-connections", env: "IAP_INGEST_MAX_CONNECTIONS", default: "256", help: "connections served at once; more are answered 503"),
            Setting("--max-connections-per-address", env: "IAP_INGEST_MAX_CONNECTIONS_PER_ADDRESS",
                    help: "connections served at once from one client address, more answered 503 (only where clients connect directly: behind a proxy every client shares its address); unset: no cap"),
            Setting("--body-budget-bytes", env: "IAP_INGEST_BODY_BUDGET_BYTES", default: String(defaultBodyBudgetBytes),
                    help: "request bodies held in memory at once, over all connections (at least --max-body-bytes); a body that finds no room within 1 s is answered 503 with Retry-After. The default suits a 128 MiB replica"),
            Setting("--request-timeout", env: "IAP_INGEST_REQUEST_TIMEOUT", default: "15",
                    help: "seconds a client has to send a whole request, headers and body, however slowly; then 408"),
            Setting("--ops-port", env: "IAP_OPS_PORT",
                    help: "port of /metrics, /healthz and /readyz with reasons (0 picks a free port); the API port then answers /readyz without reasons and no /metrics"),
            Setting("--ops-host", env: "IAP_OPS_HOST",
                    help: "address of the --ops-port endpoints (unset: --http-host's); e.g. 127.0.0.1 where the probes and the scraper run on the same host"),
            Setting("--publish-timeout", env: "IAP_PUBLISH_TIMEOUT", default: "10",
                    help: "seconds to wait for the broker's acknowledgement before answering 503 (librdkafka message.timeout.ms)"),
            Setting("--client-secret-file", env: "IAP_INGEST_CLIENT_SECRET_FILE",
                    help: "file with the shared secret that signs POST /v1/purchases (X-IAP-Timestamp, X-IAP-Signature: v1=…; or IAP_INGEST_CLIENT_SECRET); unset: no signature required"),
            Setting("--read-side", env: "IAP_INGEST_READ_SIDE", default: "false",
                    help: "serve GET /v1/users/{userId} (what a user owns) from --store", isSwitch: true),
            Setting("--store", env: "IAP_STORE_URL", help: "purchase store of the read side (sqlite:PATH or postgres://…; a read-only role suffices)"),
            Setting("--store-password-file", env: "IAP_STORE_PASSWORD_FILE", help: "file holding the PostgreSQL password; else PGPASSWORD or ~/.pgpass"),
            Setting("--read-secret-file", env: "IAP_INGEST_READ_SECRET_FILE",
                    help: "file with the shared secret that signs GET /v1/users requests (or IAP_INGEST_READ_SECRET); required with --read-side unless --http-host is a private address"),
            Setting("--environment", env: "IAP_ENVIRONMENT", default: "Production",
                    help: "the environment --appstore-api-url serves (Production or Sandbox), for POST /v1/users/{userId}/sync"),
        ] + googlePlayPushSettings + stripeWebhookSettings + appStoreAPISettings
        return await WorkerApp.launch(command: "iap-ingest", summary: "Publishes the stores' notifications and client submissions as pipeline events.",
                                      settings: settings) { process in
            var kafka = process.kafka
            if kafka["message.timeout.ms"] == nil, let seconds = try process.settings.seconds("--publish-timeout") {
                guard (0.001...2_147_483).contains(seconds) else { throw SettingsError("--publish-timeout (IAP_PUBLISH_TIMEOUT) must be 0.001–2147483 seconds") }
                kafka["message.timeout.ms"] = String(Int(seconds * 1000))
            }
            let secret = try secret(process.settings, file: "--client-secret-file", variable: "IAP_INGEST_CLIENT_SECRET")
            guard let port = try process.settings.int("--http-port"), (0...65535).contains(port) else {
                throw SettingsError("--http-port (IAP_HTTP_PORT) must be 0–65535")
            }
            guard let maxBody = try process.settings.int("--max-body-bytes"), maxBody > 0,
                  let maxConnections = try process.settings.int("--max-connections"), maxConnections > 0,
                  let requestTimeout = try process.settings.seconds("--request-timeout"), (0.1...3600).contains(requestTimeout) else {
                throw SettingsError("--max-body-bytes and --max-connections must be positive, --request-timeout 0.1–3600 seconds")
            }
            guard let bodyBudget = try process.settings.int("--body-budget-bytes"), bodyBudget >= maxBody else {
                throw SettingsError("--body-budget-bytes (IAP_INGEST_BODY_BUDGET_BYTES) must be at least --max-body-bytes (\(maxBody))")
            }
            let perAddress = try process.settings.int("--max-connections-per-address") ?? maxConnections
            guard perAddress > 0 else { throw SettingsError("--max-connections-per-address (IAP_INGEST_MAX_CONNECTIONS_PER_ADDRESS) must be positive") }
            let operationsPort = try process.settings.int("--ops-port")
            if let operationsPort, !(0...65535).contains(operationsPort) { throw SettingsError("--ops-port (IAP_OPS_PORT) must be 0–65535") }
            let publisher = try EventPublisher(codec: process.codec(component: "ingest"), kafka: kafka)
            let api = IngestAPI(configuration: .init(clientSecret: secret, googlePlayPush: try googlePlayPush(process.settings, metrics: process.metrics),
                                                     stripeWebhook: try stripeWebhook(process.settings)),
                                publisher: publisher, logger: process.logger, metrics: process.metrics)
            let host = process.settings.string("--http-host") ?? "0.0.0.0"
            let holdings = try readSide(process, host: host, publisher: publisher)
            let probe = try BrokerProbe(kafka: process.kafka)
            let readiness: @Sendable () async -> Readiness = {
                let broker = probe.status
                if !broker.reachable { return .notReady("broker unreachable: \(broker.detail)") }
                if api.recentlyFailed { return .notReady("a publish was not acknowledged in the last 10 s") }
                return .ready
            }
            var http = HTTPServer.Configuration(host: host, maxBodyBytes: maxBody, requestTimeout: .milliseconds(Int64(requestTimeout * 1000)),
                                                maxConnections: maxConnections, maxConnectionsPerAddress: perAddress, bodyBudgetBytes: bodyBudget,
                                                bodyLimit: { _, path in api.bodyLimit(path: path) })
            http.onRefusal = { status, path in api.countRefusal(status: status, path: path) }
            let routes: OperationsServer.Routes = { request in
                if let answer = await api.route(request) { return answer }
                return await holdings?.route(request)
            }
            // A flood of requests leaves its memory with the allocator, free but resident, unless trimmed after.
            let trimmer = MallocArenas.Trimmer { api.answeredRequests }
            var launch = WorkerApp.Launch(services: [probe, trimmer], readiness: readiness, http: (UInt16(port), http, routes),
                                          afterStop: { await publisher.shutdown() })
            launch.operationsPort = operationsPort.map(UInt16.init)
            launch.operationsHost = process.settings.string("--ops-host")
            return launch
        }
    }

    /// The default `--body-budget-bytes`, sized for the 128 MiB a replica has in `deploy/k8s`: a body costs the ingest
    /// up to about three times its size while it is handled (parsed, its event encoded, librdkafka's copy), beside the
    /// process's own ~40 MiB and ~11 MiB for 256 connections' threads and buffers; 12 MiB of bodies keep a replica
    /// under 96 MiB, three quarters of its limit.
    static let defaultBodyBudgetBytes = 12 * 1024 * 1024

    /// A shared secret from the file a setting names, else from an environment variable; nil when neither is set.
    private static func secret(_ settings: Settings, file setting: String, variable: String) throws -> Data? {
        var secret: Data?
        if let path = settings.string(setting) {
            guard let contents = SharedSecret.read(file: path) else { throw SettingsError("\(setting): cannot read \(path)") }
            secret = contents
        } else if let value = ProcessInfo.processInfo.environment[variable], !value.isEmpty {
            secret = Data(value.utf8)
        }
        if secret?.isEmpty == true { throw SettingsError("\(setting): the secret is empty") }
        return secret
    }

    /// Google Play's real-time developer notifications, pushed by Cloud Pub/Sub to `POST /v1/googleplay/notifications`.
    static let googlePlayPushSettings = [
        Setting("--googleplay-push-audience", env: "IAP_GOOGLEPLAY_PUSH_AUDIENCE",
                help: "serve POST /v1/googleplay/notifications (Google Play real-time developer notifications, a Pub/Sub push subscription with "
                    + "authentication): the audience its OIDC tokens name (the endpoint's URL unless the subscription sets another); unset: not served"),
        Setting("--googleplay-push-service-account", env: "IAP_GOOGLEPLAY_PUSH_SERVICE_ACCOUNT",
                help: "the service account e-mail the push subscription authenticates as (required with --googleplay-push-audience)"),
        Setting("--googleplay-push-keys", env: "IAP_GOOGLEPLAY_PUSH_KEYS", default: GoogleSigningKeys.googleCertificatesURL,
                help: "Google's OIDC signing certificates: their URL, or a file of the same form (key id → PEM certificate)"),
    ]

    /// The authenticator of Google Play's pushes, its reads of Google's keys from their URL counted in `metrics`
    /// (`StoreAPIMetrics`); nil without `--googleplay-push-audience`.
    static func googlePlayPush(_ settings: Settings, metrics: MetricsRegistry) throws -> PubSubPushAuthenticator? {
        guard let audience = settings.string("--googleplay-push-audience"), !audience.isEmpty else { return nil }
        let email = try settings.required("--googleplay-push-service-account")
        let keys = try settings.required("--googleplay-push-keys")
        let source: GoogleSigningKeys.Source = keys.hasPrefix("https://") || keys.hasPrefix("http://") ? .url(keys) : .file(keys)
        let observer: StoreAPIObserver?
        switch source {
        case .file(let path):
            guard FileManager.default.fileExists(atPath: path) else { throw SettingsError("--googleplay-push-keys (IAP_GOOGLEPLAY_PUSH_KEYS): no file \(path)") }
            observer = nil
        case .url: observer = StoreAPIMetrics.observer(.googleplay, metrics)
        }
        return PubSubPushAuthenticator(configuration: .init(audience: audience, serviceAccountEmail: email),
                                       keys: GoogleSigningKeys(source: source, observer: observer))
    }

    /// Stripe's webhook deliveries to `POST /v1/stripe/webhooks`.
    static let stripeWebhookSettings = [
        Setting("--stripe-webhook-secrets", env: "IAP_STRIPE_WEBHOOK_SECRETS_FILE",
                help: "serve POST /v1/stripe/webhooks (Stripe's webhook events): the file of the endpoint's signing secrets, one whsec_… a line "
                    + "(the new and the old one while a secret is rolled); unset: not served"),
        Setting("--stripe-webhook-tolerance", env: "IAP_STRIPE_WEBHOOK_TOLERANCE", default: "300",
                help: "seconds a delivery's Stripe-Signature timestamp may be from the clock (against replays)"),
    ]

    /// The check of Stripe's webhook signatures; nil without `--stripe-webhook-secrets`.
    static func stripeWebhook(_ settings: Settings) throws -> StripeWebhookSignature? {
        guard let path = settings.string("--stripe-webhook-secrets"), !path.isEmpty else { return nil }
        guard let contents = FileManager.default.contents(atPath: path) else {
            throw SettingsError("--stripe-webhook-secrets (IAP_STRIPE_WEBHOOK_SECRETS_FILE): cannot read \(path)")
        }
        let secrets = String(decoding: contents, as: UTF8.self).split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard !secrets.isEmpty, secrets.allSatisfy({ $0.hasPrefix("whsec_") && $0.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F } }) else {
            throw SettingsError("--stripe-webhook-secrets (IAP_STRIPE_WEBHOOK_SECRETS_FILE) \(path): expected one endpoint secret (whsec_…) a line")
        }
        guard let tolerance = try settings.seconds("--stripe-webhook-tolerance"), (1...86_400).contains(tolerance) else {
            throw SettingsError("--stripe-webhook-tolerance (IAP_STRIPE_WEBHOOK_TOLERANCE) must be 1–86400 seconds")
        }
        return try StripeWebhookSignature(secrets: secrets, tolerance: tolerance)
    }

    /// `GET /v1/users/{userId}` with `--read-side` (an explicit choice: deployments hand `IAP_STORE_URL` to every
    /// executable); refused without a secret on an address others can reach.
    /// With the App Store Server API (`appStoreAPISettings`), it also syncs a user with the App Store on request.
    private static func readSide(_ process: WorkerApp.ProcessEnvironment, host: String, publisher: EventPublisher) throws -> UserHoldingsAPI? {
        guard process.settings.flag("--read-side") else { return nil }
        guard let url = process.settings.string("--store") else { throw SettingsError("--read-side needs --store (IAP_STORE_URL)") }
        let secret = try secret(process.settings, file: "--read-secret-file", variable: "IAP_INGEST_READ_SECRET")
        if secret == nil && !PrivateAddress.contains(host) {
            throw SettingsError("--read-side serves what users own: set --read-secret-file (IAP_INGEST_READ_SECRET_FILE) or bind --http-host to a private address (now \(host))")
        }
        let password = try process.settings.string("--store-password-file").map(SQLPurchaseStore.password(fromFile:))
        let store = try SQLPurchaseStore(url: url, password: password)
        // Counted only where they can be called: without a secret the sync is off.
        var apis = try appStoreAPIsByEnvironment(process.settings, schemas: process.schemas, metrics: secret == nil ? nil : process.metrics,
                                                 purpose: "to sync users with the App Store")
        if apis != nil && secret == nil {
            // A write (it submits purchases for the user), where the read side may be open to a private network.
            process.logger.warning("POST /v1/users/{userId}/sync is off: it needs --read-secret-file (IAP_INGEST_READ_SECRET_FILE)")
            apis = nil
        }
        return UserHoldingsAPI(store: store, secret: secret, logger: process.logger, metrics: process.metrics,
                               sync: apis.map { AppStoreUserSync(store: store, apis: $0, publisher: publisher) })
    }
}
