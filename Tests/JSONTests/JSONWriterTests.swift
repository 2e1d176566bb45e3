import Foundation
import JSON
import Testing

/// `JSONValue.serialized`: valid JSON that reads back as the value, keys sorted, strings escaped as RFC 8259 says.
struct JSONWriterTests {
    static let hostile = ["", "plain", "quote \" and backslash \\", "line\nbreak\r\ttab", "\u{0}\u{1}\u{1F}\u{7F}", "/slash/",
                          "ünïcødé", "emoji 🧾", "\u{2028}\u{2029}", "\u{FEFF}bom"]

    @Test func everyValueReadsBackAsItself() throws {
        let value = JSONValue.object([
            "strings": .array(Self.hostile.map(JSONValue.string)),
            "numbers": .array([.integer(0), .integer(-42), .integer(Int64.max), .integer(Int64.min), .number(0.1), .number(-2.5e-8), .number(1e300)]),
            "literals": .array([.bool(true), .bool(false), .null]),
            "nested": .object(["b": .object(["": .array([])]), "a": .object([:])]),
        ])
        let text = value.serialized
        #expect(JSONValue.parse(text) == value)
        // An independent reader accepts it too.
        #expect((try? JSONSerialization.jsonObject(with: Data(text))) != nil)
    }

    @Test func keysAreSortedAndTheOutputIsCompact() {
        let value = JSONValue.object(["b": .integer(2), "a": .string("x/y"), "c": .array([.bool(true), .null])])
        #expect(String(decoding: value.serialized, as: UTF8.self) == #"{"a":"x/y","b":2,"c":[true,null]}"#)
    }

    @Test func controlCharactersAreEscapedAndTheRestIsLeftAsItIs() {
        #expect(String(decoding: JSONValue.string("a\"b\\c\n\u{1}é").serialized, as: UTF8.self) == #""a\"b\\c\n\u0001é""#)
    }

    @Test func numbersJSONCannotHoldBecomeNullAndIntegralDoublesLoseTheirPoint() {
        #expect(JSONValue.array([.number(.nan), .number(.infinity), .number(3.0), .number(2.5)]).serialized == Array("[null,null,3,2.5]".utf8))
        // -2^63 as a double (a hostile message can carry it): written, not a trap.
        let extreme = JSONValue.number(-9_223_372_036_854_775_808.0)
        #expect(JSONValue.parse(extreme.serialized) == extreme)
    }

    /// `serializedObject`: two names that are one text in two Unicode spellings are two members (an `.object`, keyed by
    /// `String`, holds one), in the order of their bytes; names are escaped, values written as given.
    @Test func anObjectOfMembersKeepsEverySpellingOfAName() {
        let members: [(name: String, value: [UInt8])] = [("caf\u{E9}", Array("7".utf8)), ("cafe\u{301}", Array("5".utf8)),
                                                          ("a\"b", JSONValue.object(["x": .null]).serialized)]
        let expected = Array("{\"a\\\"b\":{\"x\":null},\"cafe\u{301}\":5,\"caf\u{E9}\":7}".utf8)
        #expect(JSONValue.serializedObject(members) == expected)
        // Why it is needed: a `String`-keyed map takes the two names as one.
        #expect(Dictionary([("caf\u{E9}", 7), ("cafe\u{301}", 5)], uniquingKeysWith: { first, _ in first }).count == 1)
    }
}

/// RFC 3339 timestamps as the events and the verdicts carry them.
struct RFC3339FormatTests {
    @Test func formatsUTCWithAndWithoutMillisecondsAndReadsBack() throws {
        let date = try #require(RFC3339.parse("2026-11-29T10:15:00.250Z"))
        #expect(RFC3339.format(date) == "2026-11-29T10:15:00.250Z")
        #expect(RFC3339.format(date, milliseconds: false) == "2026-11-29T10:15:00Z")
        #expect(RFC3339.format(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
        #expect(RFC3339.format(Date(timeIntervalSince1970: 253_402_300_799)) == "9999-12-31T23:59:59.000Z")
        #expect(RFC3339.format(Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59.500Z")
        let now = Date()
        #expect(RFC3339.parse(RFC3339.format(now)).map { abs($0.timeIntervalSince(now)) < 0.001 } == true)
    }

    /// The calendar arithmetic answers as the C library does, from year 1 to 9999 and beyond, days and seconds that run over
    /// included (timegm normalizes them, and so must parsing).
    @Test func datesAgreeWithTheCLibrary() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            // Mostly years 1 to 9999, some far beyond (more digits, as many as the year has).
            let latest: Int64 = Bool.random(using: &generator) ? 253_402_300_799 : 6_000_000_000_000
            var seconds = time_t(Int64.random(in: -62_135_596_800...latest, using: &generator))
            var parts = tm()
            gmtime_r(&seconds, &parts)
            let expected = String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                                  parts.tm_hour, parts.tm_min, parts.tm_sec)
            #expect(RFC3339.format(Date(timeIntervalSince1970: TimeInterval(seconds)), milliseconds: false) == expected)

            var fields = tm()
            fields.tm_year = Int32.random(in: -1899...8099, using: &generator)
            fields.tm_mon = Int32.random(in: 0...11, using: &generator)
            fields.tm_mday = Int32.random(in: 1...31, using: &generator)
            fields.tm_hour = Int32.random(in: 0...23, using: &generator)
            fields.tm_min = Int32.random(in: 0...59, using: &generator)
            fields.tm_sec = Int32.random(in: 0...60, using: &generator)
            let text = String(format: "%04d-%02d-%02dT%02d:%02d:%02d+01:30", fields.tm_year + 1900, fields.tm_mon + 1, fields.tm_mday,
                              fields.tm_hour, fields.tm_min, fields.tm_sec)
            let parsed = try #require(RFC3339.parse(text), "\(text)")
            #expect(parsed.timeIntervalSince1970 == TimeInterval(timegm(&fields) - 5400), "\(text)")
        }
    }
}
