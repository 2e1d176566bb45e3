import Foundation
import HTTPClient
import Ingest
import Metrics
import PurchaseEvents
import RequestSigning
import Stages
import WorkerRuntime

extension Workers {
    /// `iap-webhooks`' own settings.
    public static let webhooksSettings = [
        appsSetting,
        Setting("--webhooks", env: "IAP_WEBHOOKS_FILE",
                help: "the webhooks file (JSON, schemas/webhooks.v1): each endpoint with its URL, the file of its secret and the events it takes (required)"),
    ]

    public static func webhooks() async -> Int32 {
        await WorkerApp.main(command: "iap-webhooks", summary: "Forwards the pipeline's events to backends' HTTPS endpoints, as signed CloudEvents.",
                             settings: webhooksSettings) { env in
            try webhookStages(env).map { try env.runner(for: $0) }
        }
    }

    /// One stage per endpoint of the webhooks file, each with its own consumer group (`webhook-NAME`) and connections.
    public static func webhookStages(_ env: WorkerApp.Environment) throws -> [WebhookStage] {
        let path = try env.settings.required("--webhooks")
        let file: WebhooksFile
        do { file = try WebhooksFile(contentsOf: URL(fileURLWithPath: path), schemas: env.schemas) } catch {
            throw SettingsError("--webhooks (IAP_WEBHOOKS_FILE) \(path): \(error)")
        }
        let apps = try appsFile(env.settings, schemas: env.schemas)?.directory
        return try file.endpoints.map { endpoint in
            var scope: WebhookStage.AppScope?
            if let named = endpoint.apps {
                guard let apps else {
                    throw SettingsError("--webhooks (IAP_WEBHOOKS_FILE) \(path): endpoint '\(endpoint.name)' takes some apps' events: give the apps file (--apps, IAP_APPS_FILE)")
                }
                if let unknown = named.first(where: { apps.app($0) == nil }) {
                    throw SettingsError("--webhooks (IAP_WEBHOOKS_FILE) \(path): endpoint '\(endpoint.name)': the apps file has no app '\(unknown)'")
                }
                let catalogs = named.compactMap { apps.app($0)?.catalog }
                scope = .init(apps: Set(named), primary: apps.primary.id, purchases: env.store,
                              currencies: catalogs.reduce(into: []) { $0.formUnion($1.itemCodes(.currency)) },
                              entitlements: catalogs.reduce(into: []) { $0.formUnion($1.itemCodes(.entitlement)) })
            }
            if endpoint.url.scheme?.lowercased() == "http", !endpoint.allowsPlainHTTP, let host = endpoint.url.host, !PrivateAddress.isLoopback(host) {
                throw SettingsError("--webhooks (IAP_WEBHOOKS_FILE) \(path): endpoint '\(endpoint.name)': url is http to \(host): the events and their "
                                    + "signature would cross the network in clear; use https, or set allowPlainHTTP")
            }
            guard let secret = SharedSecret.read(file: endpoint.secretFile.path), !secret.isEmpty else {
                throw SettingsError("--webhooks (IAP_WEBHOOKS_FILE) \(path): endpoint '\(endpoint.name)': cannot read a secret from \(endpoint.secretFile.path)")
            }
            // An endpoint on this machine (a sidecar) is reached directly, whatever proxy the environment names: the events
            // and their signature never leave the machine. Others go through the environment's proxy but to its NO_PROXY hosts.
            let direct = endpoint.url.host.map(PrivateAddress.isLoopback) ?? false
            let client = WebhookStage.client(timeoutSeconds: endpoint.timeoutSeconds, connections: endpoint.connections,
                                             proxy: direct ? .none : .environment(env.process.variables))
            return WebhookStage(context: env.context(stage: "webhook-" + endpoint.name),
                                endpoint: .init(name: endpoint.name, url: endpoint.url, secret: secret, events: endpoint.events),
                                client: client, scope: scope,
                                observe: WebhookMetrics.observer(endpoint: endpoint.name, events: endpoint.events, env.metrics))
        }
    }
}

/// `iap_webhook_events_total{endpoint,type,outcome}`: what became of each event an endpoint takes (`WebhookOutcome`).
enum WebhookMetrics {
    static let name = "iap_webhook_events_total"

    /// The observer of `endpoint`'s events, its `delivered` series at 0 from the start so that `rate()` has them.
    static func observer(endpoint: String, events: [EventType], _ metrics: MetricsRegistry) -> @Sendable (EventType, WebhookOutcome) -> Void {
        metrics.declare(name, .counter, help: "Events an endpoint of iap-webhooks takes, by endpoint, CloudEvents type and outcome (delivered, skipped: changed "
                            + "nothing, failed: retried, refused: dead-lettered on the endpoint's 4xx, invalid: dead-lettered unsent).")
        // Each series named once: an event costs a lookup and an increment, no labels built.
        var series: [EventType: [WebhookOutcome: MetricsRegistry.SeriesKey]] = [:]
        for type in events {
            for outcome in WebhookOutcome.allCases {
                series[type, default: [:]][outcome] = metrics.series(name, ["endpoint": endpoint, "type": type.ceType, "outcome": outcome.rawValue])
            }
            if let delivered = series[type]?[.delivered] { metrics.increment(delivered, by: 0) }
        }
        let named = series
        return { type, outcome in
            if let key = named[type]?[outcome] { metrics.increment(key) }
        }
    }
}
