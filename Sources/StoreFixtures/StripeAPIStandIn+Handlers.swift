import Foundation
import HTTPServer
import JSON
import Synchronization

extension StripeAPIStandIn {
    /// Stripe's error object with `status`.
    static func error(_ status: Int, type: String, message: String, code: String? = nil, param: String? = nil, headers: [String: String] = [:]) -> HTTPResponse {
        var error: [String: JSONValue] = ["type": .string(type), "message": .string(message)]
        if let code { error["code"] = .string(code) }
        if let param { error["param"] = .string(param) }
        return json(status, ["error": .object(error)], headers: headers)
    }

    static func json(_ status: Int, _ object: [String: JSONValue], headers: [String: String] = [:]) -> HTTPResponse {
        HTTPResponse(status: status, headers: headers.merging(["Content-Type": "application/json"]) { old, _ in old },
                     body: Data(JSONValue.object(object).serializedText.utf8))
    }

    /// `application/x-www-form-urlencoded` pairs (a query or a body), names and values decoded, in their order.
    static func form(_ text: String) -> [(name: String, value: String)] {
        text.split(separator: "&").map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map { part in
                let spaced = part.replacingOccurrences(of: "+", with: " ")
                return spaced.removingPercentEncoding ?? spaced
            }
            return (parts[0], parts.count == 2 ? parts[1] : "")
        }
    }

    static func handle(_ request: HTTPRequest, registry: Registry, secretKey: String) -> HTTPResponse {
        let fault = registry.books.withLock { books -> Fault? in
            books.requests.append(request.method + " " + request.path + (request.query.map { "?" + $0 } ?? ""))
            guard let fault = books.fault else { return nil }
            if let remaining = fault.remaining { books.fault = remaining > 1 ? Fault(status: fault.status, retryAfter: fault.retryAfter, remaining: remaining - 1) : nil }
            return fault
        }
        if let fault {
            let headers = fault.retryAfter.map { ["Retry-After": String($0)] } ?? [:]
            return fault.status == 429
                ? error(429, type: "invalid_request_error", message: "Too many requests hit the API too quickly.", code: "rate_limit", headers: headers)
                : error(fault.status, type: "api_error", message: "Injected failure", headers: headers)
        }
        guard let authorization = request.header("authorization"), authorization.hasPrefix("Bearer ") else {
            return error(401, type: "invalid_request_error",
                         message: "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth.")
        }
        let key = String(authorization.dropFirst(7))
        // As bytes: a key is a secret, not text.
        guard Array(key.utf8) == Array(secretKey.utf8) else {
            return error(401, type: "invalid_request_error", message: "Invalid API Key provided: \(key.prefix(8))****\(key.suffix(4))")
        }
        let query = form(request.query ?? "")
        let path = request.path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        switch (request.method, path.count) {
        case ("GET", 5) where path[1] == "v1" && path[2] == "checkout" && path[3] == "sessions":
            return session(path[4], query: query, registry: registry)
        case ("GET", 6) where path[1] == "v1" && path[2] == "checkout" && path[3] == "sessions" && path[5] == "line_items":
            return lineItems(path[4], query: query, registry: registry)
        case ("GET", 3) where path[1] == "v1" && path[2] == "events":
            return events(query, registry: registry)
        case ("POST", 3) where path[1] == "v1" && path[2] == "refunds":
            return idempotent(request, registry: registry) { refund(form(String(decoding: request.body, as: UTF8.self)), registry: registry) }
        default:
            return error(404, type: "invalid_request_error", message: "Unrecognized request URL (\(request.method): \(request.path)).")
        }
    }

    /// A POST under its `Idempotency-Key`: the first answer again for the same path and body, `idempotency_error` for others.
    static func idempotent(_ request: HTTPRequest, registry: Registry, perform: () -> HTTPResponse) -> HTTPResponse {
        guard let key = request.header("idempotency-key") else { return perform() }
        let fingerprint = request.method + " " + request.path + "\n" + String(decoding: request.body, as: UTF8.self)
        if let saved = registry.books.withLock({ $0.idempotent[key] }) {
            guard saved.request == fingerprint else {
                return error(400, type: "idempotency_error",
                             message: "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '\(key)' if you meant to execute a different request.")
            }
            var replayed = saved.response
            replayed.headers["Idempotent-Replayed"] = "true"
            return replayed
        }
        let response = perform()
        registry.books.withLock { $0.idempotent[key] = (fingerprint, response) }
        return response
    }

    static func missing(_ kind: String, _ id: String, param: String) -> HTTPResponse {
        error(404, type: "invalid_request_error", message: "No such \(kind): '\(id)'", code: "resource_missing", param: param)
    }

    static func session(_ id: String, query: [(name: String, value: String)], registry: Registry) -> HTTPResponse {
        let expand = Set(query.filter { $0.name == "expand[]" }.map(\.value))
        return registry.books.withLock { books in
            guard let session = books.sessions[id] else { return missing("checkout.session", id, param: "session") }
            return json(200, sessionObject(session, expand: expand, embedded: books.embeddedLineItems))
        }
    }

    /// A session's JSON, `expand`'s fields expanded (`line_items` with its first `embedded` items).
    static func sessionObject(_ session: Session, expand: Set<String>, embedded: Int = 10) -> [String: JSONValue] {
        var object: [String: JSONValue] = [
            "id": .string(session.id), "object": .string("checkout.session"), "status": .string(session.status),
            "payment_status": .string(session.paymentStatus), "mode": .string(session.mode),
            "client_reference_id": session.clientReferenceId.map(JSONValue.string) ?? .null,
            "metadata": .object(session.metadata.mapValues(JSONValue.string)), "amount_total": .integer(session.amountTotal),
            "currency": .string(session.lineItems.first?.currency ?? "usd"), "created": .integer(Int64(session.created.timeIntervalSince1970)),
            "livemode": .bool(session.livemode), "customer": .string("cus_standin"),
            "payment_intent": session.paymentIntentId.map(JSONValue.string) ?? .null, "subscription": session.subscriptionId.map(JSONValue.string) ?? .null,
        ]
        if expand.contains("line_items") {
            object["line_items"] = list(Array(session.lineItems.prefix(embedded)).map(lineItemObject), hasMore: session.lineItems.count > embedded,
                                        url: "/v1/checkout/sessions/\(session.id)/line_items")
        }
        if expand.contains("payment_intent"), let intent = session.paymentIntentId {
            object["payment_intent"] = .object(["id": .string(intent), "object": .string("payment_intent"), "status": .string(session.paymentIntentStatus),
                                                "amount": .integer(session.amountTotal)])
        }
        if expand.contains("subscription"), let subscription = session.subscriptionId {
            // The shape of API versions from 2025-03-31: the period on the subscription's items.
            var item: [String: JSONValue] = ["id": .string("si_" + subscription.dropFirst(4)), "object": .string("subscription_item")]
            if let end = session.currentPeriodEnd { item["current_period_end"] = .integer(Int64(end.timeIntervalSince1970)) }
            object["subscription"] = .object(["id": .string(subscription), "object": .string("subscription"), "status": .string(session.subscriptionStatus),
                                              "items": .object(["object": .string("list"), "data": .array([.object(item)]), "has_more": .bool(false)])])
        }
        return object
    }

    static func lineItemObject(_ item: LineItem) -> JSONValue {
        let amount = item.unitAmount * Int64(item.quantity)
        return .object([
            "id": .string(item.id), "object": .string("item"), "amount_subtotal": .integer(amount), "amount_total": .integer(amount),
            "amount_discount": .integer(0), "amount_tax": .integer(0), "currency": .string(item.currency), "quantity": .integer(Int64(item.quantity)),
            "price": .object(["id": .string(item.priceId), "object": .string("price"), "product": .string(item.productId), "unit_amount": .integer(item.unitAmount),
                              "currency": .string(item.currency), "type": .string(item.recurring ? "recurring" : "one_time"),
                              "recurring": item.recurring ? .object(["interval": .string("month"), "interval_count": .integer(1)]) : .null]),
        ])
    }

    static func list(_ data: [JSONValue], hasMore: Bool, url: String) -> JSONValue {
        .object(["object": .string("list"), "data": .array(data), "has_more": .bool(hasMore), "url": .string(url)])
    }

    /// `limit` as Stripe takes it: 1 to 100, 10 when absent; nil for another value.
    static func limit(_ query: [(name: String, value: String)]) -> Int? {
        guard let text = query.first(where: { $0.name == "limit" })?.value else { return 10 }
        return Int(text).flatMap { (1...100).contains($0) ? $0 : nil }
    }

    static func lineItems(_ id: String, query: [(name: String, value: String)], registry: Registry) -> HTTPResponse {
        guard let limit = limit(query) else { return error(400, type: "invalid_request_error", message: "Invalid limit: must be between 1 and 100", param: "limit") }
        return registry.books.withLock { books in
            guard let session = books.sessions[id] else { return missing("checkout.session", id, param: "session") }
            var start = 0
            if let after = query.first(where: { $0.name == "starting_after" })?.value {
                guard let index = session.lineItems.firstIndex(where: { Array($0.id.utf8) == Array(after.utf8) }) else {
                    return error(400, type: "invalid_request_error", message: "Invalid starting_after id: \(after)", param: "starting_after")
                }
                start = index + 1
            }
            let page = session.lineItems.dropFirst(start).prefix(limit)
            return json(200, list(page.map(lineItemObject), hasMore: start + page.count < session.lineItems.count,
                                  url: "/v1/checkout/sessions/\(id)/line_items").objectValue!)
        }
    }

    static func events(_ query: [(name: String, value: String)], registry: Registry) -> HTTPResponse {
        guard let limit = limit(query) else { return error(400, type: "invalid_request_error", message: "Invalid limit: must be between 1 and 100", param: "limit") }
        let types = Set(query.filter { $0.name == "types[]" }.map(\.value))
        guard types.count <= 20 else { return error(400, type: "invalid_request_error", message: "You may pass at most 20 types.", param: "types") }
        var bounds: [String: Int64] = [:]
        for name in ["created[gte]", "created[gt]", "created[lte]", "created[lt]"] {
            guard let text = query.first(where: { $0.name == name })?.value else { continue }
            guard let value = Int64(text) else { return error(400, type: "invalid_request_error", message: "Invalid integer: \(text)", param: "created") }
            bounds[name] = value
        }
        let kept = Int64(Date().timeIntervalSince1970) - 30 * 86_400
        return registry.books.withLock { books in
            // Newest first by `created`, as Stripe lists them; those of one second the last created first.
            let byCreated = books.events.enumerated().sorted { ($0.element["created"]?.int64Value ?? 0, $0.offset) > ($1.element["created"]?.int64Value ?? 0, $1.offset) }
            let newestFirst = byCreated.map(\.element).filter { event in
                let created = event["created"]?.int64Value ?? 0
                return created >= kept && (types.isEmpty || types.contains(event["type"]?.stringValue ?? ""))
                    && bounds["created[gte]"].map { created >= $0 } ?? true && bounds["created[gt]"].map { created > $0 } ?? true
                    && bounds["created[lte]"].map { created <= $0 } ?? true && bounds["created[lt]"].map { created < $0 } ?? true
            }
            var start = 0
            if let after = query.first(where: { $0.name == "starting_after" })?.value {
                guard let index = newestFirst.firstIndex(where: { $0["id"]?.stringValue == after }) else {
                    return error(400, type: "invalid_request_error", message: "Invalid starting_after id: \(after)", param: "starting_after")
                }
                start = index + 1
            }
            let page = newestFirst.dropFirst(start).prefix(limit)
            return json(200, list(page.map(JSONValue.object), hasMore: start + page.count < newestFirst.count, url: "/v1/events").objectValue!)
        }
    }

    /// `POST /v1/refunds`: refunds `amount` (absent: what is left) of the payment intent's charge, and records
    /// `charge.refunded` with the charge as it is after.
    static func refund(_ form: [(name: String, value: String)], registry: Registry) -> HTTPResponse {
        let fields = Dictionary(form.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
        guard let intent = fields["payment_intent"] else {
            return error(400, type: "invalid_request_error", message: "One of the following params should be provided for this request: payment_intent or charge.")
        }
        let response: HTTPResponse? = registry.books.withLock { books in
            guard var charge = books.charges.values.first(where: { Array($0.paymentIntentId.utf8) == Array(intent.utf8) }) else {
                return error(400, type: "invalid_request_error", message: "No such payment_intent: '\(intent)'", code: "resource_missing", param: "payment_intent")
            }
            let left = charge.amount - charge.amountRefunded
            let amount: Int64? = if let text = fields["amount"] { Int64(text) } else { left }
            guard let amount, amount > 0 else {
                return error(400, type: "invalid_request_error", message: "Invalid positive integer", param: "amount")
            }
            guard amount <= left else {
                return error(400, type: "invalid_request_error", message: "Refund amount (\(amount)) is greater than unrefunded amount on charge (\(left))",
                             code: "amount_too_large", param: "amount")
            }
            charge.amountRefunded += amount
            books.charges[charge.id] = charge
            return json(200, ["id": .string(newID("re")), "object": .string("refund"), "amount": .integer(amount), "charge": .string(charge.id),
                              "payment_intent": .string(intent), "currency": .string(charge.currency), "status": .string("succeeded")])
        }
        guard let response, response.status == 200, let charge = registry.books.withLock({ books in
            books.charges.values.first { Array($0.paymentIntentId.utf8) == Array(intent.utf8) }
        }) else { return response ?? error(500, type: "api_error", message: "no answer") }
        let object: [String: JSONValue] = [
            "id": .string(charge.id), "object": .string("charge"), "amount": .integer(charge.amount), "amount_refunded": .integer(charge.amountRefunded),
            "refunded": .bool(charge.amountRefunded >= charge.amount), "payment_intent": .string(charge.paymentIntentId), "currency": .string(charge.currency),
            "status": .string("succeeded"),
        ]
        let event = event(type: "charge.refunded", object: object, created: Date(), livemode: false)
        registry.books.withLock { $0.events.append(event) }
        return response
    }
}
