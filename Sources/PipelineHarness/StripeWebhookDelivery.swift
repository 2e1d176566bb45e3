import Foundation
import HTTPClient
import StoreFixtures

extension StandInStripe {
    /// Stripe's webhook deliveries of the events `ids` (of the API's list, `emit` or a refund) to the ingest's
    /// `POST /v1/stripe/webhooks` (its address asked of `ingest` before each round: it may have moved): each body as the
    /// list holds it, signed under `webhooks` when it is sent, sent again until answered 2xx as Stripe retries
    /// (`deliverUntilAcknowledged`). An id given twice is delivered twice.
    public func deliver(_ ids: [String], to ingest: () async throws -> String,
                        timeout: TimeInterval = 120) async throws -> (retried: Int, undelivered: Int, refusals: [Int: Int]) {
        let bodies = try ids.map { id in
            guard let body = api.eventBody(id) else { throw HarnessError("Stripe lists no event \(id)") }
            return body
        }
        let client = HTTPClient(timeout: .seconds(30), maxConnections: 16)
        return try await deliverUntilAcknowledged(bodies.count, to: ingest, timeout: timeout) { pending, address in
            let requests = pending.map { index in
                HTTPClient.Request(method: "POST", url: address + "/v1/stripe/webhooks",
                                   headers: [("Stripe-Signature", webhooks.header(for: bodies[index])), ("Content-Type", "application/json")],
                                   body: Array(bodies[index]))
            }
            return await client.send(all: requests).map { result in
                switch result {
                case .success(let response): response.status
                case .failure: 0
                }
            }
        }
    }
}
