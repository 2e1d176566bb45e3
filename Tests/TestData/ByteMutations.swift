/// One to four random edits of `input`, for fuzzing a decoder: flip a bit, overwrite, insert, delete, truncate, duplicate
/// a span. New bytes come from `alphabet` when given (edits a parser reads further into), else from all 256.
public func mutate<Generator: RandomNumberGenerator>(_ input: [UInt8], alphabet: [UInt8]?, using rng: inout Generator) -> [UInt8] {
    var bytes = input
    for _ in 0..<Int.random(in: 1...4, using: &rng) {
        guard !bytes.isEmpty else { bytes = [0]; continue }
        let position = Int.random(in: 0..<bytes.count, using: &rng)
        let byte = alphabet?.randomElement(using: &rng) ?? UInt8.random(in: 0...255, using: &rng)
        switch Int.random(in: 0..<6, using: &rng) {
        case 0: bytes[position] ^= UInt8(1) << UInt8.random(in: 0..<8, using: &rng)
        case 1: bytes[position] = byte
        case 2: bytes.insert(byte, at: position)
        case 3: bytes.remove(at: position)
        case 4: bytes.removeLast(Int.random(in: 0...(bytes.count - position), using: &rng))
        default:
            let end = min(bytes.count, position + Int.random(in: 1...16, using: &rng))
            bytes.insert(contentsOf: bytes[position..<end], at: position)
        }
    }
    return bytes
}
