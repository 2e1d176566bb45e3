import CommandLineOptions
import Foundation
import Testing

/// `InputLines`: a command's input read in blocks, its lines the same as splitting the whole input, whatever the block size.
struct InputLinesTests {
    /// The lines `text` has: split at every newline byte (not Character: "\r\n" is one), the empty piece after a final
    /// newline dropped.
    static func expectedLines(_ text: String) -> [String] {
        var pieces = text.utf8.split(separator: 0x0A, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        if pieces.last == "" { pieces.removeLast() }
        return pieces
    }

    static func readLines(_ text: String, blockSize: Int) throws -> [String] {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("iap-lines-\(UUID().uuidString)")
        try Data(text.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let lines = try InputLines(path: file.path, blockSize: blockSize)
        var read: [String] = []
        while let line = try lines.next() { read.append(String(decoding: line, as: UTF8.self)) }
        return read
    }

    @Test(arguments: [1, 3, 7, 64, 1 << 20])
    func linesAcrossBlockBoundaries(blockSize: Int) throws {
        let long = String(repeating: "x", count: 200) // longer than the small blocks: the buffer grows to hold it
        let inputs = ["", "\n", "one", "one\n", "one\ntwo", "one\r\ntwo\r\n", "\n\nthree\n\n", "a\n\(long)\nb", "\(long)", "é ✓\n🙂\n"]
        for text in inputs {
            #expect(try Self.readLines(text, blockSize: blockSize) == Self.expectedLines(text), "\(text.debugDescription) in blocks of \(blockSize)")
        }
    }

    @Test func aMissingFileIsAUsageError() {
        #expect(throws: UsageError.self) { try InputLines(path: "/nonexistent/iap-lines") }
    }
}
