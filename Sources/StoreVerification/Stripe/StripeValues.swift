import Foundation
import JSON
import PurchaseDomain

/// How Stripe writes times and money, read into the pipeline's terms.
public enum StripeValues {
    /// A Stripe timestamp (Unix seconds) as a date; nil outside 1970…9999 (`EpochMilliseconds`).
    public static func date(seconds: Int64) -> Date? {
        let (milliseconds, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        return overflow ? nil : EpochMilliseconds.date(milliseconds)
    }

    /// Currencies whose API amounts are whole units (Stripe's zero-decimal currencies).
    static let zeroDecimal: Set<String> = ["BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF"]
    /// Currencies whose API amounts are thousandths (Stripe's three-decimal currencies).
    static let threeDecimal: Set<String> = ["BHD", "JOD", "KWD", "OMR", "TND"]

    /// Stripe's currency code (lower-case ISO 4217, `usd`) as the pipeline writes currencies (`USD`, as the App Store
    /// does); nil for anything but three ASCII letters.
    public static func currencyCode(_ stripe: String) -> String? {
        let bytes = Array(stripe.utf8)
        guard bytes.count == 3, bytes.allSatisfy({ (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) }) else { return nil }
        return String(decoding: bytes.map { $0 & 0xDF }, as: UTF8.self)
    }

    /// An amount in the currency's minor unit as Stripe's API writes it (cents of `usd`, yen of `jpy`, fils of `kwd`), in
    /// milliunits of the currency as `VerifiedPurchase.price` is (1099 `usd` → 10990); nil when it does not fit.
    /// - Parameter currency: the ISO code (`currencyCode(_:)`).
    public static func milliunits(_ amount: Int64, currency: String) -> Int64? {
        let factor: Int64 = zeroDecimal.contains(currency) ? 1000 : threeDecimal.contains(currency) ? 1 : 10
        let (value, overflow) = amount.multipliedReportingOverflow(by: factor)
        return overflow ? nil : value
    }

    /// The share of `amount` that `refunded` is, in `RefundShare`'s thousandths of a percent, rounded down (a partial
    /// refund takes back no more than was given back); the whole for a refund of all of it or more. Nil for an amount
    /// that is not positive or a refund below zero.
    public static func refundedShare(refunded: Int64, of amount: Int64) -> Int64? {
        guard amount > 0, refunded >= 0 else { return nil }
        guard refunded < amount else { return RefundShare.whole }
        let (product, overflow) = refunded.multipliedReportingOverflow(by: RefundShare.whole)
        return overflow ? Int64((Double(refunded) / Double(amount) * Double(RefundShare.whole)).rounded(.down)) : product / amount
    }

    /// The id of a field that is either an id or the object it names, expanded (`"pi_…"` or `{"id":"pi_…",…}`).
    static func id(_ value: JSONValue?) -> String? {
        switch value {
        case .string(let id)?: id.isEmpty ? nil : id
        case .object(let object)?: object["id"]?.stringValue
        default: nil
        }
    }
}
