import Foundation

extension Array where Element == UInt8 {
    /// The index of the first `byte` at or after `start`, or nil. Found with `memchr`: a generic search compares element
    /// by element, which over kilobytes (a JWS, a file of lines) costs more than the work done with what it finds.
    public func firstIndex(of byte: UInt8, from start: Int) -> Int? {
        start < count ? firstIndex(of: byte, in: start..<count) : nil
    }

    /// The same within `range` (clamped to the array).
    public func firstIndex(of byte: UInt8, in range: Range<Int>) -> Int? {
        withUnsafeBufferPointer { buffer in
            let range = range.clamped(to: 0..<buffer.count)
            guard !range.isEmpty, let base = buffer.baseAddress,
                  let found = memchr(base + range.lowerBound, Int32(byte), range.count) else { return nil }
            return base.distance(to: found.assumingMemoryBound(to: UInt8.self))
        }
    }
}
