import Database
import Foundation
import HTTPServer
import JSON
import PurchaseDomain
import PurchaseEvents
import PurchaseStore

/// `GET /v1/users/{userId}/history?limit=N&before=CURSOR`: what happened to the user's purchases and items, newest first
/// (`SQLPurchaseStore.history(of:before:limit:)`), signed as the holdings are —
/// `{"userId", "events": [{"at", "kind", "store", "transactionId", "productId", "app", "reason", "item", "consent"}], "next"}`.
/// `limit` is 1 to 500 (50 by default); `next`, absent on the last page, is the `before` of the next.
extension UserHoldingsAPI {
    static let historySuffix = "/history"

    func answerHistory(_ request: HTTPRequest) async -> HTTPResponse {
        let userId: UserID
        switch user(of: request, method: "GET", suffix: Self.historySuffix) {
        case .success(let user): userId = user
        case .failure(let refusal): return refusal.response
        }
        var limit = 50
        var before: SQLPurchaseStore.HistoryCursor?
        for pair in (request.query ?? "").split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let value = parts.count == 2 ? Self.percentDecoded(parts[1]) ?? "" : ""
            switch parts[0] {
            case "limit":
                guard let number = Int(value), (1...SQLPurchaseStore.historyPageLimit).contains(number) else {
                    return IngestAPI.error(400, "invalidLimit", "limit is 1 to \(SQLPurchaseStore.historyPageLimit)")
                }
                limit = number
            case "before":
                guard let cursor = SQLPurchaseStore.HistoryCursor(value) else {
                    return IngestAPI.error(400, "invalidCursor", "before is the next of a page this endpoint answered")
                }
                before = cursor
            default:
                return IngestAPI.error(400, "unknownParameter", "the history takes limit and before")
            }
        }
        do {
            if try await store.wasErased(userId) { return Self.erased }
            let history = try await store.history(of: userId, before: before, limit: limit)
            return HTTPResponse(status: 200, headers: ["Content-Type": "application/json", "Cache-Control": "no-store"], body: try Self.encode(history))
        } catch {
            return readFailure(error, what: "history")
        }
    }

    /// The JSON support tools get (and `iapctl user --history` prints): sorted keys, RFC 3339 times.
    public static func encode(_ history: UserHistory) throws -> Data { Data(try EventCodec.json(history).serialized) }
}
