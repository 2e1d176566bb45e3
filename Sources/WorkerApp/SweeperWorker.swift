import Foundation
import JSON
import Kafka
import Metrics
import PurchaseDomain
import PurchaseEvents
import Stages
import StoreVerification

extension Workers {
    /// The sweeper's own settings: its schedule and deadlines, and the App Store Server API, Google Play's voided
    /// purchases and Stripe's events it reconciles with.
    public static let sweeperSettings = [
        Setting("--once", env: "IAP_SWEEP_ONCE", default: "false", help: "sweep (and reconcile) once and exit (for a Kubernetes CronJob)", isSwitch: true),
        Setting("--interval", env: "IAP_SWEEP_INTERVAL", default: "300", help: "seconds between sweeps"),
        Setting("--appstore-deadline-hours", env: "IAP_APPSTORE_DEADLINE_HOURS", default: "24", help: "consume deadline of App Store purchases"),
        Setting("--appcoins-deadline-hours", env: "IAP_APPCOINS_DEADLINE_HOURS", default: "24", help: "consume deadline of AppCoins purchases"),
        Setting("--googleplay-deadline-hours", env: "IAP_GOOGLEPLAY_DEADLINE_HOURS", default: "72",
                help: "deadline of Google Play purchases: Google refunds one not acknowledged (or consumed) within three days"),
        Setting("--stripe-deadline-hours", env: "IAP_STRIPE_DEADLINE_HOURS", default: "24", help: "consume deadline of web purchases paid through Stripe"),
        Setting("--now", env: "IAP_NOW", help: "sweep as if it were this RFC 3339 time (tests, operations)"),
        Setting("--near-deadline-hours", env: "IAP_NEAR_DEADLINE_HOURS", default: "6",
                help: "purchases still open this close to their store's deadline are counted by iap_purchases_near_deadline (alert on any)"),
        Setting("--rejection-retention-days", env: "IAP_REJECTION_RETENTION_DAYS", default: "90",
                help: "how long the submissions refused are kept for the users' histories (support's 'I paid and got nothing')"),
        Setting("--appcoins-url", env: "IAP_APPCOINS_URL", default: AppCoinsVerifier.Configuration.defaultBaseURL.absoluteString,
                help: "AppCoins API base URL, to re-check due AppCoins purchases before flagging them"),
        Setting("--environment", env: "IAP_ENVIRONMENT", default: "Production",
                help: "the environment --appstore-api-url serves (Production or Sandbox): how long the App Store keeps its notification history"),
        Setting("--reconcile-interval", env: "IAP_RECONCILE_INTERVAL", default: "900",
                help: "seconds between passes over the App Store's notification history (with --appstore-api-url), Google Play's "
                    + "voided purchases (with --googleplay-app) and Stripe's events (with --stripe-secret-key)"),
        Setting("--reconcile-lookback-hours", env: "IAP_RECONCILE_LOOKBACK_HOURS", default: "168",
                help: "how far back the first pass over a store's history reads"),
        clawBackSetting,
        Setting("--catalog", env: "IAP_CATALOG", help: "the product catalog file: its stripe section, if any, sells on Stripe, whose events are reconciled"),
    ] + appStoreAPISettings + appStoreTrustSettings + googlePlayVerifierSettings + stripeAPISettings

    public static func sweeper() async -> Int32 {
        await WorkerApp.main(command: "iap-sweeper", summary: "Flags purchases paid but not completed by their deadline; reconciles with the App Store and Google Play.",
                             settings: sweeperSettings) { env in
            let services = try sweeperServices(env)
            if env.settings.flag("--once") {
                let flagged = try await services.sweeper.sweepOnce()
                let recovered = try await services.reconciler?.reconcileOnce().values.reduce(0) { $0 + $1.recovered }
                env.logger.info("swept once", ["flagged": flagged, "recovered": recovered ?? 0])
                return []
            }
            return [services.sweeper] + (services.reconciler.map { [$0] } ?? [])
        }
    }

    /// The sweeper, and the reconciler when the App Store Server API or a Google Play app is configured, from their settings; the reconciler's figures
    /// are on `/metrics`.
    public static func sweeperServices(_ env: WorkerApp.Environment) throws
        -> (sweeper: SweeperService<ContinuousClock>, reconciler: StoreReconciler<ContinuousClock>?) {
        var now: @Sendable () -> Date = Date.init
        if let text = env.settings.string("--now") {
            guard let fixed = RFC3339.parse(text) else { throw SettingsError("--now (IAP_NOW) must be an RFC 3339 time, got '\(text)'") }
            now = { fixed }
        }
        let hours = try ["--appstore-deadline-hours", "--appcoins-deadline-hours", "--googleplay-deadline-hours", "--stripe-deadline-hours"].map { flag -> Double in
            guard let value = try env.settings.seconds(flag), value > 0 else { throw SettingsError("\(flag) must be positive") }
            return value
        }
        guard let retentionDays = try env.settings.seconds("--rejection-retention-days"), retentionDays > 0 else {
            throw SettingsError("--rejection-retention-days (IAP_REJECTION_RETENTION_DAYS) must be positive")
        }
        let context = StageContext(codec: env.context(stage: "sweeper").codec, logger: env.logger, now: now)
        // The deployment's apps and App Store clients, resolved once for the rechecks, the reconciler and the gauges.
        let apps = try configuredApps(env)
        let appStoreAPIs = try appStoreAPIsByEnvironment(env.settings, schemas: env.schemas, metrics: env.metrics,
                                                         purpose: "to ask and reconcile with the App Store Server API")
        let googlePlay = try googlePlayVerifier(env.settings, apps: apps, metrics: env.metrics)
        let deadlines: [Store: TimeInterval] = [.appstore: hours[0] * 3600, .appcoins: hours[1] * 3600, .googleplay: hours[2] * 3600, .stripe: hours[3] * 3600]
        let sweeper = SweeperService(
            configuration: .init(deadlines: deadlines,
                                 interval: .milliseconds(Int64((try env.settings.seconds("--interval") ?? 300) * 1000)),
                                 refundsGooglePlay: env.settings.flag("--claw-back-due-refunds"), rejectionRetention: retentionDays * 86_400),
            store: env.store, producer: try KafkaProducer(configuration: .init(kafka: env.producerKafka)), context: context, clock: ContinuousClock(),
            appCoins: try env.settings.string("--appcoins-url").map { text in
                guard let url = URL(string: text) else { throw SettingsError("--appcoins-url (IAP_APPCOINS_URL) is not a URL") }
                return AppCoinsVerifier(configuration: .init(baseURL: url, observer: StoreAPIMetrics.observer(.appcoins, env.metrics)))
            },
            appStores: try appStoreLookups(env, apps: apps, apis: appStoreAPIs), googlePlay: googlePlay)
        // The store's history is read up to the real time, whatever `--now` says: a checkpoint in the future would stop
        // every later pass until that time came.
        env.metrics.declare("iap_sweeper_store_checks_total", .counter,
                            help: "Questions to the App Store before a flag or about a lapsed subscription, and to Google Play about a lapsed subscription or a due refund, by outcome; "
                                + "alert while unavailable, untrusted or googlePlayUnavailable grow.")
        env.metrics.declare("iap_refunds_flagged_total", .counter,
                            help: "Purchases this sweeper flagged refund-due (paid, not completed by their deadline), by store; each store's series starts at 0.")
        env.metrics.addCollector { metrics in
            for (outcome, count) in sweeper.storeChecks { metrics.set("iap_sweeper_store_checks_total", ["outcome": outcome], to: Double(count)) }
            let flagged = sweeper.flaggedDue
            for store in deadlines.keys { metrics.set("iap_refunds_flagged_total", ["store": store.rawValue], to: Double(flagged[store] ?? 0)) }
        }
        try registerNearDeadline(env, apps: apps.directory, deadlines: deadlines, now: now)
        // Stripe's events are read when an app sells there and the key is set.
        let stripe = apps.directory.apps.contains { !$0.stripePrices.isEmpty } ? try stripeAPI(env.settings, metrics: env.metrics) : nil
        return (sweeper, try reconciler(env, googlePlay: googlePlay, apis: appStoreAPIs, stripe: stripe,
                                        context: StageContext(codec: context.codec, logger: env.logger)))
    }

    /// Each App Store app's App Store of each environment the API is configured for, with the verifier of its answers:
    /// asked before an App Store purchase is flagged. None without `--appstore-api-url`; with it, `--root` is required (an
    /// answer is trusted no more than an app's submission).
    static func appStoreLookups(_ env: WorkerApp.Environment, apps: ConfiguredApps,
                                apis: PerApp<[AppStoreEnvironment: AppStoreServerAPIClient]>?) throws -> PerApp<[AppStoreEnvironment: AppStoreLookup]> {
        guard let apis else { return PerApp(single: [:]) }
        guard !env.settings.list("--root").isEmpty else {
            throw SettingsError("--appstore-api-url (IAP_APPSTORE_API_URL) needs --root (IAP_ROOT_CERTIFICATES): the App Store's answers are verified")
        }
        // One verifier per environment, of every app's data.
        var verifiers: [AppStoreEnvironment: SignedDataVerifier] = [:]
        for environment in Set(apis.byApp.values.flatMap(\.keys)) {
            verifiers[environment] = try signedDataVerifier(env, apps: apps, environment: environment)
        }
        return apis.mapValues { byEnvironment in
            byEnvironment.reduce(into: [:]) { lookups, entry in
                if let verifier = verifiers[entry.key] { lookups[entry.key] = AppStoreLookup(api: entry.value, verifier: verifier) }
            }
        }
    }

    /// The reconciler: one App Store history per API configured (the deployment's environment's, the sandbox's), the
    /// voided purchases of each Google Play app, and Stripe's events when an app sells there.
    static func reconciler(_ env: WorkerApp.Environment, googlePlay: GooglePlayVerifier?, apis: PerApp<[AppStoreEnvironment: AppStoreServerAPIClient]>?,
                           stripe: StripeAPIClient?, context: StageContext) throws -> StoreReconciler<ContinuousClock>? {
        // Each App Store app's (the primary app's first, under the names it had before apps were named): the deployment's
        // environment's history first, then the sandbox's.
        var histories: [any StoreHistory] = (apis?.ordered ?? []).flatMap { app, byEnvironment in
            byEnvironment.sorted { $0.key != .sandbox && $1.key == .sandbox }
                .map { AppStoreNotificationHistory(environment: $0.key, api: $0.value, app: app == apis?.primary ? nil : app) }
        }
        if let googlePlay {
            histories += googlePlay.configuration.apps.keys.sorted { $0.rawValue.utf8.lexicographicallyPrecedes($1.rawValue.utf8) }
                .map { GooglePlayVoidedPurchasesHistory(packageName: $0, api: googlePlay.api) }
        }
        if let stripe { histories.append(StripeEventHistory(api: stripe)) }
        guard !histories.isEmpty else { return nil }
        guard let interval = try env.settings.seconds("--reconcile-interval"), interval > 0,
              let lookback = try env.settings.seconds("--reconcile-lookback-hours"), lookback > 0 else {
            throw SettingsError("--reconcile-interval and --reconcile-lookback-hours must be positive")
        }
        let reconciler = StoreReconciler(
            configuration: .init(interval: .milliseconds(Int64(interval * 1000)), firstLookback: lookback * 3600), histories: histories,
            store: env.store, producer: try KafkaProducer(configuration: .init(kafka: env.producerKafka)), context: context, clock: ContinuousClock())
        ReconcilerMetrics.register(reconciler, metrics: env.metrics, now: context.now)
        return reconciler
    }
}

extension Workers {
    /// `iap_purchases_near_deadline{store}`: purchases still open (verified or granted, not finished) within
    /// `--near-deadline-hours` of their store's deadline. On Google Play each is about to be refunded by Google (three days
    /// without an acknowledgement or consumption): the finisher is failing to complete them.
    static func registerNearDeadline(_ env: WorkerApp.Environment, apps: AppDirectory, deadlines: [Store: TimeInterval],
                                     now: @escaping @Sendable () -> Date) throws {
        guard let hours = try env.settings.seconds("--near-deadline-hours"), hours > 0 else {
            throw SettingsError("--near-deadline-hours (IAP_NEAR_DEADLINE_HOURS) must be positive")
        }
        let store = env.store
        env.metrics.declare("iap_purchases_near_deadline", .gauge,
                            help: "Purchases still open (not finished) within --near-deadline-hours of their store's deadline, by store (and app, with --apps); "
                                + "alert on any (Google Play refunds what it was not told was delivered within three days).")
        env.metrics.addCollector { metrics in
            for (storeName, deadline) in deadlines {
                do {
                    let open = try await store.openPurchases(store: storeName, boughtBefore: now().addingTimeInterval(-(deadline - hours * 3600)))
                    guard apps.namesApps else {
                        metrics.set("iap_purchases_near_deadline", ["store": storeName.rawValue], to: Double(open.values.reduce(0, +)))
                        continue
                    }
                    // Every configured app, at zero when it has none (a bounded label); what was recorded without an app is the primary's.
                    for app in apps.apps {
                        let count = (open[app.id] ?? 0) + (app.id == apps.primary.id ? open[nil] ?? 0 : 0)
                        metrics.set("iap_purchases_near_deadline", ["store": storeName.rawValue, "app": app.id.rawValue], to: Double(count))
                    }
                } catch {
                    // The last figure stays: iap_store_up reports the outage itself.
                    env.logger.warning("near-deadline purchases not counted", ["store": storeName.rawValue, "error": "\(error)"])
                }
            }
        }
    }
}

/// The reconciler's figures on `/metrics`.
enum ReconcilerMetrics {
    static func register(_ reconciler: StoreReconciler<ContinuousClock>, metrics: MetricsRegistry, now: @escaping @Sendable () -> Date) {
        metrics.declare("iap_reconciler_recovered_notifications_total", .counter,
                        help: "What the pipeline never received, found in a store's history and published, by history: App Store notifications (alert on any), Google Play voided purchases.")
        metrics.declare("iap_reconciler_listed_notifications_total", .counter, help: "Entries the stores' histories listed to reconciliation passes.")
        metrics.declare("iap_reconciler_api_calls_total", .counter, help: "Calls to the store's history, by outcome (ok, unavailable, refused).")
        metrics.declare("iap_reconciler_lag_seconds", .gauge,
                        help: "How far behind a store's history reconciliation is, by history (time since the last completed pass read to).")
        metrics.addCollector { metrics in
            let totals = reconciler.totals
            for (history, count) in totals.recovered { metrics.set("iap_reconciler_recovered_notifications_total", ["history": history], to: Double(count)) }
            metrics.set("iap_reconciler_listed_notifications_total", to: Double(totals.listed))
            for (outcome, count) in totals.calls { metrics.set("iap_reconciler_api_calls_total", ["outcome": outcome], to: Double(count)) }
            for (history, position) in totals.positions {
                metrics.set("iap_reconciler_lag_seconds", ["history": history], to: max(0, now().timeIntervalSince(position)))
            }
        }
    }
}
