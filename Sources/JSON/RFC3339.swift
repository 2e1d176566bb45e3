import Foundation

/// RFC 3339 timestamps (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`), as JSON Schema's `date-time`,
/// CloudEvents' `time` and Apple's receipts use them. Without Foundation formatters, which are
/// neither fast nor safe to share across threads.
public enum RFC3339 {
    /// The instant, or `nil` for anything that is not a valid RFC 3339 date-time.
    public static func parse(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { parse(bytes: $0) }
    }

    private static func parse(bytes: UnsafeBufferPointer<UInt8>) -> Date? {
        guard bytes.count >= 20, bytes.count <= 64 else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                guard index < bytes.count, (48...57).contains(bytes[index]) else { return nil }
                value = value * 10 + Int(bytes[index] - 48)
            }
            return value
        }
        guard let year = number(0..<4), bytes[4] == UInt8(ascii: "-"), let month = number(5..<7), bytes[7] == UInt8(ascii: "-"),
              let day = number(8..<10), bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t"),
              let hour = number(11..<13), bytes[13] == UInt8(ascii: ":"), let minute = number(14..<16), bytes[16] == UInt8(ascii: ":"),
              let second = number(17..<19), (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second <= 60
        else { return nil }
        var index = 19
        var fraction = 0.0
        if bytes[index] == UInt8(ascii: ".") {
            index += 1
            var scale = 0.1
            let start = index
            while index < bytes.count, (48...57).contains(bytes[index]) {
                fraction += Double(bytes[index] - 48) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }
        }
        guard index < bytes.count else { return nil }
        var offset = 0
        if bytes[index] == UInt8(ascii: "Z") || bytes[index] == UInt8(ascii: "z") {
            index += 1
        } else if bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
            guard index + 6 == bytes.count, bytes[index + 3] == UInt8(ascii: ":"),
                  let hours = number(index + 1..<index + 3), let minutes = number(index + 4..<index + 6), hours < 24, minutes < 60
            else { return nil }
            offset = (hours * 60 + minutes) * 60 * (bytes[index] == UInt8(ascii: "-") ? -1 : 1)
            index += 6
        } else {
            return nil
        }
        guard index == bytes.count else { return nil }
        // Day 30 of February and second 60 run over into the next day or minute, as timegm(3) lets them.
        let days = CivilDays.daysSinceEpoch(year: year, month: month, day: day)
        let seconds = ((days * 24 + hour) * 60 + minute) * 60 + second - offset
        return Date(timeIntervalSince1970: TimeInterval(seconds) + fraction)
    }

    /// `2026-11-29T10:15:00.250Z` (UTC, milliseconds), or `2026-11-29T10:15:00Z` without them.
    public static func format(_ date: Date, milliseconds includeMilliseconds: Bool = true) -> String {
        // Floored, so that a moment before 1970 falls in its own second: -0.5 s is 23:59:59.500 of the day before.
        let (wholeSeconds, milliseconds) = Int64((date.timeIntervalSince1970 * 1000).rounded(.down)).quotientAndRemainder(dividingBy: 1000)
        let seconds = Int(milliseconds < 0 ? wholeSeconds - 1 : wholeSeconds)
        let (days, secondOfDay) = seconds.quotientAndRemainder(dividingBy: 86_400)
        let (day, second) = secondOfDay < 0 ? (days - 1, secondOfDay + 86_400) : (days, secondOfDay)
        let date = CivilDays.date(daysSinceEpoch: day)
        let fraction = Int(milliseconds < 0 ? milliseconds + 1000 : milliseconds)
        // Digits by hand into the string's own storage: String(format:) costs more than the rest of a verdict line.
        return String(unsafeUninitializedCapacity: 48) { buffer in
            var count = 0
            func put(_ byte: UInt8) {
                buffer[count] = byte
                count += 1
            }
            func two(_ value: Int) {
                put(UInt8(ascii: "0") + UInt8(value / 10))
                put(UInt8(ascii: "0") + UInt8(value % 10))
            }
            // The year in at least four digits, more (and a sign) for the years an Int64 of milliseconds reaches.
            if date.year < 0 { put(UInt8(ascii: "-")) }
            let year = date.year.magnitude
            var divisor: UInt = 1000
            while divisor * 10 <= year { divisor *= 10 }
            while divisor > 0 {
                put(UInt8(ascii: "0") + UInt8(year / divisor % 10))
                divisor /= 10
            }
            put(UInt8(ascii: "-"))
            two(date.month)
            put(UInt8(ascii: "-"))
            two(date.day)
            put(UInt8(ascii: "T"))
            two(second / 3600)
            put(UInt8(ascii: ":"))
            two(second / 60 % 60)
            put(UInt8(ascii: ":"))
            two(second % 60)
            if includeMilliseconds {
                put(UInt8(ascii: "."))
                put(UInt8(ascii: "0") + UInt8(fraction / 100))
                two(fraction % 100)
            }
            put(UInt8(ascii: "Z"))
            return count
        }
    }

    /// The proleptic Gregorian calendar in days since 1970-01-01, by arithmetic on 400-year eras (146,097 days each,
    /// counted from March so that a leap day ends its year): what timegm(3) and gmtime_r(3) compute, without their
    /// cost in every date of every message.
    enum CivilDays {
        static func daysSinceEpoch(year: Int, month: Int, day: Int) -> Int {
            let marchYear = month <= 2 ? year - 1 : year
            let era = (marchYear >= 0 ? marchYear : marchYear - 399) / 400
            let yearOfEra = marchYear - era * 400
            let dayOfYear = (153 * ((month + 9) % 12) + 2) / 5 + day - 1
            let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
            return era * 146_097 + dayOfEra - 719_468
        }

        static func date(daysSinceEpoch days: Int) -> (year: Int, month: Int, day: Int) {
            let shifted = days + 719_468
            let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
            let dayOfEra = shifted - era * 146_097
            let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
            let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
            let marchMonth = (5 * dayOfYear + 2) / 153
            let month = marchMonth < 10 ? marchMonth + 3 : marchMonth - 9
            return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, dayOfYear - (153 * marchMonth + 2) / 5 + 1)
        }
    }
}
