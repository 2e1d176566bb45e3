import CTrapRecord
import Foundation
import Kafka
import Synchronization

/// The message a worker had in hand when it trapped, as the trap's signal handler leaves it in a file: what tells a
/// crash the message caused (a trap: an overflow, a force unwrap, an index out of range, a bad access) from one it did
/// not (a kill, the node lost), which no signal handler sees.
public struct TrapRecord: Equatable, Sendable {
    /// The stage whose worker trapped.
    public var stage: String
    public var partition: TopicPartition
    public var offset: Int64

    public init(stage: String, partition: TopicPartition, offset: Int64) {
        self.stage = stage
        self.partition = partition
        self.offset = offset
    }

    private static let prefix = "iap-trap-record 1"

    /// One line: `iap-trap-record 1 <stage> <topic> <partition> <offset>` (stage names and topic names have no spaces).
    var line: String { "\(Self.prefix) \(stage) \(partition.topic) \(partition.partition) \(offset)\n" }

    /// The record `line` holds; nil for anything else (a record cut short by a kill, another file).
    init?(line: Substring) {
        let fields = line.split(separator: " ", omittingEmptySubsequences: false)
        guard fields.count == 6, "\(fields[0]) \(fields[1])" == Self.prefix, let partition = Int32(fields[4]), let offset = Int64(fields[5]),
              !fields[2].isEmpty, !fields[3].isEmpty else { return nil }
        self.init(stage: String(fields[2]), partition: TopicPartition(topic: String(fields[3]), partition: partition), offset: offset)
    }
}

/// Where a process keeps the record its trap handler would write, and where records of processes that trapped are read
/// back. The directory must outlive the process: in Kubernetes an `emptyDir` (a restarted container keeps it); on one
/// host any directory. Several processes may share it: each writes `<pid>.trap`, and each takes its own stage's records.
public enum TrapRecords {
    /// The directory the handler of this process writes to; nil until `install`.
    private static let installed = Mutex<String?>(nil)

    /// Installs the trap handler, writing into `directory` (created if missing). Once per process: later calls keep the
    /// first directory.
    public static func install(directory: String) throws {
        try installed.withLock { installed in
            guard installed == nil else { return }
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let path = directory + "/\(getpid()).trap"
            guard iap_trap_record_install(path) == 0 else { throw TrapRecordError("cannot install the trap handler writing \(path)") }
            installed = directory
        }
    }

    /// Runs `body` with `record` held: a trap meanwhile writes it. The caller makes sure nothing else is in hand in the
    /// process meanwhile (`HandlingGate.exclusive`), so the record names the one message that can have caused the trap.
    static func holding<T>(_ record: TrapRecord, _ body: () async throws -> T) async rethrows -> T {
        let bytes = Array(record.line.utf8)
        _ = bytes.withUnsafeBytes { iap_trap_record_hold($0.baseAddress, $0.count) }
        defer { iap_trap_record_release() }
        return try await body()
    }

    /// The records of `stage` that processes which trapped left in `directory`, each file removed once read. Files of
    /// other stages are left to their workers; unreadable ones (cut short by a kill) are removed.
    public static func collect(directory: String, stage: String) throws -> [TrapRecord] {
        guard FileManager.default.fileExists(atPath: directory) else { return [] }
        var records: [TrapRecord] = []
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) where name.hasSuffix(".trap") && name != "\(getpid()).trap" {
            let path = directory + "/" + name
            // nil: taken meanwhile by another process sharing the directory.
            guard let data = FileManager.default.contents(atPath: path) else { continue }
            let record = String(decoding: data, as: UTF8.self).split(separator: "\n").first.flatMap(TrapRecord.init(line:))
            if let record, record.stage != stage { continue }
            guard unlink(path) == 0 || errno == ENOENT else {
                throw TrapRecordError("cannot remove \(path) once read: \(String(cString: strerror(errno)))")
            }
            if let record { records.append(record) }
        }
        return records
    }
}

public struct TrapRecordError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
