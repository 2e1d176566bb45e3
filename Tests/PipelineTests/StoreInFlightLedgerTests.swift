import Kafka
import Testing
import TestSupport
import WorkerApp
import WorkerRuntime

/// The in-flight marks in the store's database, on both engines: one per stage and partition, replaced as a whole.
@Suite struct StoreInFlightLedgerTests {
    @Test(arguments: StoreEngine.available) func aMarkIsReadBackAsWrittenAndReplacedWhole(_ engine: StoreEngine) async throws {
        let ledger = StoreInFlightLedger(store: try await ByteIdentityStageTests.freshStore(engine))
        let partition = TopicPartition(topic: "iap.purchase.verified", partition: 3)
        #expect(try await ledger.mark(stage: "granter", partition: partition) == nil)
        try await ledger.setMark(InFlightMark(handling: 10...19, suspect: nil), stage: "granter", partition: partition)
        try await ledger.setMark(InFlightMark(handling: 12...12, suspect: 10...19), stage: "finisher", partition: partition)
        #expect(try await ledger.mark(stage: "granter", partition: partition) == InFlightMark(handling: 10...19, suspect: nil))
        #expect(try await ledger.mark(stage: "finisher", partition: partition) == InFlightMark(handling: 12...12, suspect: 10...19))
        #expect(try await ledger.mark(stage: "granter", partition: TopicPartition(topic: "iap.purchase.verified", partition: 4)) == nil)
        try await ledger.setMark(InFlightMark(handling: nil, suspect: 10...19, culprits: [12]), stage: "finisher", partition: partition)
        #expect(try await ledger.mark(stage: "finisher", partition: partition) == InFlightMark(handling: nil, suspect: 10...19, culprits: [12]))
        try await ledger.setMark(InFlightMark(handling: 13...19, suspect: nil), stage: "finisher", partition: partition)
        #expect(try await ledger.mark(stage: "finisher", partition: partition) == InFlightMark(handling: 13...19, suspect: nil))
        // Cleared only while it is still the mark the clearing holder left: not once the next holder marked its own.
        let mine = InFlightMark(handling: 13...19, suspect: nil), cleared = InFlightMark(handling: nil, suspect: nil)
        try await ledger.replaceMark(mine, with: cleared, stage: "finisher", partition: partition)
        #expect(try await ledger.mark(stage: "finisher", partition: partition) == cleared)
        let theirs = InFlightMark(handling: 20...29, suspect: 20...29, culprits: [22])
        try await ledger.setMark(theirs, stage: "finisher", partition: partition)
        try await ledger.replaceMark(mine, with: cleared, stage: "finisher", partition: partition)
        #expect(try await ledger.mark(stage: "finisher", partition: partition) == theirs)
        try await ledger.replaceMark(theirs, with: InFlightMark(handling: nil, suspect: 20...29, culprits: [22]), stage: "finisher", partition: partition)
        #expect(try await ledger.mark(stage: "finisher", partition: partition) == InFlightMark(handling: nil, suspect: 20...29, culprits: [22]))
        // Several culprits, read back in order; replaced only while all of them are the same.
        let two = InFlightMark(handling: 30...30, suspect: 30...39, culprits: [22, 5_000_000_000])
        try await ledger.setMark(two, stage: "finisher", partition: partition)
        #expect(try await ledger.mark(stage: "finisher", partition: partition) == two)
        try await ledger.replaceMark(InFlightMark(handling: 30...30, suspect: 30...39, culprits: [22]), with: cleared, stage: "finisher", partition: partition)
        #expect(try await ledger.mark(stage: "finisher", partition: partition) == two)
        // Offsets past 32 bits, as a long-lived topic has.
        try await ledger.setMark(InFlightMark(handling: 5_000_000_000...5_000_000_127, suspect: nil), stage: "granter", partition: partition)
        #expect(try await ledger.mark(stage: "granter", partition: partition)?.handling == 5_000_000_000...5_000_000_127)
    }
}
