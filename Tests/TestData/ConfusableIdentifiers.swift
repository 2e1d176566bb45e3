/// Identifiers that Swift's `String` takes as equal, or that only look alike, while their UTF-8 bytes differ: what any
/// client (or attacker) may choose as a user or transaction id. The broker and the databases take each spelling as a
/// different id, so the pipeline must too.
public enum ConfusableIdentifiers {
    /// Groups of spellings; within a group the bytes of every spelling differ.
    public static let groups: [[String]] = [
        ["caf\u{E9}", "cafe\u{301}"], // é precomposed, and e with a combining acute: canonically equivalent
        ["Kevin", "\u{212A}evin"], // KELVIN SIGN: canonically a Latin K, so an ASCII id has a twin
        ["a;b", "a\u{37E}b"], // GREEK QUESTION MARK: canonically a semicolon
        ["\u{C5}sa", "\u{212B}sa", "A\u{30A}sa"], // Å precomposed, ANGSTROM SIGN, A with a combining ring
        ["a\u{301}\u{323}", "a\u{323}\u{301}", "\u{1EA1}\u{301}"], // combining marks in either order (canonical ordering), ạ with an acute
        ["\u{D55C}", "\u{1112}\u{1161}\u{11AB}"], // a Hangul syllable and its jamo
        ["\u{FB01}le", "file"], // the ligature ﬁ: compatibility-equivalent only
        ["\u{FF55}ser", "user"], // fullwidth u: compatibility-equivalent only
        ["User", "user", "USER"], // case
        ["\u{1F469}\u{200D}\u{1F469}\u{200D}\u{1F467}", "\u{1F469}\u{1F469}\u{1F467}"], // an emoji family with and without joiners
        ["\u{1F44D}\u{1F3FD}", "\u{1F44D}"], // with and without a skin tone
        [String(repeating: "\u{E9}", count: 85), String(repeating: "e\u{301}", count: 85)], // long: 170 and 255 bytes, canonically equal
    ]

    /// Every spelling of every group.
    public static var all: [String] { groups.flatMap { $0 } }
}

/// A reproducible source of randomness for tests that draw their cases (SplitMix64): a failing seed can be run again.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
