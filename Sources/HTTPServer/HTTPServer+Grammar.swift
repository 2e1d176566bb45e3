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

    /// The lines of a head whose every line ends in CRLF (`strictPrefix`), without their CRLF.
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

    /// Checks the head's bytes from `start` to `end` as they arrive: every line ends in CRLF (no bare CR or LF a proxy
    /// might split on), and no byte but tab is a control character. Nil at the first byte that breaks this; else how far
    /// the bytes are known good (`end`, or a CR last in the buffer, whose LF has not arrived yet). Bytes before `start`
    /// were found good by an earlier call.
    static func strictPrefix(_ buffer: [UInt8], from start: Int, to end: Int) -> Int? {
        var index = start
        while index < end {
            switch buffer[index] {
            case 0x0A: if index == 0 || buffer[index - 1] != 0x0D { return nil }
            case 0x0D:
                if index + 1 == end { return index }
                if buffer[index + 1] != 0x0A { return nil }
            case 0x09: break
            case 0x00..<0x20, 0x7F: return nil
            default: break
            }
            index += 1
        }
        return index
    }

    /// RFC 9112 §3.2 `Host = uri-host [ ":" port ]`, by its characters: those of a registered name, an IPv4 address or
    /// a bracketed IP literal, and the colon of a port. Empty is allowed (RFC 3986 reg-name may be).
    static func isHost(_ value: String.UTF8View) -> Bool {
        value.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
            default: "-._~%!$&'()*+,;=:[]".utf8.contains(byte)
            }
        }
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
