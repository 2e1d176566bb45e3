import Foundation

extension Array where Element == UInt8 {
    /// The index of the first `byte` at or after `start`, or nil. Found with `memchr`: a generic search compares element
    /// by element, which over kilobytes (a JWS, a file of lines) costs more than the work done with what it finds.
    public func firstIndex(of byte: UInt8, from start: Int) -> Int? {
        withUnsafeBufferPointer { buffer in
            guard start >= 0, start < buffer.count, let base = buffer.baseAddress,
                  let found = memchr(base + start, Int32(byte), buffer.count - start) else { return nil }
            return base.distance(to: found.assumingMemoryBound(to: UInt8.self))
        }
    }
}
