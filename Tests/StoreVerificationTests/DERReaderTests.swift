@testable import StoreVerification
import Testing

/// Receipt integers (attribute types, quantities) are non-negative and fit in Int64, or the receipt is malformed:
/// none is read as another number.
@Suite struct DERReaderTests {
    @Test func anIntegerBeyondInt64IsMalformedNotWrapped() throws {
        #expect(try DERReader.integer([0x06, 0xA5]) == 1701)
        #expect(try DERReader.integer([0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]) == Int64.max)
        #expect(throws: DERReader.Malformed.self, "2^64 + 1701, not 1701") { try DERReader.integer([0x01, 0, 0, 0, 0, 0, 0, 0x06, 0xA5]) }
        #expect(throws: DERReader.Malformed.self, "2^63") { try DERReader.integer([0x00, 0x80, 0, 0, 0, 0, 0, 0, 0]) }
        #expect(throws: DERReader.Malformed.self, "negative") { try DERReader.integer([0x80]) }
    }
}
