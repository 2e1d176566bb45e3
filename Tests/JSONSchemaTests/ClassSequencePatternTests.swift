import Foundation
@testable import JSONSchema
import Testing

/// The regular-expression-free matcher answers as NSRegularExpression does (with `$` as the end of the text, `\z` to
/// ICU), on the schemas' patterns and on patterns whose classes overlap (so that a greedy match alone would be wrong),
/// and declines every pattern it cannot match.
@Suite struct ClassSequencePatternTests {
    static let patterns = [
        "^[0-9a-f]{64}$", "^[A-Za-z0-9_.]+$", "^[^/]+$", #"^[^\u0000-\u001F\u007F]*$"#, "^[a-zA-Z][a-zA-Z0-9]*$",
        "^[a-c][b-d]*c$", "^a?b{2,3}$", "^[ab]{2,3}$", "^[ab]?$", #"^x\.y[\-/]*$"#, "^[ab]{0,2}[bc]{1,2}$",
    ]
    static let alphabet: [Character] = ["a", "b", "c", "d", "f", "x", "y", "A", "Z", "0", "9", ".", "_", "-", "/", "\u{0}", "\u{1F}", "\u{7F}", " ", "é", "🪙",
                                        "\n", "\r"]

    @Test(arguments: patterns) func answersAsNSRegularExpression(_ pattern: String) throws {
        let compiled = try #require(ClassSequencePattern(pattern))
        let regex = try NSRegularExpression(pattern: String(pattern.dropLast()) + #"\z"#)
        var generator = SystemRandomNumberGenerator()
        var samples = ["", "a", "bb", "abc", "acc", "bbb", "x.y", "x.y-/", String(repeating: "f", count: 64), String(repeating: "f", count: 65),
                       "abc\n", "id\r\n"]
        for _ in 0..<3_000 {
            let length = Int.random(in: 0...70, using: &generator)
            samples.append(String((0..<length).map { _ in length > 8 && Bool.random() ? "a" : Self.alphabet.randomElement(using: &generator)! }))
        }
        for text in samples {
            let expected = regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
            #expect(compiled.matches(text) == expected, "\(pattern) on \(text.debugDescription)")
        }
    }

    @Test func patternsBeyondAnchoredClassesAreLeftToTheRegularExpressionEngine() {
        for pattern in ["^(a|b)$", #"^\d+$"#, "a+", "^.*$", "^[a-z]+", "^[]$", "^[z-a]$", "^a{2,1}$", "^a|b$", "^[:alpha:]+$", "^[^:a]$",
                        #"^[\uD83D\uDE00]$"#, "^a{2,}$"] {
            #expect(ClassSequencePattern(pattern) == nil, "\(pattern)")
        }
    }
}
