import Foundation

/// The request head's grammar, held strictly where a proxy in front could read another request boundary.
extension HTTPServer {
    /// Where the head ends in `buffer` (the index of its blank line's CRLFCRLF), looking from `start`.
    static func headEnd(_ buffer: [UInt8], from start: Int) -> Int? {
        var index = start
        while index + 3 < buffer.count {
            if buffer[index] == 13 && buffer[index + 1] == 10 && buffer[index + 2] == 13 && buffer[index + 3] == 10 { return index }
            index += 1
        }
        return nil
    }

    /// The lines of a head whose every line ends in CRLF (`linesAreStrict`), without their CRLF.
    static func lines(_ head: ArraySlice<UInt8>) -> [ArraySlice<UInt8>] {
        var lines: [ArraySlice<UInt8>] = []
        var start = head.startIndex
        var index = head.startIndex
        while index < head.endIndex {
            if head[index] == 13 {
                lines.append(head[start..<index])
                index += 2
                start = index
            } else {
                index += 1
            }
        }
        lines.append(head[start..<head.endIndex])
        return lines
    }

    /// Headers that may appear once only.
    static let singleHeaders: Set = ["content-length", "transfer-encoding", "host", "authorization", "content-type"]

    /// Every line of the head ends in CRLF (no bare CR or LF a proxy might split on), and no byte but tab is a
    /// control character.
    static func linesAreStrict(_ head: ArraySlice<UInt8>) -> Bool {
        var previous: UInt8 = 0
        var index = head.startIndex
        while index < head.endIndex {
            let byte = head[index]
            switch byte {
            case 0x0A: if previous != 0x0D { return false }
            case 0x0D: if index + 1 >= head.endIndex || head[index + 1] != 0x0A { return false }
            case 0x09: break
            case 0x00..<0x20, 0x7F: return false
            default: break
            }
            previous = byte
            index += 1
        }
        return true
    }

    /// RFC 9110 token: one or more of ALPHA, DIGIT and ``!#$%&'*+-.^_`|~``.
    static func isToken(_ text: ArraySlice<UInt8>) -> Bool {
        !text.isEmpty && text.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
            default: "!#$%&'*+-.^_`|~".utf8.contains(byte)
            }
        }
    }
}
