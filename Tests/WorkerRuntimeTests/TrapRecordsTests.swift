import Foundation
import Kafka
import Testing
@testable import WorkerRuntime

/// The records trapping workers leave, read back by the next process of their stage.
@Suite struct TrapRecordsTests {
    @Test func aRecordReadsBackAsWritten() {
        let record = TrapRecord(stage: "granter", partition: TopicPartition(topic: "iap.user.adjustment", partition: 3), offset: 9_223_372_036_854_775_807)
        #expect(record.line == "iap-trap-record 1 granter iap.user.adjustment 3 9223372036854775807\n")
        #expect(TrapRecord(line: record.line.dropLast()) == record)
        // Cut short by a kill, or not a record.
        #expect(TrapRecord(line: "iap-trap-record 1 granter iap.user.adjustment 3") == nil)
        #expect(TrapRecord(line: "iap-trap-record 1 granter iap.user.adjustment 3 9223372036854775808") == nil)
        #expect(TrapRecord(line: "iap-trap-record 2 granter iap.user.adjustment 3 4") == nil)
        #expect(TrapRecord(line: "") == nil)
    }

    /// A process takes its own stage's records and removes them; another stage's stay for its workers; a file cut short is
    /// removed; the directory may not exist yet.
    @Test func eachStageTakesItsOwnRecordsOnce() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("trap-records-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(try TrapRecords.collect(directory: directory, stage: "granter").isEmpty)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let granter = TrapRecord(stage: "granter", partition: TopicPartition(topic: "iap.purchase.verified", partition: 0), offset: 41)
        let verifier = TrapRecord(stage: "verifier", partition: TopicPartition(topic: "iap.purchase.submitted", partition: 2), offset: 7)
        try granter.line.write(toFile: directory + "/100.trap", atomically: false, encoding: .utf8)
        try verifier.line.write(toFile: directory + "/101.trap", atomically: false, encoding: .utf8)
        try "iap-trap-record 1 granter iap.purchase.verif".write(toFile: directory + "/102.trap", atomically: false, encoding: .utf8)
        try "not a record".write(toFile: directory + "/notes.txt", atomically: false, encoding: .utf8)

        #expect(try TrapRecords.collect(directory: directory, stage: "granter") == [granter])
        #expect(try TrapRecords.collect(directory: directory, stage: "granter").isEmpty, "taken once")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).sorted() == ["101.trap", "notes.txt"])
        #expect(try TrapRecords.collect(directory: directory, stage: "verifier") == [verifier])
    }
}
