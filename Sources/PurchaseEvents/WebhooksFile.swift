import Foundation
import JSON
import JSONSchema
import PurchaseDomain

/// The webhooks file an operator writes (`schemas/webhooks.v1.schema.json`): the HTTPS endpoints `iap-webhooks`
/// forwards the pipeline's events to, each with its secret and the event types it takes. Paths are relative to the file.
public struct WebhooksFile: Sendable {
    public static let schemaID = "urn:iap-pipeline:schema:webhooks:v1"
    /// What an endpoint that names no events gets: what changes a user's holdings or a purchase's fate.
    public static let defaultEvents: [EventType] = [.itemGranted, .purchaseRevoked, .refundDue, .subscriptionStatus, .userAdjusted]
    /// How long a request may take when the endpoint does not say.
    public static let defaultTimeoutSeconds = 10
    /// How many requests go to an endpoint at once when it does not say.
    public static let defaultConnections = 16

    /// One endpoint as written, checked.
    public struct Endpoint: Sendable {
        public var name: String
        /// `http` or `https`, without a user or password, nor '.' or '..' in its path.
        public var url: URL
        public var secretFile: URL
        /// In the file's order, each once.
        public var events: [EventType]
        /// `allowPlainHTTP`: an http `url` may name another host than this one (the worker refuses it otherwise).
        public var allowsPlainHTTP: Bool
        /// The apps whose events it takes; nil: every app's.
        public var apps: [AppID]?
        public var timeoutSeconds: Int
        /// Requests at once, per replica.
        public var connections: Int
    }

    public let endpoints: [Endpoint]

    public init(contentsOf url: URL, schemas: JSONSchemaRegistry) throws {
        guard let data = FileManager.default.contents(atPath: url.path) else { throw WebhooksFileError("cannot read \(url.path)") }
        try self.init(json: data, relativeTo: url.deletingLastPathComponent(), schemas: schemas)
    }

    /// - Throws: `WebhooksFileError` naming the field (`/endpoints/1/url: …`) or the endpoint (`endpoints[1] ('name'): …`).
    public init(json data: Data, relativeTo directory: URL, schemas: JSONSchemaRegistry) throws {
        guard let document = JSONValue.parse(Array(data)) else { throw WebhooksFileError("not valid JSON") }
        let violations = schemas.validate(document, against: Self.schemaID)
        guard violations.isEmpty else { throw WebhooksFileError(violations.map(\.description).joined(separator: "; ")) }
        var endpoints: [Endpoint] = []
        var names: Set<[UInt8]> = []
        for (index, entry) in (document.objectValue?["endpoints"]?.arrayValue ?? []).enumerated() {
            let fields = entry.objectValue ?? [:]
            let name = fields["name"]?.stringValue ?? ""
            func refuse(_ problem: String) -> WebhooksFileError { WebhooksFileError("endpoints[\(index)] ('\(name)'): \(problem)") }
            guard names.insert(Array(name.utf8)).inserted else { throw refuse("another endpoint has this name") }
            let text = fields["url"]?.stringValue ?? ""
            guard let components = URLComponents(string: text), components.scheme != nil, components.host?.isEmpty == false, let url = components.url else { throw refuse("url is not an absolute URL: \(text)") }
            // Logged and shown in dead letters: credentials belong in the secret, not the address.
            guard components.user == nil, components.password == nil else { throw refuse("url must not carry a user or password") }
            // libcurl removes dot segments from the path it sends, and the signature covers the path as written: they must agree.
            let segments = components.percentEncodedPath.split(separator: "/", omittingEmptySubsequences: false)
            guard !segments.contains(where: { $0 == "." || $0 == ".." }) else { throw refuse("url's path has '.' or '..' segments: write the path they lead to") }
            let file = fields["secretFile"]?.stringValue ?? ""
            var events: [EventType] = []
            for type in fields["events"]?.arrayValue?.compactMap({ $0.stringValue.flatMap(EventType.init(rawValue:)) }) ?? Self.defaultEvents
            where !events.contains(type) {
                events.append(type)
            }
            endpoints.append(Endpoint(name: name, url: url, secretFile: file.hasPrefix("/") ? URL(fileURLWithPath: file) : directory.appendingPathComponent(file),
                                      events: events, allowsPlainHTTP: fields["allowPlainHTTP"]?.boolValue == true,
                                      apps: fields["apps"]?.arrayValue.map { $0.compactMap(\.stringValue).map { AppID($0) } },
                                      timeoutSeconds: fields["timeoutSeconds"]?.int64Value.map { Int($0) } ?? Self.defaultTimeoutSeconds,
                                      connections: fields["connections"]?.int64Value.map { Int($0) } ?? Self.defaultConnections))
        }
        self.endpoints = endpoints
    }
}

/// Why a webhooks file was refused.
public struct WebhooksFileError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
