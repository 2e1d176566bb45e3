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
        let whole = count / 4, tail = count % 4
        let outputCount = whole * 3 + (tail == 0 ? 0 : tail - 1)
        // Four characters to three bytes at a time, straight into the result's storage; the table marks every
        // character outside the alphabet with its high bit, so one test per quartet finds any of them.
        return table.withUnsafeBufferPointer { table -> [UInt8]? in
            text.withUnsafeBufferPointer { input -> [UInt8]? in
                var valid = true
                let output = [UInt8](unsafeUninitializedCapacity: outputCount) { buffer, initialized in
                    var inIndex = 0, outIndex = 0
                    for _ in 0..<whole {
                        let a = table[Int(input[inIndex])], b = table[Int(input[inIndex + 1])]
                        let c = table[Int(input[inIndex + 2])], d = table[Int(input[inIndex + 3])]
                        if (a | b | c | d) & 0x80 != 0 { valid = false; break }
                        let quartet = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                        buffer[outIndex] = UInt8(truncatingIfNeeded: quartet >> 16)
                        buffer[outIndex + 1] = UInt8(truncatingIfNeeded: quartet >> 8)
                        buffer[outIndex + 2] = UInt8(truncatingIfNeeded: quartet)
                        inIndex += 4
                        outIndex += 3
                    }
                    if valid && tail > 0 {
                        // Two or three characters: one or two bytes, and the bits left over must be zero (canonical).
                        var accumulator: UInt32 = 0
                        for offset in 0..<tail {
                            let value = table[Int(input[inIndex + offset])]
                            if value & 0x80 != 0 { valid = false; break }
                            accumulator = accumulator << 6 | UInt32(value)
                        }
                        let bits = tail * 6, leftover = bits % 8
                        if valid && accumulator & ((1 << UInt32(leftover)) - 1) != 0 { valid = false }
                        if valid {
                            accumulator >>= UInt32(leftover)
                            for offset in 0..<(tail - 1) {
                                buffer[outIndex + offset] = UInt8(truncatingIfNeeded: accumulator >> UInt32(8 * (tail - 2 - offset)))
                            }
                            outIndex += tail - 1
                        }
                    }
                    initialized = valid ? outIndex : 0
                }
                return valid ? output : nil
            }
        }
    }

    /// The payload (middle segment) of a compact JWS as a JSON object, read without verifying anything: to tell what it is
    /// about, never to act on.
    public static func unverifiedJWSPayload(_ jws: String) -> [String: JSONValue]? {
        let segments = jws.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard segments.count == 3, let payload = decode(ArraySlice(segments[1])) else { return nil }
        return JSONValue.parse(payload)?.objectValue
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
