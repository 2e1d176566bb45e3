import Foundation
import JSON
import PurchaseDomain

/// One page of *Get Transaction History* or *Get Refund History*: transactions as the App Store signed them.
public struct SignedTransactionsPage: Sendable, Equatable {
    /// Each transaction's JWS (a `JWSTransaction`), not yet verified: verify each with `SignedDataVerifier.verifyTransaction`.
    public var signedTransactions: [String]
    /// The revision that asks for the next page; nil on the last.
    public var revision: String?

    public init(signedTransactions: [String], revision: String?) {
        self.signedTransactions = signedTransactions
        self.revision = revision
    }
}

/// The order of *Get Transaction History*'s transactions (its `sort` query parameter).
public enum TransactionHistoryOrder: String, Sendable {
    /// Oldest first (Apple's default).
    case ascending = "ASCENDING"
    /// Newest first.
    case descending = "DESCENDING"
}

extension AppStoreServerAPIClient {
    /// `GET /inApps/v1/transactions/{transactionId}` (*Get Transaction Info*): the transaction as the App Store signed it
    /// (a `JWSTransaction`), not yet verified: verify it with `SignedDataVerifier.verifyTransaction`. An unknown
    /// transaction id is refused with 404 (`TransactionIdNotFoundError`, 4040010).
    public func transactionInfo(_ id: TransactionID) async -> Result<String, Failure> {
        await get(for: id) { "inApps/v1/transactions/\($0)" }.flatMap { answer in
            guard let signed = JSONValue.parse(answer)?.objectValue?["signedTransactionInfo"]?.stringValue, !signed.isEmpty else {
                return .failure(.unavailable("App Store Server API: a transaction info that is not a TransactionInfoResponse"))
            }
            return .success(signed)
        }
    }

    /// `GET /inApps/v2/history/{transactionId}` (*Get Transaction History*): every transaction of the customer who made
    /// `id` in this app, of every product type and state (refunded, revoked, finished or not), at most 20 a page; the
    /// next page is asked for with the `revision` of the page before.
    public func transactionHistory(of id: TransactionID, revision: String? = nil,
                                   order: TransactionHistoryOrder = .ascending) async -> Result<SignedTransactionsPage, Failure> {
        await signedTransactions(of: id, revision: revision, response: "HistoryResponse", query: "sort=\(order.rawValue)") {
            "inApps/v2/history/\($0)"
        }
    }

    /// `GET /inApps/v2/refund/lookup/{transactionId}` (*Get Refund History*): the transactions the App Store refunded to
    /// the customer who made `id` in this app, in the order they were refunded, at most 20 a page; the next page is asked
    /// for with the `revision` of the page before.
    public func refundHistory(of id: TransactionID, revision: String? = nil) async -> Result<SignedTransactionsPage, Failure> {
        await signedTransactions(of: id, revision: revision, response: "RefundHistoryResponse", query: nil) { "inApps/v2/refund/lookup/\($0)" }
    }

    /// A page of signed transactions for `id` at `path(id)`: the body must be a `response` (`signedTransactions`, all
    /// strings, and `hasMore`; a `revision` when there is more), else the API is not answering as documented.
    private func signedTransactions(of id: TransactionID, revision: String?, response: String, query: String?,
                                    path: (TransactionID) -> String) async -> Result<SignedTransactionsPage, Failure> {
        var parameters = query.map { [$0] } ?? []
        if let revision {
            guard let escaped = revision.addingPercentEncoding(withAllowedCharacters: .urlUnreserved), !escaped.isEmpty else {
                return .failure(.refused(status: 0, detail: "the revision cannot be sent"))
            }
            parameters.append("revision=" + escaped)
        }
        return await get(for: id) { path($0) + (parameters.isEmpty ? "" : "?" + parameters.joined(separator: "&")) }.flatMap { answer in
            guard let fields = JSONValue.parse(answer)?.objectValue, let items = fields["signedTransactions"]?.arrayValue,
                  let hasMore = fields["hasMore"]?.boolValue else {
                return .failure(.unavailable("App Store Server API: an answer that is not a \(response) (signedTransactions and hasMore)"))
            }
            let signed = items.compactMap(\.stringValue)
            // A transaction left out would be a purchase never seen: the page is refused whole.
            guard signed.count == items.count, !signed.contains(where: \.isEmpty) else {
                return .failure(.unavailable("App Store Server API: a \(response) with a signed transaction that is not a JWS string"))
            }
            guard hasMore else { return .success(SignedTransactionsPage(signedTransactions: signed, revision: nil)) }
            // More to read and no way to ask for it: not the end of the history.
            guard let next = fields["revision"]?.stringValue, !next.isEmpty else {
                return .failure(.unavailable("App Store Server API: a \(response) page with more to read and no revision"))
            }
            return .success(SignedTransactionsPage(signedTransactions: signed, revision: next))
        }
    }
}
