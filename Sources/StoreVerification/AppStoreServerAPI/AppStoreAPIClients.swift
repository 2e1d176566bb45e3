import PurchaseDomain

/// The App Store Server API clients of one App Store app (the API's tokens name one bundle id): the deployment
/// environment's, and the sandbox's beside a production one (App Review's purchases, accepted with `--accept-sandbox`).
public struct AppStoreAPIClients: Sendable {
    public let api: AppStoreServerAPIClient
    public let sandbox: AppStoreServerAPIClient?
    /// The environment `api` serves.
    public let environment: AppStoreEnvironment

    public init(api: AppStoreServerAPIClient, sandbox: AppStoreServerAPIClient? = nil, environment: AppStoreEnvironment = .production) {
        self.api = api
        self.sandbox = sandbox
        self.environment = environment
    }

    /// The client for a purchase verified in `environment`: the sandbox's for Sandbox when there is one, else `api`.
    public func client(forRecorded environment: String?) -> AppStoreServerAPIClient {
        environment == AppStoreEnvironment.sandbox.rawValue ? sandbox ?? api : api
    }

    /// The clients by the environment each serves (the sandbox's only beside production's).
    public var byEnvironment: [AppStoreEnvironment: AppStoreServerAPIClient] {
        var clients = [environment: api]
        if let sandbox, environment == .production { clients[.sandbox] = sandbox }
        return clients
    }
}
