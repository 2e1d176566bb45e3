/// A first-in, first-out queue over an array: `removeFirst` is O(1) (a moving head), and the slots before the head are
/// reclaimed as it goes, so that a queue that is never empty under steady load (a partition's in-flight window) holds
/// only what is in it, not everything that ever passed through it.
struct FIFOQueue<Element> {
    private var slots: [Element?] = []
    private var head = 0

    var isEmpty: Bool { head == slots.count }
    var count: Int { slots.count - head }
    /// Slots held, taken or not: for tests of the reclaiming.
    var storageCount: Int { slots.count }

    mutating func append(_ element: Element) {
        if head == slots.count {
            slots.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64 && head * 2 >= slots.count {
            slots.removeFirst(head) // Amortised O(1): at least as many slots go as stay.
            head = 0
        }
        slots.append(element)
    }

    /// The oldest element, released from the queue.
    mutating func removeFirst() -> Element {
        precondition(head < slots.count, "removeFirst on an empty FIFOQueue")
        defer { head += 1 }
        let element = slots[head]!
        slots[head] = nil
        return element
    }
}
