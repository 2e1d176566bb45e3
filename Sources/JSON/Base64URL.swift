import Foundation

/// Base64url without padding (RFC 7515 §2), strictly: any other character, or stray bits in the last
/// character, is an error.
public enum Base64URL {
    private static let table: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, character) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8.enumerated() {
            table[Int(character)] = UInt8(index)
        }
        return table
    }()

    public static func decode(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        let count = text.count
        guard count > 0, count % 4 != 1 else { return nil }
        var output = [UInt8]()
        output.reserveCapacity(count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        let table = Self.table
        for character in text {
            let value = table[Int(character)]
            guard value != 0xFF else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        // Leftover bits must be zero (canonical encoding).
        guard accumulator & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return output
    }

    /// The bytes of a base64url string (e.g. one segment of a JWS).
    public static func decode(_ text: some StringProtocol) -> Data? {
        decode(ArraySlice(text.utf8)).map { Data($0) }
    }

    public static func encode(_ data: Data) -> String {
        var text = data.base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }
}
