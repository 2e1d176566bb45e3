import Foundation
import JSON
import PurchaseDomain

/// The answer of *Look Up Order ID*: whether the order id is one of the app's, and its transactions as the App Store
/// signed them.
public struct OrderLookup: Sendable, Equatable {
    /// `OrderLookupStatus`: 0 valid, 1 invalid.
    public enum Status: Sendable, Equatable {
        case valid
        case invalid
        /// A value Apple may add later, kept as sent.
        case other(Int64)

        init(_ raw: Int64) { self = raw == 0 ? .valid : raw == 1 ? .invalid : .other(raw) }
    }

    public var status: Status
    /// The raw `status`, beside the typed one.
    public var rawStatus: Int64
    /// Each transaction's JWS (a `JWSTransaction`), not yet verified: verify each with `SignedDataVerifier.verifyTransaction`.
    /// Empty for an invalid order id.
    public var signedTransactions: [String]

    public init(rawStatus: Int64, signedTransactions: [String]) {
        self.status = Status(rawStatus)
        self.rawStatus = rawStatus
        self.signedTransactions = signedTransactions
    }
}

extension AppStoreServerAPIClient {
    /// `GET /inApps/v1/lookup/{orderId}` (*Look Up Order ID*): the transactions of the order a customer quotes from the
    /// App Store's e-mail receipt or purchase history. Production only (Apple does not serve it in the Sandbox). An order
    /// id is letters and digits (Apple's are ten, e.g. `MK5TTTVWJH`); anything else is refused without a request.
    public func lookUpOrder(_ orderId: String) async -> Result<OrderLookup, Failure> {
        let alphanumeric: (UInt8) -> Bool = { (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) }
        guard (1...64).contains(orderId.utf8.count), orderId.utf8.allSatisfy(alphanumeric) else {
            return .failure(.refused(status: 0, detail: "an order id is 1 to 64 ASCII letters and digits"))
        }
        return await call("GET", "inApps/v1/lookup/\(orderId)", body: nil).flatMap { answer in
            guard let fields = JSONValue.parse(answer)?.objectValue, let status = fields["status"]?.int64Value else {
                return .failure(.unavailable("App Store Server API: an order lookup that is not an OrderLookupResponse"))
            }
            let signed = fields["signedTransactions"]?.arrayValue ?? []
            let transactions = signed.compactMap(\.stringValue)
            guard transactions.count == signed.count else {
                return .failure(.unavailable("App Store Server API: an order lookup whose signedTransactions are not all strings"))
            }
            return .success(OrderLookup(rawStatus: status, signedTransactions: transactions))
        }
    }
}
