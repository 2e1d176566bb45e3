import Foundation

/// Reads what a child process writes into a pipe, on a thread of its own with blocking reads until the end, and hands
/// each chunk to `received`. Not `FileHandle.readabilityHandler`: its dispatch source watches the descriptor by number,
/// and a pipe closed while the source still watches it (the process object released before the end was read) lets
/// libdispatch's event loop act on whatever descriptor reuses that number, which crashed the test process.
public enum ChildOutputReader {
    /// Starts reading the read end of `pipe` (whose write end the caller closed after giving it to the child); the
    /// thread holds the pipe until the end, when every writer has gone.
    public static func start(_ pipe: Pipe, received: @escaping @Sendable (Data) -> Void) {
        let handle = pipe.fileHandleForReading
        let thread = Thread {
            var buffer = [UInt8](repeating: 0, count: 16 * 1024)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(handle.fileDescriptor, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }
                received(Data(buffer[0..<count]))
            }
            withExtendedLifetime(pipe) {}
        }
        thread.name = "child-output"
        thread.stackSize = 256 * 1024
        thread.start()
    }
}
