/// What a deployment keeps for each of its apps where one value cannot serve them all (the App Store Server API's
/// clients: its tokens name one app), found by the app a purchase records.
public struct PerApp<Value: Sendable>: Sendable {
    /// The app of purchases that record none (`AppDirectory.primary`).
    public let primary: AppID
    public let byApp: [AppID: Value]

    public init(primary: AppID, byApp: [AppID: Value]) {
        self.primary = primary
        self.byApp = byApp
    }

    /// The value of a deployment that names no apps.
    public init(single value: Value) {
        self.init(primary: AppDirectory.unnamedAppID, byApp: [AppDirectory.unnamedAppID: value])
    }

    /// The value for a purchase recorded with `app` (nil: the primary app's); nil for an app that has none here.
    public func forRecorded(app: AppID?) -> Value? { byApp[app ?? primary] }

    /// The primary app's value first, then the others in byte order of their ids.
    public var ordered: [(app: AppID, value: Value)] {
        byApp.sorted { ($0.key == primary) != ($1.key == primary) ? $0.key == primary : $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    public func mapValues<Other: Sendable>(_ transform: (Value) throws -> Other) rethrows -> PerApp<Other> {
        PerApp<Other>(primary: primary, byApp: try byApp.mapValues(transform))
    }
}
