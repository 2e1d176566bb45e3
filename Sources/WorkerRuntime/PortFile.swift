import Foundation
import JSON

/// The file a process names with `--http-port-file` (`IAP_HTTP_PORT_FILE`): the ports it listens on once it does, as
/// `{"http": N, "operations": N}`, so that whoever started it on port 0 (a supervisor, the harness, the tests) learns
/// them without reading its log. Written whole or not at all: a reader never sees half of it.
public enum PortFile {
    /// Writes `ports` (by endpoints: `http`, `operations`) to `path`: a file beside it, then renamed over it.
    public static func write(_ ports: [String: Int], to path: String) throws {
        let url = URL(fileURLWithPath: path)
        let partial = url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent).\(getpid())")
        try Data(JSONValue.object(ports.mapValues { .integer(Int64($0)) }).serializedText.utf8).write(to: partial)
        guard rename(partial.path, url.path) == 0 else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path, NSUnderlyingErrorKey: POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)])
        }
    }

    /// The ports in `url` by endpoints; nil while it is not written yet.
    public static func read(_ url: URL) -> [String: Int]? {
        guard let data = try? Data(contentsOf: url), let object = JSONValue.parse(Array(data))?.objectValue else { return nil }
        return object.compactMapValues { $0.int64Value.map(Int.init) }
    }
}
