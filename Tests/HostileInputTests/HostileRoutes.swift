import Foundation
import HTTPClient
import HTTPServer
import Ingest
import JSON
import Kafka
import Metrics
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import StageTestSupport
import StoreFixtures
import TestData
import WorkerRuntime

/// The ingest's HTTP routes as `iap-ingest` serves them (the submission and both notification routes publishing to
/// librdkafka's mock cluster, the read side on a SQL store, the body limits), over real HTTP, sent hostile requests:
/// bodies of events with values beyond their bounds, broken JSON, bodies past the limits, user ids in every spelling,
/// wrong methods. Every answer is a 2xx, or a 4xx or 503 whose body names the error; `/healthz` answers throughout.
struct HostileRoutes {
    let seed: UInt64
    let engine: HostileEngine
    let requests: Int

    func run() async throws -> HostileReport {
        let (_, sql) = try await engine.fresh()
        guard let store = sql else { return HostileReport() }
        let cluster = try KafkaMockCluster(brokers: 1)
        let codec = StageFixtures.codec
        for topic in [EventType.purchaseSubmitted, .storeNotification] { try cluster.createTopic(codec.topic(topic), partitions: 1) }
        let publisher = try EventPublisher(codec: codec, kafka: KafkaConfiguration(["bootstrap.servers": cluster.bootstrapServers, "message.timeout.ms": "5000"]))
        let logger = Logger(stage: "ingest", minimum: .error, sink: { _ in })
        // Google Play's pushes, authenticated as Pub/Sub does (an OIDC token of the subscription's service account).
        let certificates = FileManager.default.temporaryDirectory.appendingPathComponent("hostile-google-certs-\(UUID().uuidString).json")
        try GooglePlayPushSigner.certificatesJSON([Self.pushSigner]).write(to: certificates, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: certificates) }
        let push = PubSubPushAuthenticator(configuration: .init(audience: Self.pushAudience, serviceAccountEmail: Self.pushAccount),
                                           keys: GoogleSigningKeys(source: .file(certificates.path)))
        let api = IngestAPI(configuration: .init(googlePlayPush: push), publisher: publisher, logger: logger, metrics: MetricsRegistry())
        let holdings = UserHoldingsAPI(store: store, secret: nil, logger: logger, metrics: MetricsRegistry())
        let server = try OperationsServer(configuration: HTTPServer.Configuration(maxBodyBytes: 1 << 20, bodyLimit: { _, path in api.bodyLimit(path: path) }),
                                          metrics: MetricsRegistry(), readiness: { .ready }, routes: { request in
                                              if let answer = await api.route(request) { return answer }
                                              return await holdings.route(request)
                                          }, publicFacing: true)
        defer { server.triggerGracefulShutdown() }
        let base = "http://127.0.0.1:\(server.port)"
        let client = HTTPClient(timeout: .seconds(30), maxBodyBytes: 1 << 20, proxy: .init())
        var events = HostileEvents(seed: seed, pki: HostileRun.pki)
        var report = HostileReport()
        func violation(_ text: String) { report.violations.append("seed \(seed) on \(engine): \(text)") }

        for index in 0..<requests {
            let (route, request) = try hostileRequest(&events, base: base, codec: codec)
            report.tried[route, default: 0] += 1
            switch await client.send(request) {
            case .failure(let failure):
                violation("\(route): no answer (\(failure)) to \(HostileReport.printable(request.body.map { Data($0) }))")
            case .success(let response):
                report.outcomes["\(route): \(response.status)", default: 0] += 1
                let error = JSONValue.parse(response.body)?.objectValue?["error"]?.stringValue ?? ""
                switch response.status {
                case 200..<300: break
                case 400..<500, 503:
                    // The server refuses a request it cannot read (a head or body too large) before any route, in plain text.
                    let plain = [400, 413, 431].contains(response.status) && !response.body.isEmpty
                    if error.isEmpty && !plain { violation("\(route): \(response.status) without an error body: \(HostileReport.printable(Data(response.body)))") }
                default:
                    violation("\(route): answered \(response.status) \(HostileReport.printable(Data(response.body))) to \(HostileReport.printable(request.body.map { Data($0) }))")
                }
            }
            if index % 20 == 19 || index == requests - 1 {
                guard case .success(let health) = await client.send(.init(method: "GET", url: base + "/healthz")), health.status == 200 else {
                    violation("/healthz did not answer after \(index + 1) hostile requests")
                    break
                }
            }
        }
        await publisher.shutdown()
        return report
    }

    static let pushSigner: GooglePlayPushSigner = {
        do { return try GooglePlayPushSigner() } catch { fatalError("an RSA key for the stand-in OIDC signer: \(error)") }
    }()
    static let pushAudience = "https://ingest.example/v1/googleplay/notifications"
    static let pushAccount = "play-rtdn@example.iam.gserviceaccount.com"

    /// A push of a hostile real-time developer notification: values beyond their bounds in every kind Google sends, and
    /// sometimes a token that is not Google's (or none).
    func hostilePush(_ events: inout HostileEvents) throws -> (headers: [(String, String)], body: [UInt8]) {
        let package = events.pick(["com.example.coins", "com.example.coins\u{200B}", "com.ex\u{430}mple.coins"])
        let token = events.pick(["token-1", "token-2", "token-1\u{200D}", String(repeating: "t", count: 4096)], limit: 8192)
        let kind = ["oneTimeProductNotification", "subscriptionNotification", "voidedPurchaseNotification", "testNotification", "unknownNotification"]
            .randomElement(using: &events.rng) ?? "testNotification"
        let fields: [String: JSONValue] = [
            "version": .string("1.0"), "notificationType": .integer(events.integer(.min ... .max, usualIn: 1...20)),
            "purchaseToken": .string(token), "sku": .string(events.pick(HostileEvents.products)), "subscriptionId": .string(events.pick(HostileEvents.products)),
            "orderId": .string(events.pick(HostileEvents.transactions)), "productType": .integer(events.integer(.min ... .max, usualIn: 1...2)),
            "refundType": .integer(events.integer(.min ... .max, usualIn: 1...2)),
        ]
        let notification = GooglePlayPushSigner.notification(package: package, kind, fields, at: events.date(around: HostileEvents.t0))
        var headers = [("Content-Type", "application/json")]
        if !events.chance(10) {
            let signer = events.chance(10) ? try GooglePlayPushSigner() : Self.pushSigner
            headers.append(("Authorization", try signer.authorization(audience: events.chance(10) ? "elsewhere" : Self.pushAudience, email: Self.pushAccount)))
        }
        return (headers, Array(GooglePlayPushSigner.pushBody(notification)))
    }

    /// A route's name and a hostile request to it.
    func hostileRequest(_ events: inout HostileEvents, base: String, codec: EventCodec) throws -> (String, HTTPClient.Request) {
        let now = HostileEvents.t0
        func broken(_ body: [UInt8]) -> [UInt8] {
            events.chance(3) ? HostileValues.brokenJSON(body, using: &events.rng) : body
        }
        func userPath() -> String {
            let user = events.pick(HostileEvents.users, hostileOneIn: 3)
            if events.chance(6) { return ["%ZZ", "%C3", "%00", "%2F", "a%2Fb", "", "%", "%E2%80%8B", String(repeating: "%C3%A9", count: 129)].randomElement(using: &events.rng) ?? "" }
            return user.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        }
        let method = events.chance(12) ? ["PUT", "DELETE", "PATCH", "OPTIONS"].randomElement(using: &events.rng) ?? "PUT" : nil
        switch Int.random(in: 0..<6, using: &events.rng) {
        case 5:
            let push = try hostilePush(&events)
            return ("POST /v1/googleplay/notifications", .init(method: method ?? "POST", url: base + "/v1/googleplay/notifications", headers: push.headers,
                                                               body: broken(push.body)))
        case 0:
            let body = try codec.message(try events.submission(at: now), time: now).value.map(Array.init) ?? []
            return ("POST /v1/purchases", .init(method: method ?? "POST", url: base + "/v1/purchases", headers: [("Content-Type", "application/json")], body: broken(body)))
        case 1:
            let payload = try codec.message(try events.notification(at: now), time: now).value.flatMap { JSONValue.parse(Array($0))?.objectValue?["signedPayload"] } ?? .null
            let body = JSONValue.object(["signedPayload": events.chance(8) ? .integer(events.integer(.min ... .max, usualIn: 0...1)) : payload]).serialized
            return ("POST /v1/appstore/notifications", .init(method: method ?? "POST", url: base + "/v1/appstore/notifications", headers: [("Content-Type", "application/json")],
                                                            body: broken(body)))
        case 2: return ("GET /v1/users/{id}", .init(method: method ?? "GET", url: base + UserHoldingsAPI.pathPrefix + userPath()))
        case 3: return ("GET /v1/users/{id}/history", .init(method: method ?? "GET", url: base + UserHoldingsAPI.pathPrefix + userPath() + "/history"))
        default: return ("POST /v1/users/{id}/sync", .init(method: method ?? "POST", url: base + UserHoldingsAPI.pathPrefix + userPath() + "/sync", body: []))
        }
    }
}
