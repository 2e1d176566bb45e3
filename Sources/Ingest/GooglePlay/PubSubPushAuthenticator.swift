import Crypto
import Foundation
import HTTPClient
import JSON
import StoreVerification
import Synchronization

/// Google's keys that sign the OIDC tokens of Pub/Sub pushes, in the form Google publishes them
/// (`https://www.googleapis.com/oauth2/v1/certs`: a JSON object of key id → PEM certificate), read from a file or that
/// URL. Read at first use, again after an hour, and again when a token names a key not held (at most once a minute:
/// Google rotates its keys, and a token naming an unknown one must not make every push a fetch).
public final class GoogleSigningKeys: Sendable {
    public enum Source: Sendable {
        case file(String)
        case url(String)
    }

    public static let googleCertificatesURL = "https://www.googleapis.com/oauth2/v1/certs"

    private let source: Source
    private let http: StoreAPISession
    private let now: @Sendable () -> Date
    /// The keys, when they were read and last tried, and the read under way, which every request needing it waits for.
    private struct Held {
        var keys: [String: PublicKey] = [:]
        var readAt: Date?
        var triedAt: Date?
        var reading: Task<Void, Never>?
    }

    private let held = Mutex(Held())

    /// - Parameter observer: told the outcome of every read of the keys from their URL; nil: nobody is.
    public init(source: Source, now: @escaping @Sendable () -> Date = Date.init, observer: StoreAPIObserver? = nil) {
        self.source = source
        self.now = now
        http = StoreAPISession(timeout: .seconds(10), maxConnections: 2, observer: observer)
    }

    /// The key `id` names, read again when it is not held or what is held is old (at most once a minute). Requests that
    /// need a read while one is under way wait for it: the pushes that arrive together at start, or just after Google
    /// rotated its keys, are not refused for want of keys being read.
    func key(_ id: String) async -> PublicKey? {
        let time = now()
        let reading: Task<Void, Never>? = held.withLock { held in
            let stale = held.readAt.map { time.timeIntervalSince($0) > 3600 } ?? true
            if held.keys[id] != nil && !stale { return nil }
            if let reading = held.reading { return reading }
            guard held.triedAt.map({ time.timeIntervalSince($0) >= 60 }) ?? true else { return nil }
            held.triedAt = time
            let task = Task { [self] in
                let keys = await read()
                self.held.withLock { held in
                    if let keys { (held.keys, held.readAt) = (keys, time) }
                    held.reading = nil
                }
            }
            held.reading = task
            return task
        }
        await reading?.value
        return held.withLock { $0.keys[id] }
    }

    private func read() async -> [String: PublicKey]? {
        switch source {
        case .file(let path): return FileManager.default.contents(atPath: path).flatMap { Self.keys(Array($0)) }
        case .url(let url):
            guard case .success(let response) = await http.send(.init(method: "GET", url: url)), response.status == 200 else { return nil }
            return Self.keys(response.body)
        }
    }

    /// The keys of a `{"kid": "-----BEGIN CERTIFICATE-----…"}` document; nil when it holds none.
    static func keys(_ document: [UInt8]) -> [String: PublicKey]? {
        guard let object = JSONValue.parse(document)?.objectValue else { return nil }
        var keys: [String: PublicKey] = [:]
        for (id, value) in object {
            guard let pem = value.stringValue, let certificate = try? Certificate.load(pemOrDER: Data(pem.utf8)).first,
                  let key = try? certificate.publicKey() else { continue } // one unreadable entry does not hide the others
            keys[id] = key
        }
        return keys.isEmpty ? nil : keys
    }
}

/// Authenticates a Google Cloud Pub/Sub push request by its OIDC token (`Authorization: Bearer <JWT>`): RS256 by one
/// of Google's keys, issued by `accounts.google.com`, for the audience the push subscription names, to the service
/// account it pushes as (`email`, verified), and current (within `clockSkew`).
public struct PubSubPushAuthenticator: Sendable {
    public struct Configuration: Sendable {
        /// The push subscription's audience (its endpoint URL unless the subscription sets another).
        public var audience: String
        /// The service account the push subscription authenticates as.
        public var serviceAccountEmail: String
        public var clockSkew: TimeInterval

        public init(audience: String, serviceAccountEmail: String, clockSkew: TimeInterval = 300) {
            self.audience = audience
            self.serviceAccountEmail = serviceAccountEmail
            self.clockSkew = clockSkew
        }
    }

    public let configuration: Configuration
    let keys: GoogleSigningKeys
    let now: @Sendable () -> Date

    public init(configuration: Configuration, keys: GoogleSigningKeys, now: @escaping @Sendable () -> Date = Date.init) {
        self.configuration = configuration
        self.keys = keys
        self.now = now
    }

    /// Nil when `authorization` carries a token this push may be taken on; else why not.
    public func refusal(_ authorization: String?) async -> String? {
        guard let authorization, authorization.hasPrefix("Bearer ") else { return "no bearer token" }
        let parts = authorization.dropFirst(7).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let header = Base64URL.decode(parts[0]).flatMap({ JSONValue.parse(Array($0))?.objectValue }),
              let claims = Base64URL.decode(parts[1]).flatMap({ JSONValue.parse(Array($0))?.objectValue }),
              let signature = Base64URL.decode(parts[2]) else { return "not a JWT" }
        guard header["alg"]?.stringValue == "RS256" else { return "algorithm other than RS256" }
        guard let keyID = header["kid"]?.stringValue, let key = await keys.key(keyID) else { return "signed by a key Google does not publish" }
        guard key.verifyRSA(message: Data((parts[0] + "." + parts[1]).utf8), signature: signature, digest: .sha256) else { return "bad signature" }
        guard let issuer = claims["iss"]?.stringValue, ["https://accounts.google.com", "accounts.google.com"].contains(issuer) else { return "issuer" }
        guard claims["aud"]?.stringValue == configuration.audience else { return "audience" }
        guard claims["email"]?.stringValue == configuration.serviceAccountEmail, claims["email_verified"]?.boolValue == true else { return "service account" }
        let time = now().timeIntervalSince1970
        guard let expires = claims["exp"]?.int64Value, time < Double(expires) + configuration.clockSkew,
              let issued = claims["iat"]?.int64Value, Double(issued) <= time + configuration.clockSkew else { return "expired or not yet valid" }
        return nil
    }
}
