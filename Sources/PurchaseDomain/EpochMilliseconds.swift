import Foundation

/// Times as stores send them and the store keeps them: milliseconds since 1970. What comes from outside is
/// range-checked (1970 through 9999), so that no later conversion back to an integer can trap on an extreme value.
public enum EpochMilliseconds {
    /// 9999-12-31T23:59:59.999Z.
    public static let latest: Int64 = 253_402_300_799_999

    /// `latest` as a date: the last an event's timestamp can name.
    public static let latestDate = Date(timeIntervalSince1970: Double(latest) / 1000)

    /// The date of an external timestamp; nil outside 1970…9999.
    public static func date(_ milliseconds: Int64) -> Date? {
        (0...latest).contains(milliseconds) ? Date(timeIntervalSince1970: Double(milliseconds) / 1000) : nil
    }

    /// A date as milliseconds, clamped to what `Int64` holds (a date from `date(_:)` is never clamped).
    public static func milliseconds(_ date: Date) -> Int64 {
        let value = (date.timeIntervalSince1970 * 1000).rounded()
        guard value.isFinite else { return value > 0 ? .max : .min }
        return Int64(exactly: value) ?? (value > 0 ? .max : .min)
    }
}
