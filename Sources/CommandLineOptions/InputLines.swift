#if canImport(Glibc)
import Glibc
#endif
import JSON

/// The lines of a command's input (a file, or standard input for `-`), read in blocks into one reused buffer.
///
/// Memory stays at about one block however large the input: reading a whole file first, as `--lines` once did, cost
/// a page fault per 4 KiB twice over (the file's bytes, then their copy) — a tenth of verifying the lines.
/// A line is what lies between newlines, without the newline; a last line needs none; empty lines are returned too.
public final class InputLines {
    private let descriptor: Int32
    private let closesDescriptor: Bool
    private var buffer: [UInt8]
    /// `buffer[start..<end]` holds the bytes read and not yet returned.
    private var start = 0
    private var end = 0
    private var reachedEnd = false

    /// - Parameter blockSize: bytes read at a time; a longer line grows the buffer to hold it.
    public init(path: String, blockSize: Int = 1 << 20) throws {
        if path == "-" {
            (descriptor, closesDescriptor) = (STDIN_FILENO, false)
        } else {
            let opened = open(path, O_RDONLY | O_CLOEXEC)
            guard opened >= 0 else { throw UsageError("cannot read \(path): \(String(cString: strerror(errno)))") }
            (descriptor, closesDescriptor) = (opened, true)
        }
        buffer = [UInt8](repeating: 0, count: max(1, blockSize))
    }

    deinit {
        if closesDescriptor { close(descriptor) }
    }

    /// The next line, or nil after the last. Valid until the next call (it is a slice of the reused buffer).
    public func next() throws -> ArraySlice<UInt8>? {
        while true {
            if let newline = buffer.firstIndex(of: 0x0A, in: start..<end) {
                defer { start = newline + 1 }
                return buffer[start..<newline]
            }
            if reachedEnd {
                guard start < end else { return nil }
                defer { start = end }
                return buffer[start..<end]
            }
            try fill()
        }
    }

    /// `line` without the spaces and tabs around it, nor the carriage return a CRLF file ends it with.
    public static func trimmingBlanks(_ line: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var start = line.startIndex, end = line.endIndex
        while start < end, line[start] == 0x20 || line[start] == 0x09 { start += 1 }
        while end > start, line[end - 1] == 0x20 || line[end - 1] == 0x09 || line[end - 1] == 0x0D { end -= 1 }
        return line[start..<end]
    }

    /// Moves the unreturned bytes to the front, grows the buffer if they fill it, and reads once more.
    private func fill() throws {
        let pending = end - start
        if start > 0 {
            buffer.withUnsafeMutableBufferPointer { bytes in
                if pending > 0 { memmove(bytes.baseAddress!, bytes.baseAddress! + start, pending) }
            }
            (start, end) = (0, pending)
        }
        if end == buffer.count { buffer.append(contentsOf: repeatElement(0, count: buffer.count)) }
        while true {
            let count = buffer.withUnsafeMutableBufferPointer { bytes in read(descriptor, bytes.baseAddress! + end, bytes.count - end) }
            if count > 0 {
                end += count
                return
            }
            if count == 0 {
                reachedEnd = true
                return
            }
            guard errno == EINTR else { throw UsageError("cannot read the input: \(String(cString: strerror(errno)))") }
        }
    }
}
