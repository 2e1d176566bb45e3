import Foundation
import HTTPServer
import JSON
import PurchaseDomain

/// The stand-in's transaction endpoints, as Apple documents them, over what tests recorded with `recordTransaction` and
/// `recordSubscriptionStatus` (the stand-in signs nothing: it answers the JWS it was given). A customer stands for one
/// Apple Account's purchases in this app; any transaction id of theirs names them. The `environment` answered is
/// `Sandbox`, where Apple leaves `appAppleId` out.
/// - `GET /inApps/v1/transactions/{transactionId}` (*Get Transaction Info*) → `{"signedTransactionInfo"}`.
/// - `GET /inApps/v2/history/{transactionId}[?sort=ASCENDING|DESCENDING][&revision=…]` (*Get Transaction History*) → every
///   transaction of the customer, oldest first (recorded order; `DESCENDING` newest first), `transactionPageSize` a page
///   (Apple: 20): `{"revision", "hasMore", "bundleId", "environment", "signedTransactions"}`; 400 `InvalidSortError`
///   (4000021) for another sort.
/// - `GET /inApps/v2/refund/lookup/{transactionId}[?revision=…]` (*Get Refund History*) → the customer's refunded
///   transactions in the order they were refunded, paged the same way: `{"signedTransactions", "revision", "hasMore"}`.
/// - `GET /inApps/v1/lookup/{orderId}` (*Look Up Order ID*) → `orderRoutes`.
/// - `GET /inApps/v1/subscriptions/{transactionId}` (*Get All Subscription Statuses*) → the customer's subscriptions
///   grouped by subscription group (groups and their subscriptions in recorded order):
///   `{"environment", "bundleId", "data": [{"subscriptionGroupIdentifier", "lastTransactions": [{"originalTransactionId",
///   "status", "signedTransactionInfo", "signedRenewalInfo"}]}]}`.
/// Each page's `revision` names where the next one starts, in that list of that customer; every page has one, the last
/// one's asking later for what was added since. All four answer 400 `InvalidTransactionIdError` (4000006) for an id that
/// is not digits, 404 `TransactionIdNotFoundError` (4040010) for an id never recorded, and the paged ones 400
/// `InvalidRequestRevisionError` (4000005) for a revision the stand-in never gave for that list and customer.
extension AppStoreServerAPIStandIn {
    /// The App Store's own record of the app's transactions and subscriptions.
    struct TransactionRecords {
        struct Transaction {
            var signed: String
            var id: TransactionID
            var originalId: TransactionID
            var customer: String
            /// Its place among refunds (nil: not refunded).
            var refundOrder: Int?
        }

        struct Subscription {
            var group: String
            var originalId: TransactionID
            var status: Int
            var signedTransaction: String
            var signedRenewalInfo: String
            var customer: String
        }

        /// Which paged list a revision continues.
        enum List: Equatable {
            case history(descending: Bool)
            case refunds
        }

        /// Transactions in the order recorded (a replaced one keeps its place).
        var transactions: [Transaction] = []
        var refunds = 0
        var subscriptions: [Subscription] = []
        var pageSize = 20
        /// Revisions given, with the list and customer each continues and where its page starts.
        var revisions: [String: (list: List, customer: String, offset: Int)] = [:]
        /// The transactions of each order id, by id (recorded transactions).
        var orders: [String: [TransactionID]] = [:]

        func customer(of id: TransactionID) -> String? {
            transactions.first { $0.id == id }?.customer ?? subscriptions.first { $0.originalId == id }?.customer
        }
    }

    /// Records a transaction as the App Store signed it, of `customer`; again for the same `transactionId`, it replaces
    /// the record where it stands (e.g. with the refunded version of the transaction).
    public func recordTransaction(_ signedTransaction: String, transactionId: TransactionID, originalTransactionId: TransactionID,
                                  customer: String, refunded: Bool = false) {
        recorder.update { state in
            var record = TransactionRecords.Transaction(signed: signedTransaction, id: transactionId, originalId: originalTransactionId,
                                                        customer: customer, refundOrder: nil)
            let index = state.transactionRecords.transactions.firstIndex { $0.id == transactionId }
            if refunded {
                if let earlier = index.flatMap({ state.transactionRecords.transactions[$0].refundOrder }) {
                    record.refundOrder = earlier
                } else {
                    state.transactionRecords.refunds += 1
                    record.refundOrder = state.transactionRecords.refunds
                }
            }
            if let index { state.transactionRecords.transactions[index] = record } else { state.transactionRecords.transactions.append(record) }
        }
    }

    /// Records the status of `customer`'s subscription `originalTransactionId` in `groupIdentifier` (replacing the one
    /// recorded before for it): `status` as Apple numbers it (1 active, 2 expired, 3 billing retry, 4 grace period,
    /// 5 revoked), with its latest transaction and renewal information as the App Store signed them.
    public func recordSubscriptionStatus(groupIdentifier: String, originalTransactionId: TransactionID, status: Int, signedTransaction: String,
                                         signedRenewalInfo: String, customer: String) {
        let record = TransactionRecords.Subscription(group: groupIdentifier, originalId: originalTransactionId, status: status,
                                                     signedTransaction: signedTransaction, signedRenewalInfo: signedRenewalInfo, customer: customer)
        recorder.update { state in
            if let index = state.transactionRecords.subscriptions.firstIndex(where: { $0.originalId == originalTransactionId }) {
                state.transactionRecords.subscriptions[index] = record
            } else {
                state.transactionRecords.subscriptions.append(record)
            }
        }
    }

    /// Records an order the customer's receipt names: *Look Up Order ID* answers `orderId` with these recorded
    /// transactions (`recordTransaction`), as they are signed when asked.
    public func recordOrder(_ orderId: String, transactionIds: [TransactionID]) {
        recorder.update { $0.transactionRecords.orders[orderId] = transactionIds }
    }

    /// `GET /inApps/v1/lookup/{orderId}` (*Look Up Order ID*): `{"status": 0, "signedTransactions": […]}` for a recorded
    /// order, `{"status": 1}` for any other id (200 both: an unknown order is an answer, not an error).
    static func orderRoutes(_ request: HTTPRequest, _ path: [String], _ recorder: Recorder) -> HTTPResponse? {
        guard request.method == "GET", path.count == 4, path[0] == "inApps", path[1] == "v1", path[2] == "lookup" else { return nil }
        return recorder.read { state in
            guard let ids = state.transactionRecords.orders[path[3]] else { return json(["status": .integer(1)]) }
            let signed = ids.compactMap { id in state.transactionRecords.transactions.first { $0.id == id }?.signed }
            return json(["status": .integer(0), "signedTransactions": .array(signed.map(JSONValue.string))])
        }
    }

    /// How many transactions a page of transaction or refund history holds (Apple: 20).
    public func setTransactionPageSize(_ size: Int) { recorder.update { $0.transactionRecords.pageSize = max(1, size) } }

    /// The answer to a transaction endpoint, or nil for another path.
    static func transactionRoutes(_ request: HTTPRequest, _ path: [String], _ recorder: Recorder, bundleId: String) -> HTTPResponse? {
        guard request.method == "GET", path.count >= 4, path[0] == "inApps" else { return nil }
        let endpoint: TransactionEndpoint
        switch (path[1], path[2], path.count) {
        case ("v1", "transactions", 4): endpoint = .info
        case ("v2", "history", 4): endpoint = .history
        case ("v2", "refund", 5) where path[3] == "lookup": endpoint = .refunds
        case ("v1", "subscriptions", 4): endpoint = .statuses
        default: return nil
        }
        let id = path[path.count - 1]
        guard id.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return error(400, 4000006, "Invalid transaction id.") }
        let parameters = request.queryParameters
        return recorder.update { transactionAnswer(endpoint, TransactionID(id), parameters, bundleId: bundleId, &$0.transactionRecords) }
    }

    enum TransactionEndpoint { case info, history, refunds, statuses }

    /// What `endpoint` answers for the transaction `id` (a well-formed one).
    private static func transactionAnswer(_ endpoint: TransactionEndpoint, _ id: TransactionID, _ parameters: [String: String], bundleId: String,
                               _ records: inout TransactionRecords) -> HTTPResponse {
        guard let customer = records.customer(of: id) else { return error(404, 4040010, "Transaction id not found.") }
        let revision = parameters["revision"]
        switch endpoint {
        case .info:
            guard let transaction = records.transactions.first(where: { $0.id == id }) else {
                return error(404, 4040010, "Transaction id not found.") // a subscription's id, never recorded as a transaction
            }
            return json(["signedTransactionInfo": .string(transaction.signed)])
        case .history:
            let descending: Bool
            switch parameters["sort"] ?? "ASCENDING" {
            case "ASCENDING": descending = false
            case "DESCENDING": descending = true
            default: return error(400, 4000021, "Invalid request. The sort parameter is invalid.")
            }
            let owned = records.transactions.filter { $0.customer == customer }.map(\.signed)
            return page(of: descending ? Array(owned.reversed()) : owned, list: .history(descending: descending), customer: customer,
                        revision: revision, &records, also: ["bundleId": .string(bundleId), "environment": .string("Sandbox")])
        case .refunds:
            let refunded = records.transactions.filter { $0.customer == customer }
                .compactMap { transaction in transaction.refundOrder.map { (order: $0, signed: transaction.signed) } }
                .sorted { $0.order < $1.order }.map(\.signed)
            return page(of: refunded, list: .refunds, customer: customer, revision: revision, &records, also: [:])
        case .statuses:
            var groups: [(identifier: String, items: [JSONValue])] = []
            for subscription in records.subscriptions where subscription.customer == customer {
                let item = JSONValue.object([
                    "originalTransactionId": .string(subscription.originalId.rawValue), "status": .integer(Int64(subscription.status)),
                    "signedTransactionInfo": .string(subscription.signedTransaction), "signedRenewalInfo": .string(subscription.signedRenewalInfo),
                ])
                if let index = groups.firstIndex(where: { $0.identifier == subscription.group }) {
                    groups[index].items.append(item)
                } else {
                    groups.append((subscription.group, [item]))
                }
            }
            let data = groups.map { JSONValue.object(["subscriptionGroupIdentifier": .string($0.identifier), "lastTransactions": .array($0.items)]) }
            return json(["environment": .string("Sandbox"), "bundleId": .string(bundleId), "data": .array(data)])
        }
    }

    /// The page of `items` that `revision` (nil: the first) names, with `hasMore`, the revision of the next and the fields
    /// `also`; 400 `InvalidRequestRevisionError` for a revision not given for this list and customer.
    private static func page(of items: [String], list: TransactionRecords.List, customer: String, revision: String?,
                             _ records: inout TransactionRecords, also: [String: JSONValue]) -> HTTPResponse {
        var offset = 0
        if let revision {
            guard let given = records.revisions[revision], given.list == list, given.customer == customer else {
                return error(400, 4000005, "Invalid request revision.")
            }
            offset = min(given.offset, items.count)
        }
        let page = items[offset...].prefix(records.pageSize)
        let next = offset + page.count
        let token = Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString() // with '+', '/' and '=' to escape
        records.revisions[token] = (list, customer, next)
        let fields: [String: JSONValue] = ["signedTransactions": .array(page.map(JSONValue.string)), "revision": .string(token), "hasMore": .bool(next < items.count)]
        return json(fields.merging(also) { mine, _ in mine })
    }

    private static func json(_ object: [String: JSONValue]) -> HTTPResponse {
        HTTPResponse(status: 200, contentType: "application/json", body: String(decoding: JSONValue.object(object).serialized, as: UTF8.self))
    }
}
