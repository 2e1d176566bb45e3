import Foundation

/// Base64url without padding (RFC 7515 §2), strictly: any other character is an error.
enum Base64URL {
    static func decode(_ text: Substring) -> Data? {
        guard !text.isEmpty, text.utf8.count % 4 != 1 else { return nil }
        var standard = String()
        standard.reserveCapacity(text.utf8.count + 3)
        for character in text.utf8 {
            switch character {
            case UInt8(ascii: "-"): standard.append("+")
            case UInt8(ascii: "_"): standard.append("/")
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                standard.unicodeScalars.append(Unicode.Scalar(character))
            default: return nil
            }
        }
        standard.append(String(repeating: "=", count: (4 - standard.utf8.count % 4) % 4))
        return Data(base64Encoded: standard)
    }

    static func encode(_ data: Data) -> String {
        var text = data.base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }
}
