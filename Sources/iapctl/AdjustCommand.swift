import CommandLineOptions
import Foundation
import JSON
import JSONSchema
import Kafka
import PurchaseDomain
import PurchaseEvents

/// `iapctl adjust`: publishes an operator's `user.adjustment` — give or take currency, give an entitlement, or reverse an
/// earlier adjustment — which the granter applies once per `--id` and answers on `iap.user.adjusted`.
enum AdjustCommand {
    static let usage = """
        usage: iapctl adjust --user USER --id ID --by OPERATOR --reason TEXT
                             (--currency CODE=AMOUNT | --entitlement CODE[@RFC3339])... | --reverse ID
                             [--brokers HOST:PORT] [--topic-prefix P] [--kafka key=value]...
          --id is the idempotency key: the same request again changes nothing. AMOUNT is signed (-200 takes 200), at most
          10^12 either way; an entitlement is given for good, or until the time after @. --reverse ID undoes an earlier
          adjustment.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--user", "--id", "--by", "--reason", "--currency", "--entitlement", "--reverse",
                                                             "--brokers", "--kafka", "--topic-prefix"])
        func required(_ flag: String) throws -> String {
            guard let value = options.string(flag), !value.isEmpty else { throw UsageError("adjust: \(flag) is required\n\(usage)") }
            return value
        }
        var items: [UserAdjustment.Item] = []
        for text in options.values["--currency"] ?? [] {
            let parts = text.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, let amount = Int64(parts[1]), CurrencyAmounts.isItemAmount(amount) else {
                throw UsageError("adjust: --currency CODE=AMOUNT takes a non-zero whole number from -\(CurrencyAmounts.itemLimit) to \(CurrencyAmounts.itemLimit), got \(text)")
            }
            items.append(.init(kind: .currency, code: ItemCode(String(parts[0])), amount: amount))
        }
        for text in options.values["--entitlement"] ?? [] {
            let parts = text.split(separator: "@", maxSplits: 1)
            let until = try parts.dropFirst().first.map { time -> Date in
                guard let date = RFC3339.parse(String(time)) else { throw UsageError("adjust: --entitlement CODE@TIME takes an RFC 3339 time, got \(time)") }
                return date
            }
            items.append(.init(kind: .entitlement, code: ItemCode(String(parts[0])), expiresAt: until))
        }
        let reverses = options.string("--reverse").map { AdjustmentID($0) }
        guard (reverses == nil) != items.isEmpty else { throw UsageError("adjust: give --currency or --entitlement items, or --reverse ID, not both\n\(usage)") }
        let request = UserAdjustment(adjustmentId: AdjustmentID(try required("--id")), userId: UserID(try required("--user")), requestedBy: try required("--by"),
                                     reason: try required("--reason"), items: items.isEmpty ? nil : items, reverses: reverses, requestedAt: Date())
        let report = try await ProduceCommands.publish(request, options, command: "adjust")
        print("published \(request.eventID) to \(report.topic)[\(report.partition)]@\(report.offset); the answer comes on user.adjusted")
        return 0
    }
}
