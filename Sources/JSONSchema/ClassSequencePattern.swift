import Foundation

/// A `pattern` made only of anchored character classes (or single characters) with quantifiers — `^[0-9a-f]{64}$`,
/// `^[A-Za-z0-9_.]+$`, `^[^/]+$`, `^[a-zA-Z][a-zA-Z0-9]*$`, `^[^\u0000-\u001F\u007F]*$`, the kind event schemas use for
/// ids — matched over Unicode scalars without a regular-expression engine (NSRegularExpression bridges every string
/// it is asked about to UTF-16 first). `init` answers nil for any other pattern; the validator then uses
/// NSRegularExpression. `$` is the end of the text, as in ECMA-262 which JSON Schema names, not also the place before
/// a final line break as ICU reads it: an id ending in a newline does not match `^[^\u0000-\u001F]*$`.
struct ClassSequencePattern: Sendable {
    struct Element: Sendable {
        var ranges: [ClosedRange<UInt32>]
        var negated: Bool
        var minimum: Int
        var maximum: Int

        func contains(_ scalar: UInt32) -> Bool { ranges.contains { $0.contains(scalar) } != negated }
    }

    let elements: [Element]

    init?(_ pattern: String) {
        let scalars = Array(pattern.unicodeScalars.map(\.value))
        guard scalars.count >= 2, scalars.first == 0x5E, scalars.last == 0x24 else { return nil } // ^ … $
        var index = 1
        let end = scalars.count - 1
        var elements: [Element] = []

        /// One character of a class or a literal: itself, `\uXXXX`, or an escaped punctuation character. Outside a
        /// class the characters with a meaning of their own (`.`, `(`, `|`, …) are declined; inside one only `[`.
        func character(inClass: Bool) -> UInt32? {
            guard index < end else { return nil }
            let scalar = scalars[index]
            index += 1
            let special: [UInt32] = inClass ? [0x5B] : [0x28, 0x29, 0x2A, 0x2B, 0x2E, 0x3F, 0x7B, 0x7C, 0x7D, 0x5B, 0x5D, 0x5E, 0x24]
            guard scalar == 0x5C else { return special.contains(scalar) ? nil : scalar }
            guard index < end else { return nil }
            let escaped = scalars[index]
            index += 1
            if escaped == 0x75 { // \uXXXX
                guard index + 4 <= end, let value = UInt32(String(String.UnicodeScalarView(scalars[index..<index + 4].compactMap(Unicode.Scalar.init))), radix: 16),
                      !(0xD800...0xDFFF).contains(value) // a surrogate: ICU may pair two escapes into one character
                else { return nil }
                index += 4
                return value
            }
            // Only punctuation escapes stand for themselves (\d, \w, \s … are classes of their own: not handled).
            guard let character = Unicode.Scalar(escaped), character.properties.isPatternSyntax else { return nil }
            return escaped
        }

        while index < end {
            var element = Element(ranges: [], negated: false, minimum: 1, maximum: 1)
            if scalars[index] == 0x5B { // [
                index += 1
                if index < end, scalars[index] == 0x5E { element.negated = true; index += 1 }
                if index < end, scalars[index] == 0x3A { return nil } // `[:alpha:]`: a POSIX class to ICU
                while index < end, scalars[index] != 0x5D {
                    guard let low = character(inClass: true) else { return nil }
                    if index + 1 < end, scalars[index] == 0x2D, scalars[index + 1] != 0x5D { // a-b
                        index += 1
                        guard let high = character(inClass: true), low <= high else { return nil }
                        element.ranges.append(low...high)
                    } else {
                        element.ranges.append(low...low)
                    }
                }
                guard index < end, !element.ranges.isEmpty else { return nil }
                index += 1 // ]
            } else {
                guard let literal = character(inClass: false) else { return nil }
                element.ranges = [literal...literal]
            }
            if index < end {
                switch scalars[index] {
                case 0x2B: element.maximum = .max; index += 1 // +
                case 0x2A: element.minimum = 0; element.maximum = .max; index += 1 // *
                case 0x3F: element.minimum = 0; index += 1 // ?
                case 0x7B: // {n} or {n,m}
                    guard let close = scalars[index...].firstIndex(of: 0x7D), close < end else { return nil }
                    let bounds = String(String.UnicodeScalarView(scalars[(index + 1)..<close].compactMap(Unicode.Scalar.init)))
                        .split(separator: ",", omittingEmptySubsequences: false)
                    guard let low = Int(bounds[0]), bounds.count <= 2 else { return nil }
                    let high = bounds.count == 2 ? Int(bounds[1]) : low
                    guard let high, low <= high else { return nil }
                    (element.minimum, element.maximum) = (low, high)
                    index = close + 1
                default: break
                }
            }
            elements.append(element)
        }
        self.elements = elements
    }

    /// Whether the whole of `text` matches.
    func matches(_ text: String) -> Bool {
        // One class repeated (most patterns: `^[^\u0000-\u001F]*$`, `^[A-Za-z0-9_.]+$`): a walk through the text, with
        // none of the arrays the general case keeps, which were made at every id of every message.
        if elements.count == 1 {
            let element = elements[0]
            var count = 0
            for scalar in text.unicodeScalars {
                guard count < element.maximum, element.contains(scalar.value) else { return false }
                count += 1
            }
            return count >= element.minimum
        }
        let scalars = Array(text.unicodeScalars.map(\.value))
        // The positions the elements so far can end at (several when a class and the next one overlap).
        var reachable = [Bool](repeating: false, count: scalars.count + 1)
        reachable[0] = true
        for element in elements {
            var next = [Bool](repeating: false, count: scalars.count + 1)
            var any = false
            for start in 0...scalars.count where reachable[start] {
                var length = 0
                while true {
                    if length >= element.minimum { next[start + length] = true; any = true }
                    guard length < element.maximum, start + length < scalars.count, element.contains(scalars[start + length]) else { break }
                    length += 1
                }
            }
            guard any else { return false }
            reachable = next
        }
        return reachable[scalars.count]
    }
}
