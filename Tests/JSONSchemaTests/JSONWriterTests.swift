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
}
