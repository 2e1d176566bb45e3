import Foundation
import Kafka
import Testing

/// Header values as text: UTF-8 both ways, and a value that is not UTF-8 read as no text at all.
struct KafkaHeaderTests {
    @Test func textReadsBackAsWritten() {
        for text in ["", "1.0", "iap.item.granted.v1", "ünïcødé 🧾", "\u{0}\u{7F}", String(repeating: "x", count: 100)] {
            let header = KafkaHeader(key: "ce_type", string: text)
            #expect(header.value == Data(text.utf8))
            #expect(header.stringValue == text)
        }
    }

    @Test func bytesThatAreNotUTF8AreNoText() {
        for bytes: [UInt8] in [[0xFF], [0x61, 0xC3], [0xED, 0xA0, 0x80], [0x31, 0x2E, 0x30, 0x80]] {
            #expect(KafkaHeader(key: "ce_specversion", value: Data(bytes)).stringValue == nil, "\(bytes)")
        }
        #expect(KafkaHeader(key: "ce_id", value: nil).stringValue == nil)
    }
}
