import Foundation

/// RFC 3339 timestamps (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`), as JSON Schema's `date-time`,
/// CloudEvents' `time` and Apple's receipts use them. Without Foundation formatters, which are
/// neither fast nor safe to share across threads.
public enum RFC3339 {
    /// The instant, or `nil` for anything that is not a valid RFC 3339 date-time.
    public static func parse(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
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
        var components = tm()
        components.tm_year = Int32(year - 1900)
        components.tm_mon = Int32(month - 1)
        components.tm_mday = Int32(day)
        components.tm_hour = Int32(hour)
        components.tm_min = Int32(minute)
        components.tm_sec = Int32(second)
        return Date(timeIntervalSince1970: TimeInterval(timegm(&components) - offset) + fraction)
    }

    /// `2026-11-29T10:15:00.250Z` (UTC, milliseconds), or `2026-11-29T10:15:00Z` without them.
    public static func format(_ date: Date, milliseconds includeMilliseconds: Bool = true) -> String {
        // Floored, so that a moment before 1970 falls in its own second: -0.5 s is 23:59:59.500 of the day before.
        let (wholeSeconds, milliseconds) = Int64((date.timeIntervalSince1970 * 1000).rounded(.down)).quotientAndRemainder(dividingBy: 1000)
        var seconds = time_t(milliseconds < 0 ? wholeSeconds - 1 : wholeSeconds)
        var components = tm()
        gmtime_r(&seconds, &components)
        // Digits by hand: String(format:) costs more than the rest of a verdict line.
        var text: [UInt8] = []
        text.reserveCapacity(24)
        func digits(_ value: Int, _ width: Int) {
            if value < 0 { text.append(UInt8(ascii: "-")) }
            var magnitude = value.magnitude
            var count = 1
            var rest = magnitude / 10
            while rest > 0 {
                count += 1
                rest /= 10
            }
            // Zeros to the width, then the digits written over them from the right.
            text += repeatElement(UInt8(ascii: "0"), count: max(width, count))
            var index = text.count - 1
            while magnitude > 0 {
                text[index] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                index -= 1
            }
        }
        digits(Int(components.tm_year) + 1900, 4)
        text.append(UInt8(ascii: "-"))
        digits(Int(components.tm_mon) + 1, 2)
        text.append(UInt8(ascii: "-"))
        digits(Int(components.tm_mday), 2)
        text.append(UInt8(ascii: "T"))
        digits(Int(components.tm_hour), 2)
        text.append(UInt8(ascii: ":"))
        digits(Int(components.tm_min), 2)
        text.append(UInt8(ascii: ":"))
        digits(Int(components.tm_sec), 2)
        if includeMilliseconds {
            text.append(UInt8(ascii: "."))
            digits(Int(milliseconds < 0 ? milliseconds + 1000 : milliseconds), 3)
        }
        text.append(UInt8(ascii: "Z"))
        return String(decoding: text, as: UTF8.self)
    }
}
