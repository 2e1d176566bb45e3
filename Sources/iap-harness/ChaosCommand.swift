import ChildProcesses
import CommandLineOptions
import Foundation
import JSON
import JSONSchema
import Kafka
import PipelineHarness
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import StoreFixtures
import StoreVerification
import Synchronization

/// `iap-harness chaos --store postgres://… [--purchases N] [--users N] [--kills-per-worker K] [--store-down CMD --store-up CMD]
/// [--outage-seconds S] [--replicas churn|one-two-one|none] [--partitions P] [--rate R] [--lose-notifications SHARE]
/// [--unsubmitted SHARE] [--googleplay-notifications SHARE] [--trapping N] [--timeout S] [--json]`: the pipeline under faults, then its books.
///
/// Submits N messages (20 % duplicates, 1 % forged, 0.5 % malformed, and N trapping the verifier (3 by default), each
/// restarted after a trap until the message is dead-lettered `crashedWorker`; all at once, or R per second) to the four
/// worker processes, pushes Google Play's notifications to the ingest (`GooglePlayNotificationPlan`), and has Stripe refund
/// and dispute web purchases, their webhooks delivered to the ingest or lost (`StripeDecisionPlan`); while they
/// work, kills each worker with SIGKILL K times at random moments and restarts it, takes the store down once for S
/// seconds (the commands given), and has replicas of the stages join and leave (`churn` by default; see `ReplicaPlan`). Then checks the invariants against the generated input. Exit 0 only without a violation;
/// `--json` prints one object on the last line.
enum ChaosCommand {
    static let stages = ["iap-verifier", "iap-granter", "iap-finisher", "iap-sweeper"]

    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--brokers", "--kafka", "--store", "--purchases", "--users", "--kills-per-worker",
                                                             "--store-down", "--store-up", "--outage-seconds", "--timeout", "--replicas",
                                                             "--partitions", "--rate", "--lose-notifications", "--unsubmitted",
                                                             "--googleplay-notifications", "--trapping"], flags: ["--json"])
        let total = try options.int("--purchases") ?? 50_000
        let users = try options.int("--users") ?? 5_000
        let killsPerWorker = try options.int("--kills-per-worker") ?? 5
        let outageSeconds = try options.int("--outage-seconds") ?? 20
        let timeout = try options.int("--timeout") ?? 1_200
        let partitions = try options.int("--partitions") ?? 4
        // Submissions that trap the verifier (the test-only fault), each until it is dead-lettered crashedWorker.
        let trapping = try options.int("--trapping", in: 0...100) ?? 3
        let rate = try options.int("--rate")
        // A share of the App Store's notifications never reaches the pipeline (the webhook down): the store keeps them in
        // its history, which the sweeper's reconciliation reads.
        let loseShare = options.string("--lose-notifications").flatMap(Double.init) ?? 0.1
        guard (0...1).contains(loseShare) else { throw UsageError("--lose-notifications must be a share within 0…1") }
        // A share of the App Store's consumable charges no app ever submits (it died after the payment): the store's
        // ONE_TIME_CHARGE is all the pipeline learns of them.
        let unsubmittedShare = options.string("--unsubmitted").flatMap(Double.init) ?? 0.05
        guard (0..<1).contains(unsubmittedShare) else { throw UsageError("--unsubmitted must be a share within 0…1 (less than 1)") }
        // A share of the Google Play one-time purchases Google announces too, by a notification pushed to the ingest.
        let announcedShare = options.string("--googleplay-notifications").flatMap(Double.init) ?? 0.5
        guard (0...1).contains(announcedShare) else { throw UsageError("--googleplay-notifications must be a share within 0…1") }
        guard total >= 1_000, users >= 1, killsPerWorker >= 0, outageSeconds >= 0, partitions >= 1, (rate ?? 1) >= 1,
              let replicaMode = ReplicaPlan.Mode(rawValue: options.string("--replicas") ?? ReplicaPlan.Mode.churn.rawValue) else {
            throw UsageError("chaos: --purchases ≥ 1000, --users ≥ 1, --kills-per-worker and --outage-seconds ≥ 0, --partitions and --rate ≥ 1, "
                             + "--replicas churn, one-two-one or none")
        }
        guard let storeURL = options.string("--store") ?? ProcessInfo.processInfo.environment["IAP_STORE_URL"] else {
            throw UsageError("chaos: --store (or IAP_STORE_URL) is required: a PostgreSQL database of its own")
        }
        let outage = (options.string("--store-down"), options.string("--store-up"))
        guard (outage.0 == nil) == (outage.1 == nil) else { throw UsageError("chaos: --store-down and --store-up go together") }
        let json = options.flags.contains("--json")
        let say: @Sendable (String) -> Void = { line in FileHandle.standardError.write(Data((line + "\n").utf8)) }
        let kafka = try options.kafkaConfiguration()
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("iap-chaos-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        let prefix = "chaos-\(UUID().uuidString.prefix(6).lowercased())."
        let schemas = try JSONSchemaRegistry.eventSchemas()
        let codec = EventCodec(schemas: schemas, source: "/iap-pipeline/chaos", topicPrefix: prefix)
        try await KafkaAdmin(kafka: kafka).createTopics(codec.pipelineTopics, partitions: Int32(partitions))
        try await SQLPurchaseStore(url: storeURL).migrate()

        let started = Date()
        let pki = try TestPKI.make(name: "iap-pipeline chaos")
        let appStore = try StandInAppStore()
        let appCoins = try StandInAppCoins()
        let googlePlay = try StandInGooglePlay()
        let stripe = try StandInStripe()
        defer {
            appStore.api.server.shutdown()
            appCoins.api.server.shutdown()
            googlePlay.api.server.shutdown()
            stripe.api.server.shutdown()
        }
        var inputPlan = chaosPlan(total: total, users: users)
        inputPlan.trapping = trapping
        let input = try PurchaseInput.make(inputPlan, pki: pki, codec: codec, now: started, appCoins: appCoins,
                                           googlePlay: googlePlay, stripe: stripe)
        appStore.record(input.unique)
        let submittedConsumables = input.purchases(of: .appstore).count { $0.product.entitlement == nil }
        var unsubmitted = UnsubmittedChargePlan(try UnsubmittedCharges.make(
            count: Int((Double(submittedConsumables) * unsubmittedShare / (1 - unsubmittedShare)).rounded()), of: input, pki: pki, now: started,
            firstTransactionId: input.plan.firstTransactionId + 2_000_000_000_000))
        unsubmitted.charges.record(in: appStore)
        // The same share of Google Play's consumables, which Google announces only by a notification.
        let submittedOnGooglePlay = input.purchases(of: .googleplay).count { $0.product.entitlement == nil }
        var googlePlayNotifications = GooglePlayNotificationPlan(input, share: announcedShare, unsubmitted: try UnsubmittedCharges.googlePlay(
            count: Int((Double(submittedOnGooglePlay) * unsubmittedShare / (1 - unsubmittedShare)).rounded()), of: input, googlePlay: googlePlay,
            now: started, firstTransactionId: input.plan.firstTransactionId + 3_000_000_000_000))
        var stripeDecisions = StripeDecisionPlan(input)
        let byStore = Dictionary(grouping: input.unique) { purchase in
            "\(purchase.store.rawValue) " + (purchase.product.isSubscription ? "subscription period" : purchase.product.entitlement == nil ? "consumable" : "non-consumable")
        }
        say("chaos: \(total) messages (\(input.unique.count) unique valid: "
            + byStore.sorted { $0.key < $1.key }.map { "\($0.value.count) \($0.key)" }.joined(separator: ", ")
            + "; \(input.plan.duplicates) duplicates, \(input.forged.count) forged, "
            + "\(input.malformed.count) malformed, \(input.trapping.count) trapping the verifier; \(unsubmitted.charges.count) App Store and \(googlePlayNotifications.unsubmitted.charges.count) Google Play "
            + "consumables paid and never submitted) for \(users) users; workers \(prefix)*; signed in \(Int(Date().timeIntervalSince(started))) s")

        let workers = try WorkerProcesses.withStandInStores(
            directory: work, kafka: kafka, storeURL: storeURL, prefix: prefix, pki: pki, schemas: schemas, catalog: PurchaseInput.catalog(web: true),
            // The workers' own group settings: a killed member's partitions move once its session (10 s) ends.
            appStore: appStore, appCoins: appCoins, googlePlay: googlePlay,
            environment: ["IAP_SWEEP_INTERVAL": "2", "IAP_RECONCILE_INTERVAL": "5", "IAP_TEST_FAULT_MARK": PurchaseInput.trapMark,
                          "IAP_TRAP_RECORDS": work.appendingPathComponent("trap-records").path].merging(try stripe.environment(in: work)) { _, web in web })
        defer { workers.stopAll() }
        for name in stages { try workers.start(name) }
        // Google Play's pushes come through the ingest (not killed: Pub/Sub would retry what it refused).
        try workers.start("iap-ingest")
        let watcher = try PipelineWatcher(kafka: kafka, codec: codec, groupID: prefix + "chaos-watcher")
        // Faults are placed by progress, so the clock starts with everyone in their groups.
        _ = try await workers.waitUntilReady(Array(stages.prefix(3)) + ["iap-ingest"], say: say) { watcher.isAssigned ? nil : "watcher not assigned" }
        let ingest = { @Sendable in "http://127.0.0.1:\(try await workers.port(of: "iap-ingest"))" }
        let producer = try KafkaProducer(configuration: .init(kafka: kafka))
        let messages = input.messages
        // Refunds of App Store purchases (rule 5: events do not arrive in order): one in five hundred (not subscription
        // periods) refunded before any submission is sent; then one in a hundred of those finished, in four rounds while the
        // faults happen, half of the first two rounds' refunds reversed in the last two. Each refund revokes its purchase once
        // and takes back what it gave; each reversal gives it back and the purchase is finished again.
        let refundable = Dictionary(uniqueKeysWithValues: input.purchases(of: .appstore).map { ($0.transactionId, $0) })
        let refundedFirst = Array(refundable.values.filter { !$0.product.isSubscription }.shuffled().prefix(input.unique.count / 500))
        var refunds = RefundPlan(total: input.unique.count / 100, first: Set(refundedFirst.map(\.transactionId)))
        let refundProducer = try KafkaProducer(configuration: .init(kafka: kafka))
        var lost = LostNotifications(share: loseShare)
        // The messages of the notifications that reach the pipeline; the others are only in the store's history.
        func notifications(_ type: AppStoreNotificationType, subtype: String? = nil, _ purchases: [PurchaseInput.Purchase]) throws -> [KafkaProducerMessage] {
            try purchases.compactMap { purchase in
                let notification = try PurchaseInput.notification(type, subtype: subtype, of: purchase, pki: pki, at: Date())
                guard lost.delivers(notification, to: appStore.api) else { return nil }
                return try codec.message(notification, time: Date())
            }
        }
        func notifications(_ list: [SubscriptionNotificationPlan.Notification]) throws -> [KafkaProducerMessage] {
            try list.flatMap { try notifications($0.type, subtype: $0.subtype, [$0.period]) }
        }
        let first = try notifications(.refund, refundedFirst)
        var subscriptionNotifications = SubscriptionNotificationPlan(input)
        for result in await refundProducer.send(contentsOf: try first + notifications(subscriptionNotifications.first)
                                                  + notifications(.oneTimeCharge, unsubmitted.early)) {
            _ = try result.get()
        }
        try await googlePlayNotifications.push(googlePlayNotifications.early, with: googlePlay.push, to: ingest)
        say("refunded \(first.count) purchases before their submission; sent \(subscriptionNotifications.first.count) subscription periods' EXPIRED "
            + "and \(unsubmitted.early.count) ONE_TIME_CHARGE without an account token; pushed \(googlePlayNotifications.pushed) Google Play notifications")
        // All at once, or `rate` per second in tenths of a second, alongside the faults.
        @Sendable func submit() async throws {
            let chunk = rate.map { max(1, $0 / 10) } ?? 5_000
            let begun = ContinuousClock.now
            for (index, start) in stride(from: 0, to: messages.count, by: chunk).enumerated() {
                if let rate { try await Task.sleep(until: begun + .milliseconds(Int64(index * chunk * 1000 / rate)), clock: .continuous) }
                for result in await producer.send(contentsOf: Array(messages[start..<min(messages.count, start + chunk)])) { _ = try result.get() }
            }
            // The apps' reports of the web coins they delivered, some before their grant.
            for result in await producer.send(contentsOf: input.consumptionReports) { _ = try result.get() }
            await producer.shutdown()
            say("submitted \(messages.count) messages in \(Int(Date().timeIntervalSince(started))) s")
        }
        let submissionFailure = Mutex<String?>(nil)
        let submitting = Task {
            do {
                try await submit()
            } catch {
                submissionFailure.withLock { $0 = "\(error)" }
                throw error
            }
        }
        if rate == nil { try await submitting.value }
        let store = try SQLPurchaseStore(url: storeURL)

        // The faults, at random points of progress (distinct outcomes seen ÷ expected) so that they land mid-run.
        var plan = ChaosPlan(stages: stages, killsPerWorker: killsPerWorker, outage: outage.0 == nil || outageSeconds == 0 ? nil : outageSeconds)
        var replicas = ReplicaPlan(mode: replicaMode)
        let deadline = Date().addingTimeInterval(TimeInterval(timeout))
        var lastReport = Date()
        var outageTask: Task<Void, any Error>?
        var selfExits: [(name: String, replica: Int, status: Int32)] = []
        while true {
            // A purchase refunded first has no outcome on the topics when its refund came first (its submission answered
            // `revoked`), one when its submission overtook the refund: it is counted by the store's revocations instead.
            let done = watcher.outcomes(of: input, excluding: refunds.first)
            let expected = input.outcomesExpected - refunds.first.count
            let progress = Double(done) / Double(expected)
            if done >= expected && plan.isComplete && replicas.isComplete && outageTask == nil, refunds.isComplete, subscriptionNotifications.sentMidway,
               refunds.firstAnswered(watcher.seen), unsubmitted.allAnnounced, googlePlayNotifications.allPushed, try await lost.unhandled(by: store) == 0,
               try await refunds.settled(in: store), try await unsubmitted.settled(in: store), try await googlePlayNotifications.unsubmitted.settled(in: store),
               stripeDecisions.isComplete, try await stripeDecisions.isSettled(in: store) { break }
            // A binding refunded before its submission is answered `revoked`, never granted: it still names its user.
            let (granted, answered) = watcher.read { ($0.grantedTransactions, $0.grantedTransactions.union($0.rejectedTransactions.keys)) }
            let charges = unsubmitted.due(answered: answered)
            if !charges.isEmpty {
                for result in await refundProducer.send(contentsOf: try notifications(.oneTimeCharge, charges)) { _ = try result.get() }
            }
            try await googlePlayNotifications.push(googlePlayNotifications.due(granted: granted, answered: answered), with: googlePlay.push, to: ingest)
            let dueNotifications = subscriptionNotifications.due(at: progress)
            if !dueNotifications.isEmpty {
                for result in await refundProducer.send(contentsOf: try notifications(dueNotifications)) { _ = try result.get() }
                say(String(format: "  sent %d subscription notifications at %.0f %%", dueNotifications.count, progress * 100))
            }
            let due = refunds.due(at: progress) { [first = refunds.first] in
                watcher.read { Set($0.finished.keys) }.filter { refundable[$0] != nil }.subtracting(first)
            }
            if !due.refunds.isEmpty || !due.reversals.isEmpty {
                let sent = try notifications(.refund, due.refunds.compactMap { refundable[$0] })
                    + notifications(.refundReversed, due.reversals.compactMap { refundable[$0] })
                for result in await refundProducer.send(contentsOf: sent) { _ = try result.get() }
                say(String(format: "  refunded %d finished purchases, reversed %d refunds at %.0f %%", due.refunds.count, due.reversals.count, progress * 100))
            }
            if let said = try await stripeDecisions.decide(at: progress, finished: { watcher.read { Set($0.finished.keys) } }, stripe: stripe, ingest: ingest) { say("  " + said) }
            // A worker that ended by itself (a trap) is started again, as Kubernetes restarts a container.
            for exit in try workers.restartExited(stages) { // every replica of each (ReplicaPlan's stages are among them)
                selfExits.append(exit)
                say(String(format: "  %@ (replica %d) ended by itself (%@) and was restarted at %.0f %%", exit.name, exit.replica,
                           exit.status == SIGILL ? "SIGILL: a trap" : "status \(exit.status)", progress * 100))
            }
            try await replicas.perform(at: progress, workers: workers, say: say)
            for name in plan.killsDue(at: progress, lastFault: { replicas.lastEvent[$0] }) {
                try workers.killAndRestart(name)
                say(String(format: "  killed (SIGKILL) and restarted %@ at %.0f %%", name, progress * 100))
            }
            if let down = outage.0, let up = outage.1, plan.outageDue(at: progress) {
                say(String(format: "  store down for %d s at %.0f %%", outageSeconds, progress * 100))
                outageTask = Task {
                    try await shell(down)
                    try await Task.sleep(for: .seconds(outageSeconds))
                    try await shell(up)
                }
            }
            if let task = outageTask, plan.outageEnded(now: Date()) {
                try await task.value
                outageTask = nil
                say("  store up again")
            }
            if Date().timeIntervalSince(lastReport) >= 10 {
                say("  … \(done)/\(expected) outcomes")
                lastReport = Date()
            }
            if let failure = submissionFailure.withLock({ $0 }) { throw UsageError("chaos: submitting failed: \(failure)") }
            guard Date() < deadline else {
                say("chaos: timed out after \(timeout) s")
                submitting.cancel()
                break
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        let seconds = Date().timeIntervalSince(started)
        await refundProducer.shutdown()
        _ = await submitting.result // cancelled on a timeout: what was sent is what the books count
        await replicas.recordRunning(workers)
        workers.stopAll()
        await watcher.stop()

        let onlyAnnounced = googlePlayNotifications.unsubmitted.charges
        var books = try await PipelineBooks.check(input: input, expectations: .init(revoked: refunds.refunded.subtracting(refunds.reversed).union(stripeDecisions.revoked),
                                                                                     restored: refunds.reversed.union(stripeDecisions.restored), refundedFirst: refunds.first,
                                                                                     unsubmitted: unsubmitted.charges.adding(onlyAnnounced)),
                                                  seen: watcher.seen, store: store, finishCalls: appStore.api.finishTimes)
        books.violations += replicas.violations
        // Only the trapping submissions end a worker by itself: the verifier's, by a trap, at most twice each.
        for exit in selfExits where exit.name != "iap-verifier" || exit.status != SIGILL {
            books.violations.append("\(exit.name) (replica \(exit.replica)) ended by itself with status \(exit.status)")
        }
        // Each Google Play purchase completed at the store once, through the kills, the outage and the replicas; none that
        // nobody claimed.
        let googlePlayViolations = googlePlay.completionViolations(input.unique + onlyAnnounced.withToken.map(\.charge), untouched: onlyAnnounced.withoutToken)
        books.violations += googlePlayViolations.prefix(20)
        if googlePlayNotifications.undelivered > 0 {
            books.violations.append("\(googlePlayNotifications.undelivered) Google Play notifications never acknowledged by the ingest")
        }
        // What a further pass over the store's history would publish: nothing, once every notification was handled.
        let unhandled = try await lost.unhandled(by: store)
        if unhandled > 0 { books.violations.append("\(unhandled) of the store's \(lost.sent.count) notifications were never handled (\(lost.lost.count) lost)") }
        let web = try await stripeDecisions.report(input, store: store)
        books.violations += web.violations
        var summary = books.chaosSummary(input: input, plan: plan, refunds: refunds, seconds: seconds)
        if case .object(var fields) = summary {
            fields["replicas"] = replicas.summary
            fields["trapRestarts"] = .integer(Int64(selfExits.count))
            fields["subscriptionNotifications"] = subscriptionNotifications.summary
            fields["notifications"] = lost.summary
            let onGooglePlay = input.purchases(of: .googleplay)
            let completedOnce = { (purchases: [PurchaseInput.Purchase]) in purchases.count { googlePlay.completionViolation($0) == nil } }
            fields["googlePlay"] = .object(["purchases": .integer(Int64(onGooglePlay.count)), "completedOnce": .integer(Int64(completedOnce(onGooglePlay)))])
            // Web purchases: each granted once and finished (coins by the app's report, ad-free at its grant) or flagged, as the books checked; Stripe's decisions.
            fields["stripe"] = web.summary
            fields["googlePlayNotifications"] = googlePlayNotifications.summary(
                completedOnce: completedOnce(googlePlayNotifications.announced),
                grantedByToken: books.chargesGrantedByToken[.googleplay] ?? 0, flaggedUnclaimed: books.chargesFlaggedUnclaimed[.googleplay] ?? 0)
            if case .object(var charges) = unsubmitted.summary {
                charges["grantedByToken"] = .integer(Int64(books.chargesGrantedByToken[.appstore] ?? 0))
                charges["flaggedUnclaimed"] = .integer(Int64(books.chargesFlaggedUnclaimed[.appstore] ?? 0))
                charges["revokedBeforeFlagging"] = .integer(Int64(books.chargesRevokedBeforeFlagging))
                fields["unsubmittedCharges"] = .object(charges)
            }
            summary = .object(fields)
        }
        print(books.chaosTable(input: input, plan: plan, refunds: refunds, web: stripeDecisions, seconds: seconds))
        print("subscription notifications: " + subscriptionNotifications.description)
        print("notifications: \(lost.sent.count) sent by the store, \(lost.lost.count) never delivered and read back from its history by the reconciler")
        print("Google Play notifications: " + googlePlayNotifications.description)
        print("Stripe: " + stripeDecisions.description)
        print("charges never submitted: \(unsubmitted.charges.withToken.count) with a known account token → \(books.chargesGrantedByToken[.appstore] ?? 0) granted to its user "
              + "once; \(unsubmitted.charges.withoutToken.count) without → \(books.chargesFlaggedUnclaimed[.appstore] ?? 0) flagged unclaimed once at their deadline; "
              + "\(unsubmitted.charges.refundedUnannounced.count) refunded at the store unannounced → \(books.chargesRevokedBeforeFlagging) revoked, not flagged")
        print("replicas: " + ReplicaPlan.stages.map { "\($0) \(replicas.joins[$0] ?? 0) joins, \(replicas.leaves[$0] ?? 0) leaves, handled by replica "
            + (replicas.handled[$0] ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ")
            + ", group rejoins \(replicas.groupRejoins(of: $0))" }.joined(separator: "; "))
        if json { print(summary.serializedText) }
        guard books.violations.isEmpty else {
            say("the workers' logs are kept in \(work.path)")
            return 1
        }
        try? FileManager.default.removeItem(at: work) // Kept on a violation or a crash of this command, for the workers' logs.
        return 0
    }

    /// `total` messages: 20 % duplicates, 1 % forged, 0.5 % malformed, 3 % the periods of subscriptions (one in a hundred
    /// messages: a renewal, then an upgrade that ends it early), the rest distinct valid purchases of random users, of every
    /// store and other product type the catalog sells (App Store coins and ad-free, AppCoins coins, Google Play coins and
    /// ad-free, web coins and ad-free through Stripe).
    static func chaosPlan(total: Int, users: Int) -> PurchaseInput.Plan {
        var plan = PurchaseInput.Plan(unique: 0, users: users, firstTransactionId: 5_000_000_000_000)
        plan.duplicates = total / 5
        plan.forged = max(1, total / 100)
        plan.malformed = max(1, total / 200)
        plan.subscriptions = total / 100
        plan.unique = total - plan.duplicates - plan.forged - plan.malformed - PurchaseInput.subscriptionPeriods(now: Date()).count * plan.subscriptions
        plan.randomUsers = true
        plan.appAccountTokens = true
        plan.userPrefix = "chaos-user-"
        plan.products = PurchaseInput.mixedProducts + PurchaseInput.webProducts
        return plan
    }

    /// Runs `command` with /bin/sh, its output on standard error (standard output is the report); waits for its end
    /// (waitpid on its pid: Foundation's `Process` did not always notice the end of a command that left a daemon behind,
    /// such as `pg_ctl start`).
    private static func shell(_ command: String) async throws {
        let child = try ChildProcess("/bin/sh", ["-c", command], standardOutput: 2, standardError: 2)
        let status: Int32 = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                child.waitUntilExit()
                continuation.resume(returning: child.terminationStatus)
            }
        }
        guard status == 0 else { throw HarnessError("chaos: `\(command)` failed (exit status \(status))") }
    }
}
