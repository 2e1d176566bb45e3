import Crypto
import Foundation
import HTTPServer
import JSON
import PurchaseDomain

extension GooglePlayAPIStandIn {
    /// Google's error body: `{"error":{"code","message","status"}}`, with `errors: [{"reason", "message", "domain"}]` when
    /// a `reason` is given.
    static func error(_ code: Int, _ message: String, _ status: String, reason: String? = nil, headers: [String: String] = [:]) -> HTTPResponse {
        var fields: [String: JSONValue] = ["code": .integer(Int64(code)), "message": .string(message), "status": .string(status)]
        if let reason {
            fields["errors"] = .array([.object(["message": .string(message), "domain": .string("global"), "reason": .string(reason)])])
        }
        let body: JSONValue = .object(["error": .object(fields)])
        return HTTPResponse(status: code, headers: headers.merging(["Content-Type": "application/json"]) { old, _ in old }, body: Data(body.serializedText.utf8))
    }

    static func status(of code: Int) -> String {
        switch code {
        case 400: "INVALID_ARGUMENT"
        case 401: "UNAUTHENTICATED"
        case 403: "PERMISSION_DENIED"
        case 404, 410: "NOT_FOUND"
        case 409: "ABORTED"
        case 429: "RESOURCE_EXHAUSTED"
        case 503: "UNAVAILABLE"
        default: "INTERNAL"
        }
    }

    /// The token endpoint: an access token for a valid assertion, else `invalid_grant`.
    static func token(_ request: HTTPRequest, registry: Registry, publicKey: PublicKey, email: String, audience: String, lifetime: Duration) -> HTTPResponse {
        registry.books.withLock { $0.tokenRequests += 1 }
        if let stall = registry.faults.withLock({ $0.tokenStall }) {
            Thread.sleep(forTimeInterval: Double(stall.components.seconds) + Double(stall.components.attoseconds) / 1e18)
        }
        func refuse(_ code: String, _ description: String, status: Int = 400) -> HTTPResponse {
            let body: JSONValue = .object(["error": .string(code), "error_description": .string(description)])
            return HTTPResponse(status: status, contentType: "application/json", body: body.serializedText)
        }
        if let status = registry.faults.withLock({ $0.tokenEndpoint }) {
            return status == 400 ? refuse("invalid_grant", "Invalid grant: account not found") : refuse("internal_failure", "Injected failure", status: status)
        }
        guard request.method == "POST" else { return refuse("invalid_request", "POST required") }
        var form: [String: String] = [:]
        for pair in String(decoding: request.body, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "" }
            if parts.count == 2 { form[parts[0]] = parts[1] }
        }
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer" else { return refuse("unsupported_grant_type", "Invalid grant_type") }
        let parts = (form["assertion"] ?? "").split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let header = Base64URL.decode(parts[0]).flatMap({ JSONValue.parse(Array($0))?.objectValue }),
              let claims = Base64URL.decode(parts[1]).flatMap({ JSONValue.parse(Array($0))?.objectValue }),
              let signature = Base64URL.decode(parts[2]) else {
            return refuse("invalid_grant", "Invalid JWT: Token must be a short-lived token and in a reasonable timeframe")
        }
        guard header["alg"]?.stringValue == "RS256",
              publicKey.verifyRSA(message: Data((parts[0] + "." + parts[1]).utf8), signature: signature, digest: .sha256) else {
            return refuse("invalid_grant", "Invalid JWT Signature.")
        }
        let now = Date().timeIntervalSince1970
        guard claims["iss"]?.stringValue == email, claims["aud"]?.stringValue == audience,
              claims["scope"]?.stringValue?.split(separator: " ").contains(Substring("https://www.googleapis.com/auth/androidpublisher")) == true,
              let issued = claims["iat"]?.int64Value, let expires = claims["exp"]?.int64Value, expires > issued, expires - issued <= 3600,
              Double(issued) - 300 <= now, now <= Double(expires) else {
            return refuse("invalid_grant", "Invalid JWT: the claims are not this account's, this endpoint's and scope's, or not current")
        }
        let token = "ya29.stand-in." + UUID().uuidString
        let seconds = lifetime.components.seconds
        registry.books.withLock { $0.accessTokens[token] = Date().addingTimeInterval(Double(seconds)) }
        let body: JSONValue = .object(["access_token": .string(token), "expires_in": .integer(seconds), "token_type": .string("Bearer")])
        return HTTPResponse(status: 200, contentType: "application/json", body: body.serializedText)
    }

    /// The Android Publisher API's `purchases.products` get, acknowledge and consume (subscriptions: `+Subscriptions`).
    static func api(_ request: HTTPRequest, registry: Registry) -> HTTPResponse {
        guard request.path.hasPrefix(apiPrefix) else { return error(404, "Not found", "NOT_FOUND") }
        // {package}/purchases/products/{product}/tokens/{token}[:action]: the action's colon is literal, a token's is encoded.
        var raw = request.path.dropFirst(apiPrefix.count).split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        var action = ""
        if let last = raw.last, let colon = last.lastIndex(of: ":") {
            action = String(last[last.index(after: colon)...])
            raw[raw.count - 1] = String(last[..<colon])
        }
        let parts = raw.map { $0.removingPercentEncoding ?? $0 }
        let token = PurchaseToken(parts.count == 6 ? parts[5] : "")
        let (fault, stall) = registry.faults.withLock { ($0.all ?? $0.byToken[token], $0.stalls[token]) }
        if let stall { Thread.sleep(forTimeInterval: Double(stall.components.seconds) + Double(stall.components.attoseconds) / 1e18) }
        if let fault {
            return error(fault.status, "Injected failure", status(of: fault.status), headers: fault.retryAfter.map { ["Retry-After": String($0)] } ?? [:])
        }
        let bearer = request.header("authorization").flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
        guard let bearer, registry.books.withLock({ $0.accessTokens[bearer].map { $0 > Date() } ?? false }) else {
            return error(401, "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
                         "UNAUTHENTICATED", headers: ["WWW-Authenticate": #"Bearer realm="https://accounts.google.com/""#])
        }
        // A purchase token that is not well-formed (the last segment of every purchase's path): Google's `Invalid Value`.
        if parts.count >= 5, registry.books.withLock({ $0.malformed.contains(PurchaseToken(parts[parts.count - 1])) }) {
            return error(400, "Invalid Value", "INVALID_ARGUMENT", reason: "invalid")
        }
        if let answer = subscriptionRoutes(request.method, parts, action: action, registry: registry) { return answer }
        if parts.count == 3, parts[1] == "orders", request.method == "POST", action == "refund" {
            return refund(order: TransactionID(parts[2]), package: PackageName(parts[0]), registry: registry)
        }
        if parts.count == 3, parts[1] == "purchases", parts[2] == "voidedpurchases", request.method == "GET", action.isEmpty {
            return voidedPurchases(request, package: PackageName(parts[0]), registry: registry)
        }
        guard parts.count == 6, parts[1] == "purchases", parts[2] == "products", parts[4] == "tokens",
              (request.method == "GET" && action.isEmpty) || (request.method == "POST" && ["acknowledge", "consume"].contains(action)) else {
            return error(404, "Not found", "NOT_FOUND")
        }
        return registry.books.withLock { books -> HTTPResponse in
            if books.invalid.contains(token) { return error(410, "The purchase token is no longer valid.", "NOT_FOUND") }
            guard var purchase = books.purchases[token], purchase.packageName == PackageName(parts[0]), purchase.productId == ProductID(parts[3]) else {
                return error(404, "The purchase token was not found.", "NOT_FOUND")
            }
            let invalidState = error(400, "The purchase is not in a valid state to perform the desired operation.", "FAILED_PRECONDITION")
            switch action {
            case "acknowledge":
                guard purchase.purchaseState == 0, purchase.acknowledgementState == 0 else { return invalidState }
                purchase.acknowledgementState = 1
                books.acknowledged[token, default: 0] += 1
            case "consume":
                guard purchase.purchaseState == 0, purchase.consumptionState == 0 else { return invalidState }
                purchase.consumptionState = 1
                purchase.acknowledgementState = 1
                books.consumed[token, default: 0] += 1
            default:
                return HTTPResponse(status: 200, contentType: "application/json", body: productPurchase(purchase, token: token).serializedText)
            }
            books.purchases[token] = purchase
            return HTTPResponse(status: 200)
        }
    }

    /// `orders.refund` of a one-time product's order (`revoke=true` as the pipeline asks): the purchase is canceled and
    /// listed among the voided purchases (voided by the developer); 404 for an order Google does not know in `package`,
    /// 400 for one refunded or canceled already.
    static func refund(order: TransactionID, package: PackageName, registry: Registry) -> HTTPResponse {
        registry.books.withLock { books -> HTTPResponse in
            guard let (token, purchase) = books.purchases.first(where: { $0.value.orderId == order && $0.value.packageName == package }) else {
                return error(404, "The order was not found.", "NOT_FOUND")
            }
            guard purchase.purchaseState == 0 else { return error(400, "The order is not in a valid state to be refunded.", "FAILED_PRECONDITION") }
            books.purchases[token]?.purchaseState = 1
            books.voided.append(.init(token: token, at: Date(), reason: 1, source: 1))
            books.refunded[order, default: 0] += 1
            return HTTPResponse(status: 200)
        }
    }

    /// `purchases.voidedpurchases.list` of `package`. A page token names the span and the position it goes on from.
    static func voidedPurchases(_ request: HTTPRequest, package: PackageName, registry: Registry) -> HTTPResponse {
        let parameters = request.queryParameters
        let now = Date()
        var start = now.addingTimeInterval(-30 * 86_400), end = now, offset = 0
        if let token = parameters["token"] {
            let fields = token.split(separator: "~").compactMap { Int64($0) }
            guard fields.count == 3 else { return error(400, "Invalid pagination token.", "INVALID_ARGUMENT") }
            (start, end, offset) = (Date(timeIntervalSince1970: Double(fields[0]) / 1000), Date(timeIntervalSince1970: Double(fields[1]) / 1000), Int(fields[2]))
        } else {
            if let text = parameters["startTime"] {
                guard let milliseconds = Int64(text) else { return error(400, "Invalid startTime.", "INVALID_ARGUMENT") }
                start = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
            }
            if let text = parameters["endTime"] {
                guard let milliseconds = Int64(text) else { return error(400, "Invalid endTime.", "INVALID_ARGUMENT") }
                end = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
            }
            guard start >= now.addingTimeInterval(-30 * 86_400 - 5) else { return error(400, "startTime can be at most 30 days in the past.", "INVALID_ARGUMENT") }
            guard end <= now.addingTimeInterval(5), start <= end else { return error(400, "Invalid time range.", "INVALID_ARGUMENT") }
        }
        let maxResults = parameters["maxResults"].flatMap(Int.init) ?? 1000
        // Google's defaults: one-time products only (`type` 0), whole purchases only.
        let subscriptionsToo = parameters["type"] == "1", partialRefunds = parameters["includeQuantityBasedPartialRefund"] == "true"
        guard ["0", "1", nil].contains(parameters["type"]) else { return error(400, "Invalid value for type.", "INVALID_ARGUMENT") }
        return registry.books.withLock { books in
            // Compared in milliseconds, as Google's times are.
            let span = EpochMilliseconds.milliseconds(start)...EpochMilliseconds.milliseconds(end)
            let listed = books.voided.filter { voided in
                let packageName = voided.order == nil ? books.purchases[voided.token]?.packageName : books.subscriptions[voided.token]?.packageName
                return packageName == package && span.contains(EpochMilliseconds.milliseconds(voided.at))
                    && (voided.order == nil || subscriptionsToo) && (voided.quantity == nil || partialRefunds)
            }
            let page = listed.dropFirst(offset).prefix(min(maxResults, books.voidedPageSize, 1000))
            var body: [String: JSONValue] = [
                "pageInfo": .object(["totalResults": .integer(Int64(listed.count)), "resultPerPage": .integer(Int64(page.count)),
                                     "startIndex": .integer(Int64(offset))]),
                "voidedPurchases": .array(page.map { voided in
                    let purchase = books.purchases[voided.token]
                    var fields: [String: JSONValue] = [
                        "kind": .string("androidpublisher#voidedPurchase"), "purchaseToken": .string(voided.token.rawValue),
                        "voidedTimeMillis": .string(String(EpochMilliseconds.milliseconds(voided.at))),
                        "voidedSource": .integer(Int64(voided.source)), "voidedReason": .integer(Int64(voided.reason)),
                    ]
                    if let orderId = voided.order ?? purchase?.orderId { fields["orderId"] = .string(orderId.rawValue) }
                    let purchaseTime = voided.order == nil ? purchase?.purchaseTime : books.subscriptions[voided.token]?.startTime
                    if let time = purchaseTime { fields["purchaseTimeMillis"] = .string(String(EpochMilliseconds.milliseconds(time))) }
                    if let quantity = voided.quantity { fields["voidedQuantity"] = .integer(Int64(quantity)) }
                    return .object(fields)
                }),
            ]
            if offset + page.count < listed.count {
                let next = "\(EpochMilliseconds.milliseconds(start))~\(EpochMilliseconds.milliseconds(end))~\(offset + page.count)"
                body["tokenPagination"] = .object(["nextPageToken": .string(next)])
            }
            return HTTPResponse(status: 200, contentType: "application/json", body: JSONValue.object(body).serializedText)
        }
    }

    /// A `ProductPurchase` resource, int64 fields as strings as Google sends them.
    static func productPurchase(_ purchase: Purchase, token: PurchaseToken) -> JSONValue {
        var body: [String: JSONValue] = [
            "kind": .string("androidpublisher#productPurchase"), "purchaseState": .integer(Int64(purchase.purchaseState)),
            "consumptionState": .integer(Int64(purchase.consumptionState)), "acknowledgementState": .integer(Int64(purchase.acknowledgementState)),
            "productId": .string((purchase.answeredProductId ?? purchase.productId).rawValue), "purchaseToken": .string(token.rawValue),
            "regionCode": .string("US"), "developerPayload": .string(""),
        ]
        if let orderId = purchase.orderId { body["orderId"] = .string(orderId.rawValue) }
        if let type = purchase.purchaseType { body["purchaseType"] = .integer(Int64(type)) }
        if purchase.quantity != 1 { body["quantity"] = .integer(Int64(purchase.quantity)) }
        if let account = purchase.obfuscatedExternalAccountId { body["obfuscatedExternalAccountId"] = .string(account) }
        if let time = purchase.purchaseTime { body["purchaseTimeMillis"] = .string(String(Int64(time.timeIntervalSince1970 * 1000))) }
        return .object(body)
    }
}
