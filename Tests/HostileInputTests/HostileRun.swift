import Foundation
@testable import HTTPServer
import Ingest
import InMemoryPurchaseStore
import JSON
import Kafka
import Metrics
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import Synchronization
import TestSupport
import WorkerRuntime

/// A repository the hostile runs drive the stages on, with the reads their checks make: both stores have these.
protocol HostileRepository: SubscriptionStatusRepository, ConsumptionRequestRepository {
    func balances(of userId: UserID) async throws -> [ItemCode: Int64]
    func holdings(of userId: UserID, at now: Date) async throws -> UserHoldings
    /// Where the books disagree with themselves; empty when they balance.
    func bookMismatches() async throws -> [String]
}

extension InMemoryPurchaseStore: HostileRepository {}

extension SQLPurchaseStore: HostileRepository {
    func bookMismatches() async throws -> [String] {
        let audit = try await audit(listingPurchases: false)
        return audit.balanceMismatches + audit.orphanGrants.map { "\($0): grant without purchase" } + audit.orphanAdjustmentEntries.map { "\($0): entry without adjustment" }
            + audit.finishedWithoutGrant.map { "\($0): finished without a grant" }
    }
}

/// The repositories a hostile run drives the stages on: the in-memory one and each SQL engine available to the run.
enum HostileEngine: String, Sendable, CaseIterable {
    case memory, sqlite, postgres

    static var available: [HostileEngine] { [.memory] + StoreEngine.available.map { $0 == .sqlite ? .sqlite : .postgres } }

    /// An empty repository, and for SQL the store the read side (`GET /v1/users/{id}`) reads.
    func fresh() async throws -> (any HostileRepository, SQLPurchaseStore?) {
        switch self {
        case .memory: return (InMemoryPurchaseStore(), nil)
        case .sqlite, .postgres:
            let store = try SQLPurchaseStore(url: try await (self == .sqlite ? StoreEngine.sqlite : .postgres).freshURL())
            try await store.migrate()
            return (store, store)
        }
    }
}

/// What a hostile run found: inputs tried and outcomes by topic, the violations of its invariants, and each user's
/// balances at its end (to compare the repositories).
struct HostileReport: Sendable {
    var tried: [String: Int] = [:]
    var outcomes: [String: Int] = [:]
    var violations: [String] = []
    var finalBalances: [UserID: [ItemCode: Int64]] = [:]

    mutating func merge(_ other: HostileReport) {
        tried.merge(other.tried, uniquingKeysWith: +)
        outcomes.merge(other.outcomes, uniquingKeysWith: +)
        violations += other.violations
    }
}

/// The stages as they run in the pipeline (the verifier, the granter, the finisher) on one repository, fed hostile
/// messages of every input topic in batches as the runner hands them over; what one stage publishes goes on to the
/// stage that consumes it. After each step: no thrown error but a transient one, every refusal with a reason, every
/// published event valid against its schema; every few steps and at the end: the books balance, and each user the
/// inputs named reads back exactly what the store holds.
struct HostileRun {
    static let pki = try! TestPKI.make(name: "hostile inputs")
    let seed: UInt64
    let engine: HostileEngine
    let steps: Int
    /// `IAP_FUZZ_TRACE=1`: every message and its outcome printed, to follow a failing seed.
    static let tracing = ProcessInfo.processInfo.environment["IAP_FUZZ_TRACE"] == "1"

    /// A clock the run moves on: the same times on every repository.
    final class Clock: Sendable {
        let now = Mutex(HostileEvents.t0)
        func advance() { now.withLock { $0 = $0.addingTimeInterval(61) } }
        var current: Date { now.withLock { $0 } }
    }

    func run() async throws -> HostileReport {
        let (repository, sql) = try await engine.fresh()
        let clock = Clock()
        let codec = StageFixtures.codec
        let context = StageContext(codec: codec, logger: Logger(stage: "hostile", minimum: .error, sink: { _ in }), now: { clock.current })
        let pki = Self.pki
        let stages: [any MessageStage] = [
            VerifierStage(context: context, store: repository,
                          stores: StoreVerifiers(appStore: AppStoreVerifiers(
                            signedData: try SignedDataVerifier(configuration: .init(trustedRoots: [pki.root], bundleId: StageFixtures.bundleID, environment: .sandbox)),
                            receipts: try ReceiptVerifier(configuration: .init(trustedRoots: [pki.root], bundleId: StageFixtures.bundleID, environment: .sandbox))))),
            GranterStage(context: context, store: repository, catalog: StageFixtures.catalog, clawBackDueRefunds: true),
            FinisherStage(context: context, store: repository, appStoreAPI: nil),
        ]
        let readSide = sql.map { UserHoldingsAPI(store: $0, secret: nil, logger: context.logger, metrics: MetricsRegistry(), now: { clock.current }) }
        var events = HostileEvents(seed: seed, pki: pki)
        var report = HostileReport()
        var offset: Int64 = 0
        func violation(_ text: String) { report.violations.append("seed \(seed) on \(engine): \(text)") }

        for step in 0..<steps {
            clock.advance()
            // A batch of one stage's topics, as one partition's consumer hands it over.
            let first = HostileEvents.topics.randomElement(using: &events.rng) ?? .purchaseSubmitted
            guard let stage = stages.first(where: { $0.topics.contains(codec.topic(first)) }) else { continue }
            var inputs: [KafkaMessage] = []
            for _ in 0..<Int.random(in: 1...6, using: &events.rng) {
                let type = events.chance(2) ? first : HostileEvents.topics.filter { stage.topics.contains(codec.topic($0)) }.randomElement(using: &events.rng) ?? first
                var message = try events.message(type, at: clock.current)
                // A verified purchase reaches the granter once the verifier recorded it: mostly so here too.
                if type == .purchaseVerified, !events.chance(5), case .success(let verified) = codec.decode(message, as: PurchaseVerifiedEvent.self) {
                    _ = try? await repository.recordVerified(PurchaseRecord(
                        key: PurchaseKey(store: verified.store, transactionId: verified.transactionId), userId: verified.userId, productId: verified.productId,
                        productType: verified.productType.flatMap(ProductType.init(rawValue:)) ?? .consumable, quantity: verified.quantity,
                        purchaseTime: verified.purchaseDate ?? clock.current, originalTransactionId: verified.originalTransactionId), at: clock.current)
                }
                message.offset = offset
                offset += 1
                inputs.append(message)
                report.tried[type.rawValue, default: 0] += 1
            }
            var queue = [(stage, inputs)]
            // What each stage publishes goes on to the stage that consumes it (a few hops: submitted → verified → granted).
            var hops = 0
            while let (stage, batch) = queue.first, hops < 8 {
                queue.removeFirst()
                hops += 1
                let results = await handleAsTheRunnerDoes(stage, batch)
                if Self.tracing {
                    for (message, result) in zip(batch, results) { print("[\(engine) step \(step)] \(stage.name) \(message.topic) \(HostileReport.printable(message.value)) → \(result)") }
                }
                if results.count != batch.count { violation("\(stage.name) answered \(results.count) of \(batch.count) messages") }
                for (message, result) in zip(batch, results) {
                    let published = check(result, of: message, stage: stage, codec: codec, report: &report)
                    for (index, out) in published.enumerated() {
                        guard let next = stages.first(where: { $0.topics.contains(out.topic) }) else { continue }
                        let forwarded = KafkaMessage(topic: out.topic, partition: 0, offset: offset + Int64(index), key: out.key, value: out.value, headers: out.headers)
                        if let at = queue.firstIndex(where: { $0.0.name == next.name }) { queue[at].1.append(forwarded) } else { queue.append((next, [forwarded])) }
                    }
                    offset += Int64(published.count)
                }
            }
            if step % 25 == 24 || step == steps - 1 {
                for mismatch in try await repository.bookMismatches() { violation("the books do not balance after step \(step): \(mismatch)") }
                for user in events.namedUsers where Self.storable(user) {
                    await readBack(user, repository: repository, readSide: readSide, at: clock.current, violation: violation)
                }
            }
        }
        for user in events.namedUsers where Self.storable(user) {
            let balances = try await repository.balances(of: user)
            if !balances.isEmpty { report.finalBalances[user] = balances }
        }
        return report
    }

    /// Whether the store can be asked about `user` at all: PostgreSQL takes no NUL in a text parameter (the producer
    /// contract refuses control characters in ids, so no such user holds anything).
    static func storable(_ user: UserID) -> Bool { !user.rawValue.utf8.contains(0) }

    /// Checks one message's outcome; the events it publishes.
    func check(_ result: Result<StageResult, any Error>, of message: KafkaMessage, stage: any MessageStage, codec: EventCodec, report: inout HostileReport) -> [KafkaProducerMessage] {
        func violation(_ text: String) { report.violations.append("seed \(seed) on \(engine): \(text)") }
        let topic = codec.eventType(ofTopic: message.topic)?.rawValue ?? message.topic
        let input = "\(topic) \(HostileReport.printable(message.value))"
        switch result {
        case .failure(let error):
            if stage.isTransient(error) {
                report.outcomes["\(topic): transient"] = (report.outcomes["\(topic): transient"] ?? 0) + 1
            } else {
                violation("\(stage.name) threw \(error) on \(input)")
            }
            return []
        case .success(.deadLetter(let reason, let detail)):
            report.outcomes["\(topic): dead letter \(reason)", default: 0] += 1
            if reason.isEmpty || detail.isEmpty { violation("\(stage.name) dead-lettered without a reason ('\(reason)', '\(detail)') \(input)") }
            return []
        case .success(.publish(let out)), .success(.recheck(let out, _)):
            report.outcomes["\(topic): answered", default: 0] += 1
            for event in out { checkPublished(event, by: stage, codec: codec, input: input, report: &report) }
            return out
        }
    }

    /// A published event is valid against its schema; a refusal (`purchase.rejected`, a refused `user.adjusted`) names its reason.
    func checkPublished(_ event: KafkaProducerMessage, by stage: any MessageStage, codec: EventCodec, input: String, report: inout HostileReport) {
        func violation(_ text: String) { report.violations.append("seed \(seed) on \(engine): \(text)") }
        guard let type = codec.eventType(ofTopic: event.topic), let value = event.value, let body = JSONValue.parse(Array(value)) else {
            violation("\(stage.name) published on \(event.topic) what is not a JSON event, for \(input)")
            return
        }
        let invalid = codec.schemas.validate(body, against: type.schemaID)
        if !invalid.isEmpty { violation("\(stage.name) published a \(type.rawValue) its schema refuses (\(invalid.map(\.description))), for \(input)") }
        switch type {
        case .purchaseRejected:
            let reason = body.objectValue?["reason"]?.stringValue ?? ""
            report.outcomes["rejected \(reason)", default: 0] += 1
            if reason.isEmpty { violation("\(stage.name) rejected without a reason, for \(input)") }
        case .userAdjusted where body.objectValue?["outcome"]?.stringValue == "refused":
            let reason = body.objectValue?["refusal"]?.stringValue ?? ""
            report.outcomes["adjustment refused \(reason)", default: 0] += 1
            if reason.isEmpty { violation("\(stage.name) refused an adjustment without a reason, for \(input)") }
        default: break
        }
    }

    /// What `user` reads (`GET /v1/users/{id}` on SQL; the repository's holdings in memory) is what the store holds: each
    /// balance by its currency's bytes, and the entitlements.
    func readBack(_ user: UserID, repository: any HostileRepository, readSide: UserHoldingsAPI?, at now: Date, violation: (String) -> Void) async {
        do {
            let balances = try await repository.balances(of: user)
            let holdings = try await repository.holdings(of: user, at: now)
            if holdings.balances != balances { violation("\(HostileReport.printable(user)) holds \(balances), its holdings say \(holdings.balances)") }
            guard let readSide else { return }
            let path = UserHoldingsAPI.pathPrefix + (user.rawValue.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")
            guard let response = await readSide.route(HTTPRequest(method: "GET", path: path, query: nil, headers: [:], body: Data())) else {
                violation("GET \(path) not routed"); return
            }
            guard response.status == 200 else {
                // An id the producer contract refuses is refused here too; then the store must hold nothing of it.
                if response.status != 400 || !balances.isEmpty || !holdings.entitlements.isEmpty {
                    violation("GET \(path) answered \(response.status) \(HostileReport.printable(response.body)) while the store holds \(balances)")
                }
                return
            }
            let read = Self.balances(in: Array(response.body))
            if read != balances { violation("GET \(path) reads \(String(describing: read)), the store holds \(balances)") }
            let entitlements = (JSONValue.parse(response.body)?.objectValue?["entitlements"]?.arrayValue ?? []).compactMap { $0.objectValue?["entitlement"]?.stringValue }
            if entitlements.map({ ItemCode($0) }) != holdings.entitlements.map(\.entitlement) {
                violation("GET \(path) reads entitlements \(entitlements), the store holds \(holdings.entitlements)")
            }
        } catch {
            violation("reading \(HostileReport.printable(user)) back failed: \(error)")
        }
    }

    /// The `balances` member of a holdings answer, each currency keyed by its bytes (a `String`-keyed parse would merge
    /// two spellings of one text); nil when it is not there or not as `UserHoldingsAPI.encode` writes it.
    static func balances(in body: [UInt8]) -> [ItemCode: Int64]? {
        let marker = Array("\"balances\":{".utf8)
        guard let start = (0...(body.count - marker.count)).last(where: { body[$0..<($0 + marker.count)].elementsEqual(marker) }) else { return nil }
        var index = start + marker.count
        var balances: [ItemCode: Int64] = [:]
        while index < body.count, body[index] != UInt8(ascii: "}") {
            if body[index] == UInt8(ascii: ",") { index += 1 }
            guard body[index] == UInt8(ascii: "\"") else { return nil }
            var end = index + 1
            while end < body.count, body[end] != UInt8(ascii: "\"") { end += body[end] == UInt8(ascii: "\\") ? 2 : 1 }
            guard end < body.count, case .string(let name)? = JSONValue.parse(body[index...end]), body[end + 1] == UInt8(ascii: ":") else { return nil }
            var valueEnd = end + 2
            while valueEnd < body.count, body[valueEnd] != UInt8(ascii: ","), body[valueEnd] != UInt8(ascii: "}") { valueEnd += 1 }
            guard let amount = JSONValue.parse(body[(end + 2)..<valueEnd])?.int64Value, balances.updateValue(amount, forKey: ItemCode(name)) == nil else { return nil }
            index = valueEnd
        }
        return balances
    }
}

extension HostileReport {
    /// `value` as text when it is printable UTF-8 of reasonable length, else (or beyond 300 bytes) as hex.
    static func printable(_ value: Data?) -> String {
        guard let value else { return "(no value)" }
        let shown = value.prefix(300)
        let more = value.count > 300 ? "… (\(value.count) bytes)" : ""
        if let text = String(validating: shown, as: UTF8.self), !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control && $0 != "\n" }) {
            return text + more
        }
        return "hex " + shown.map { String($0, radix: 16).leftPadded }.joined() + more
    }

    static func printable(_ user: UserID) -> String { printable(Data(user.rawValue.utf8)) }
}

extension String {
    fileprivate var leftPadded: String { count == 1 ? "0" + self : self }
}
