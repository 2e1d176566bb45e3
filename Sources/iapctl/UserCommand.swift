import PurchaseDomain
import CommandLineOptions
import Foundation
import Ingest
import JSON
import PurchaseStore
import RequestSigning

/// `iapctl user USER (--store URL [--password-file F] | --ingest URL [--read-secret-file F] [--sync])
/// [--history [--limit N] [--before CURSOR]]`: what a user owns, or with `--history` what happened to their purchases
/// and items (newest first, a page at a time), as one JSON object — read from the store, or asked of `iap-ingest`'s
/// `GET /v1/users/{userId}` (`…/history`) as an app's backend asks it (signed when a secret is given). With `--sync`,
/// asks the ingest to sync the user with the App Store first (`POST /v1/users/{userId}/sync`) and prints its answer.
enum UserCommand {
    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--store", "--password-file", "--ingest", "--read-secret-file", "--limit", "--before"],
                                         flags: ["--sync", "--history"])
        if options.positional.count == 2, options.positional[0] == "erase" { return try await erase(UserID(options.positional[1]), options) }
        guard let userId = options.positional.first, options.positional.count == 1 else { throw UsageError("user: name one user id") }
        let history = options.flags.contains("--history")
        let limit = try options.string("--limit").map { text -> Int in
            guard let limit = Int(text), (1...SQLPurchaseStore.historyPageLimit).contains(limit) else {
                throw UsageError("--limit: 1 to \(SQLPurchaseStore.historyPageLimit) events")
            }
            return limit
        }
        if !history && (limit != nil || options.string("--before") != nil) { throw UsageError("user: --limit and --before go with --history") }
        if history && options.flags.contains("--sync") { throw UsageError("user: --sync and --history are separate questions") }
        if let ingest = options.string("--ingest") {
            let secret = try options.string("--read-secret-file").map { path -> Data in
                guard let contents = SharedSecret.read(file: path) else { throw UsageError("--read-secret-file: cannot read \(path)") }
                return contents
            }
            let question: UserHoldingsAPI.Question = history ? .history(limit: limit, before: options.string("--before"))
                : options.flags.contains("--sync") ? .sync : .holdings
            let status: Int, body: Data
            do {
                (status, body) = try await UserHoldingsAPI.fetch(userId, ingest: ingest, secret: secret, question)
            } catch let error as URLError where error.code == .badURL {
                throw UsageError("--ingest: not a URL: \(ingest)")
            }
            print(String(decoding: body, as: UTF8.self))
            return (200...202).contains(status) ? 0 : 1
        }
        if options.flags.contains("--sync") { throw UsageError("user: --sync goes with --ingest URL (the ingest holds the App Store Server API key)") }
        guard let store = try IAPCtl.store(options) else { throw UsageError("user: --store URL (or IAP_STORE_URL) or --ingest URL is required") }
        if try await store.wasErased(UserID(userId)) {
            print(String(decoding: JSONValue.object(["error": .string("userErased"), "userId": .string(userId)]).serialized, as: UTF8.self))
            return 1
        }
        if history {
            let before = try options.string("--before").map { text -> SQLPurchaseStore.HistoryCursor in
                guard let cursor = SQLPurchaseStore.HistoryCursor(text) else { throw UsageError("--before: the next of a page printed before") }
                return cursor
            }
            print(String(decoding: try UserHoldingsAPI.encode(try await store.history(of: UserID(userId), before: before, limit: limit ?? 50)), as: UTF8.self))
            return 0
        }
        print(String(decoding: try UserHoldingsAPI.encode(try await store.holdings(of: UserID(userId))), as: UTF8.self))
        return 0
    }

    /// `iapctl user erase USER --store URL`: erases the user on request (`SQLPurchaseStore.erase`); exit 1 when the user
    /// was erased before or has messages parked.
    private static func erase(_ userId: UserID, _ options: CommandOptions) async throws -> Int32 {
        guard let store = try IAPCtl.store(options) else {
            throw UsageError("user erase: --store URL (or IAP_STORE_URL) is required: the store is erased, not the ingest")
        }
        let fields: [String: JSONValue]
        switch try await store.erase(userId, at: Date()) {
        case .erased(let pseudonym, let purchases, let entries):
            fields = ["erased": .bool(true), "pseudonym": .string(pseudonym.rawValue), "purchases": .integer(Int64(purchases)),
                      "ledgerEntries": .integer(Int64(entries))]
        case .erasedBefore:
            fields = ["erased": .bool(false), "error": .string("erasedBefore")]
        case .messagesParked(let count):
            fields = ["erased": .bool(false), "error": .string("messagesParked"), "parked": .integer(Int64(count)),
                      "detail": .string("the user's parked messages hold their id until re-driven: erase once they are done")]
        }
        print(String(decoding: JSONValue.object(fields.merging(["userId": .string(userId.rawValue)]) { mine, _ in mine }).serialized, as: UTF8.self))
        return fields["erased"] == .bool(true) ? 0 : 1
    }
}
