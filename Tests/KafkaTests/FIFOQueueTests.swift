@testable import Kafka
import Testing

/// The in-flight window's queue: first in, first out, and under steady load (never empty) it holds what is in it, not
/// everything that passed through it — each entry keeps a message and its outputs alive.
@Suite struct FIFOQueueTests {
    @Test func aQueueNeverEmptiedKeepsOnlyWhatIsInIt() {
        var queue = FIFOQueue<Int>()
        var next = 0
        var expected = 0
        for _ in 0..<64 {
            queue.append(next)
            next += 1
        }
        for _ in 0..<100_000 { // one in, one out: a full window under load
            queue.append(next)
            next += 1
            #expect(queue.removeFirst() == expected)
            expected += 1
        }
        #expect(queue.count == 64)
        #expect(queue.storageCount <= 64 * 2 + 64, "slots held: \(queue.storageCount)")
        while !queue.isEmpty {
            #expect(queue.removeFirst() == expected)
            expected += 1
        }
        #expect(expected == next)
    }
}
