import Foundation
import JSON
import Testing

/// `Base64URL.decode`: what Foundation's base64 decodes, in the URL alphabet without padding, and strictly nothing else.
struct Base64URLTests {
    private static func encoded(_ bytes: [UInt8]) -> [UInt8] {
        let standard = Data(bytes).base64EncodedString()
        return Array(standard.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "").utf8)
    }

    @Test func everyLengthDecodesToWhatWasEncoded() {
        var generator = SystemRandomNumberGenerator()
        for length in 1...67 {
            for _ in 0..<20 {
                let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
                #expect(Base64URL.decode(ArraySlice(Self.encoded(bytes))) == bytes, "\(bytes)")
            }
        }
        #expect(Base64URL.decode(ArraySlice(Self.encoded(Array(0...255)))) == Array(0...255))
    }

    @Test func anyCharacterOutsideTheAlphabetIsRefusedWherever() {
        let text = Self.encoded(Array("a signed payload of some length".utf8))
        for stray in Array("+/=. \n".utf8) + [0x00, 0x80, 0xFF] {
            for position in text.indices {
                var spoiled = text
                spoiled[position] = stray
                #expect(Base64URL.decode(ArraySlice(spoiled)) == nil, "\(stray) at \(position)")
            }
        }
    }

    @Test func impossibleLengthsAndStrayBitsAreRefused() {
        #expect(Base64URL.decode(ArraySlice([UInt8]())) == nil)
        #expect(Base64URL.decode(ArraySlice(Array("QUJDQ".utf8))) == nil) // 4n + 1 characters
        #expect(Base64URL.decode(ArraySlice(Array("QQ".utf8))) == [0x41])
        #expect(Base64URL.decode(ArraySlice(Array("QR".utf8))) == nil) // the last 4 bits must be zero
        #expect(Base64URL.decode(ArraySlice(Array("QUI".utf8))) == [0x41, 0x42])
        #expect(Base64URL.decode(ArraySlice(Array("QUJ".utf8))) == nil) // the last 2 bits must be zero
        // A slice that does not start at index 0 decodes as its own bytes.
        let framed = Array("xx.QUJD.yy".utf8)
        #expect(Base64URL.decode(framed[3..<7]) == [0x41, 0x42, 0x43])
    }
}
