import Foundation
@testable import HTTPServer
import Ingest
import RequestSigning
import Testing

/// The clock window of signed requests, at its edges.
@Suite struct RequestSignatureTests {
    static let secret = Data("s3cret".utf8)

    /// A GET of `/v1/users/u-1` signed with the timestamp `timestamp`, as the server reads it.
    static func request(signedAt timestamp: TimeInterval) -> HTTPRequest {
        let headers = RequestSignature.headers(secret: secret, method: "GET", path: "/v1/users/u-1", now: Date(timeIntervalSince1970: timestamp))
        return HTTPRequest(method: "GET", path: "/v1/users/u-1", query: nil, headers: Dictionary(uniqueKeysWithValues: headers.map { ($0.key.lowercased(), $0.value) }),
                           body: Data())
    }

    /// ±300 s either way, in whole seconds, whatever fraction of the server's current second has passed.
    @Test(arguments: [0.0, 0.25, 0.5, 0.999])
    func theWindowIsThreeHundredSecondsEitherWay(_ fraction: Double) {
        let now = Date(timeIntervalSince1970: 1_764_540_000 + fraction)
        for offset in [-300.0, -299, 0, 299, 300] {
            let verdict = RequestSignature.verify(Self.request(signedAt: 1_764_540_000 + offset), secret: Self.secret, now: now)
            #expect((try? verdict.get()) != nil, "\(offset) s at +\(fraction): \(verdict)")
        }
        for offset in [-301.0, 301, -600, 600] {
            let verdict = RequestSignature.verify(Self.request(signedAt: 1_764_540_000 + offset), secret: Self.secret, now: now)
            guard case .failure(.expired(tolerance: 300)) = verdict else {
                Issue.record("\(offset) s at +\(fraction): \(verdict)")
                continue
            }
        }
    }

    /// A secret file's bytes are the secret but for the ASCII whitespace around them (a trailing newline), as a receiver
    /// reading the same file with Python's `bytes.strip()` takes them: bytes that are not UTF-8 stay as they are.
    @Test func aSecretFileIsItsBytesLessTheWhitespaceAroundThem() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("secret-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: file) }
        let secret = Data([0xFF, 0x00, 0x20, 0xC3, 0x28, 0x85, 0xA0])
        try (Data(" \t".utf8) + secret + Data("\r\n".utf8)).write(to: file)
        #expect(SharedSecret.read(file: file.path) == secret)
        try Data(" \n".utf8).write(to: file)
        #expect(SharedSecret.read(file: file.path) == Data())
        #expect(SharedSecret.read(file: file.path + "-missing") == nil)
    }
}
