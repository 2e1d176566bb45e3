import Crypto
import Foundation
import HTTPServer
import JSON
import Synchronization

/// The App Store Server API as tests and the operator's harness play it, over real HTTP: every request must
/// carry a bearer token that the developer key signed (ES256) with the claims Apple documents (`kid`,
/// `aud: appstoreconnect-v1`, `bid`, `iss`, at most an hour between `iat` and `exp`), else 401.
/// - `POST /inApps/v1/transactions/{transactionId}/finish` → 200, recorded.
/// - `PUT /inApps/v2/transactions/consumption/{transactionId}` with a `ConsumptionRequest` checked as Apple
///   documents it → 202, recorded; else 400 with Apple's `errorCode` (none when malformed).
/// `failWith` answers every authenticated request with that status instead (404: `TransactionIdNotFoundError`).
public final class AppStoreServerAPIStandIn: Sendable {
    public let server: HTTPServer
    private let recorder = Recorder()

    struct State {
        var finished: [String] = []
        var consumptions: [(transactionId: String, body: [String: JSONValue])] = []
        var lastClaims: [String: JSONValue] = [:]
        var requests: [String] = []
    }

    /// What the server saw; the handler records into it before `self` exists.
    final class Recorder: Sendable {
        private let state = Mutex(State())
        func update(_ body: (inout State) -> Void) { state.withLock { body(&$0) } }
        func read<T>(_ body: (State) -> T) -> T { state.withLock { body($0) } }
    }

    public var baseURL: URL { URL(string: "http://127.0.0.1:\(server.port)")! }
    /// Transaction ids finished, in order.
    public var finished: [String] { recorder.read(\.finished) }
    /// Consumption information accepted, in order.
    public var consumptions: [(transactionId: String, body: [String: JSONValue])] { recorder.read(\.consumptions) }
    /// Every authenticated request, as `METHOD path`, whatever its answer.
    public var requests: [String] { recorder.read(\.requests) }
    /// The claims of the last token accepted.
    public var lastClaims: [String: JSONValue] { recorder.read(\.lastClaims) }

    public init(publicKey: PublicKey, keyId: String, issuerId: String, bundleId: String, failWith: Int? = nil,
                configuration: HTTPServer.Configuration = .init()) throws {
        let recorder = self.recorder
        server = try HTTPServer(configuration: configuration, synchronousHandler: { request in
            guard let claims = Self.claims(request, publicKey: publicKey, keyId: keyId, issuerId: issuerId, bundleId: bundleId) else {
                return HTTPResponse(status: 401, contentType: "application/json", body: #"{"errorCode":4010000,"errorMessage":"Unauthenticated"}"#)
            }
            recorder.update {
                $0.lastClaims = claims
                $0.requests.append("\(request.method) \(request.path)")
            }
            if let status = failWith {
                return HTTPResponse(status: status, contentType: "application/json", body: #"{"errorCode":4040010,"errorMessage":"Transaction id not found."}"#)
            }
            let path = request.path.split(separator: "/").map(String.init)
            if request.method == "PUT", path.count == 5, path[0] == "inApps", path[1] == "v2", path[2] == "transactions", path[3] == "consumption" {
                let (status, errorCode) = Self.checkConsumption(request)
                guard status == 202 else {
                    return HTTPResponse(status: status, contentType: "application/json",
                                        body: errorCode.map { #"{"errorCode":\#($0),"errorMessage":"Invalid request."}"# } ?? "")
                }
                recorder.update { $0.consumptions.append((path[4], JSONValue.parse(Array(request.body))?.objectValue ?? [:])) }
                return HTTPResponse(status: 202)
            }
            guard request.method == "POST", path.count == 5, path[0] == "inApps", path[1] == "v1", path[2] == "transactions", path[4] == "finish" else {
                return HTTPResponse(status: 404)
            }
            recorder.update { $0.finished.append(path[3]) }
            return HTTPResponse(status: 200)
        })
    }

    /// The token's claims when the developer key signed it and they are what Apple requires; else nil.
    static func claims(_ request: HTTPRequest, publicKey: PublicKey, keyId: String, issuerId: String, bundleId: String) -> [String: JSONValue]? {
        guard let auth = request.header("authorization"), auth.hasPrefix("Bearer ") else { return nil }
        let parts = auth.dropFirst(7).split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, let signature = Base64URL.decode(parts[2]),
              publicKey.verifyES256(message: Data("\(parts[0]).\(parts[1])".utf8), rawSignature: signature),
              let header = Base64URL.decode(parts[0]).flatMap({ JSONValue.parse(Array($0))?.objectValue }),
              let claims = Base64URL.decode(parts[1]).flatMap({ JSONValue.parse(Array($0))?.objectValue }),
              header["alg"] == .string("ES256"), header["kid"] == .string(keyId), claims["aud"] == .string("appstoreconnect-v1"),
              claims["bid"] == .string(bundleId), claims["iss"] == .string(issuerId),
              let iat = claims["iat"]?.int64Value, let exp = claims["exp"]?.int64Value, exp > iat, exp - iat <= 3600 else { return nil }
        return claims
    }

    /// `ConsumptionRequest` as Apple documents it: 202, or 400 with the error code (none when malformed).
    static func checkConsumption(_ request: HTTPRequest) -> (status: Int, errorCode: Int?) {
        guard request.header("content-type") == "application/json", let body = JSONValue.parse(Array(request.body))?.objectValue else { return (400, nil) }
        let known: Set = ["customerConsented", "deliveryStatus", "sampleContentProvided", "consumptionPercentage", "refundPreference"]
        guard Set(body.keys).isSubset(of: known) else { return (400, nil) }
        guard body["customerConsented"] == .bool(true) else { return (400, 4000035) }
        let statuses = ["DELIVERED", "UNDELIVERED_QUALITY_ISSUE", "UNDELIVERED_WRONG_ITEM", "UNDELIVERED_SERVER_OUTAGE", "UNDELIVERED_OTHER"]
        guard let delivery = body["deliveryStatus"]?.stringValue, statuses.contains(delivery) else { return (400, 4000036) }
        guard case .bool = body["sampleContentProvided"] else { return (400, 4000041) }
        if let percentage = body["consumptionPercentage"] {
            guard let value = percentage.int64Value, (0...100_000).contains(value), delivery == "DELIVERED" || value == 0 else { return (400, nil) }
        }
        if let preference = body["refundPreference"] {
            guard let value = preference.stringValue, ["DECLINE", "GRANT_FULL", "GRANT_PRORATED"].contains(value) else { return (400, nil) }
        }
        return (202, nil)
    }
}
