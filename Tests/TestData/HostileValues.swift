/// Values at and beyond the bounds a producer contract sets, drawn from a seeded generator, for the hostile-input runs:
/// integer extremes and bounds ± 1, empty and longest strings, one text in every Unicode normalisation form, confusable
/// and invisible characters; and the bytes of a JSON document broken the ways a client or a broken producer breaks it.
public enum HostileValues {
    /// Spellings of one text in NFC, NFD, NFKC and NFKD (written out: Foundation's normalisation is not what is tested),
    /// with confusables and invisible characters: each differs from the others by its bytes.
    public static let spellings: [String] = ConfusableIdentifiers.all + [
        "caf\u{E9}", "cafe\u{301}", // NFC, NFD
        "\u{FB01}", "fi", // ﬁ: NFC/NFD keep it, NFKC/NFKD make it "fi"
        "\u{C5}", "A\u{30A}", "\u{212B}", // Å: NFC, NFD, the ANGSTROM SIGN (NFC makes it Å)
        "\u{1E9B}\u{323}", "\u{17F}\u{323}\u{307}", "\u{1E69}", "s\u{323}\u{307}", // ẛ̣ in its four forms
        "p\u{430}ypal", "paypal", // a Cyrillic а
        "user\u{200D}", "user\u{200B}", "\u{FEFF}user", "us\u{AD}er", // joiner, zero-width space, BOM, soft hyphen
        "\u{202E}resu", "\u{0}", "a\u{0}b", "\u{7F}", "\u{1B}[31m", "\r\n", "\t", " ", " user ", // bidi override, controls, blanks
        "\u{10FFFF}", "\u{FFFD}", "\u{1F600}", "\u{E000}", // the last scalar, the replacement character, an emoji, private use
        "\"", "\\", "'; DROP TABLE balances; --", "%00", "%2F", "../..", "/", "?", "#", "{}", "null",
    ]

    /// A hostile string: empty, one of `spellings`, `limit` bytes exactly, one byte more, or far more (`limit` is the
    /// contract's longest, in UTF-8 bytes).
    public static func string<Generator: RandomNumberGenerator>(limit: Int, using rng: inout Generator) -> String {
        switch Int.random(in: 0..<10, using: &rng) {
        case 0: return ""
        case 1: return String(repeating: "a", count: limit)
        case 2: return String(repeating: "a", count: limit + 1)
        case 3: return String(repeating: "\u{E9}", count: limit / 2) + (limit % 2 == 1 ? "a" : "") // 2-byte scalars up to the limit
        case 4: return String(repeating: "e\u{301}", count: limit / 3 + 1) // just past it, in combining marks
        case 5: return String(repeating: "x", count: limit * 64)
        default: return spellings.randomElement(using: &rng) ?? ""
        }
    }

    /// A hostile integer: 0, ±1, the type's extremes, or `bounds` and one past each end.
    public static func integer<Generator: RandomNumberGenerator>(bounds: ClosedRange<Int64>, using rng: inout Generator) -> Int64 {
        let candidates: [Int64] = [0, 1, -1, .min, .max, .min + 1, .max - 1, bounds.lowerBound, bounds.upperBound,
                                   bounds.lowerBound == .min ? .min : bounds.lowerBound - 1, bounds.upperBound == .max ? .max : bounds.upperBound + 1,
                                   Int64(Int32.max), Int64(Int32.min), 1 << 53, -(1 << 53), (1 << 53) + 1]
        return candidates.randomElement(using: &rng) ?? 0
    }

    /// `document` (a JSON object's bytes) broken: truncated, padded past any limit, nested deeper than any parser takes,
    /// a member repeated with another value, a value of the wrong type, its UTF-8 broken, or a few random edits.
    public static func brokenJSON<Generator: RandomNumberGenerator>(_ document: [UInt8], using rng: inout Generator) -> [UInt8] {
        let brace = document.firstIndex(of: UInt8(ascii: "{")).map { $0 + 1 }
        switch Int.random(in: 0..<9, using: &rng) {
        case 0: return Array(document.prefix(Int.random(in: 0..<max(1, document.count), using: &rng)))
        case 1: return document + Array(repeating: UInt8(ascii: " "), count: 1 << Int.random(in: 10...21, using: &rng))
        case 2:
            guard let brace else { return document }
            let depth = Int.random(in: 100...5_000, using: &rng)
            let deep = Array("\"deep\":".utf8) + Array(repeating: UInt8(ascii: "["), count: depth) + Array(repeating: UInt8(ascii: "]"), count: depth) + [UInt8(ascii: ",")]
            return Array(document[..<brace]) + deep + Array(document[brace...])
        case 3:
            // The first member again, with another value: which one a reader keeps is the question.
            guard let brace, let colon = document[brace...].firstIndex(of: UInt8(ascii: ":")) else { return document }
            return Array(document[..<brace]) + Array(document[brace...colon]) + Array("12345,".utf8) + Array(document[brace...])
        case 4:
            // A string value made a number, an object, null or an array.
            guard let quote = document.indices.filter({ document[$0] == UInt8(ascii: ":") }).randomElement(using: &rng) else { return document }
            let replacement = [Array("0".utf8), Array("{}".utf8), Array("null".utf8), Array("[]".utf8), Array("-1e309".utf8), Array("true".utf8)]
                .randomElement(using: &rng) ?? []
            let end = document[(quote + 1)...].firstIndex { $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "}") } ?? document.endIndex
            return Array(document[...quote]) + replacement + Array(document[end...])
        case 5: return document.map { $0 == UInt8(ascii: "e") ? 0xC3 : $0 } // a lead byte without its continuation
        case 6: return [0xEF, 0xBB, 0xBF] + document // a byte order mark
        case 7: return Array("[".utf8) + document + Array("]".utf8)
        default: return mutate(document, alphabet: Array("{}[]\":,0123456789-.eE\\u".utf8), using: &rng)
        }
    }
}
