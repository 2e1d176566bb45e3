import Foundation
import HTTPServer
import Ingest
import StoreFixtures
import StoreVerification
import Synchronization
import Testing

/// Google's signing keys as the push authenticator holds them: a token of a key Google starts publishing is taken once
/// the keys are read again, which a token naming a key not held causes at most once a minute.
@Suite struct PubSubPushAuthenticatorTests {
    @Test func aRotatedKeyIsReadAgainAtMostOnceAMinute() async throws {
        let (old, rotated) = (try GooglePlayPushSigner(), try GooglePlayPushSigner())
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("google-certs-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: file) }
        try Data(GooglePlayPushSigner.certificatesJSON([old]).utf8).write(to: file)
        let clock = Mutex(Date())
        let now: @Sendable () -> Date = { clock.withLock { $0 } }
        let authenticator = PubSubPushAuthenticator(configuration: .init(audience: "aud", serviceAccountEmail: "push@example.iam.gserviceaccount.com"),
                                                    keys: GoogleSigningKeys(source: .file(file.path), now: now), now: now)
        func refusal(_ signer: GooglePlayPushSigner) async throws -> String? {
            await authenticator.refusal(try signer.authorization(audience: "aud", email: "push@example.iam.gserviceaccount.com", issuedAt: now()))
        }
        #expect(try await refusal(old) == nil)
        try Data(GooglePlayPushSigner.certificatesJSON([old, rotated]).utf8).write(to: file)
        #expect(try await refusal(rotated) != nil, "read a moment ago: not read again at once")
        clock.withLock { $0 = $0.addingTimeInterval(61) }
        #expect(try await refusal(rotated) == nil, "a minute on, the unknown key is looked for")
        #expect(try await refusal(old) == nil)
    }

    /// Pushes that arrive together before the keys were ever read (a worker just started; Pub/Sub delivers a backlog)
    /// all wait for the one read of a slow key URL, and are all accepted; the read is one call to Google's API, told.
    @Test func pushesArrivingTogetherWaitForTheOneReadOfTheKeys() async throws {
        let signer = try GooglePlayPushSigner()
        let reads = Mutex(0)
        let server = try HTTPServer(synchronousHandler: { _ in
            reads.withLock { $0 += 1 }
            Thread.sleep(forTimeInterval: 0.5) // a slow answer: the pushes below arrive while it is read
            return HTTPResponse(status: 200, contentType: "application/json", body: GooglePlayPushSigner.certificatesJSON([signer]))
        })
        let told = Mutex<[StoreAPIOutcome]>([])
        let keys = GoogleSigningKeys(source: .url("http://127.0.0.1:\(server.port)/certs"), observer: { outcome in told.withLock { $0.append(outcome) } })
        let authenticator = PubSubPushAuthenticator(configuration: .init(audience: "aud", serviceAccountEmail: "push@example.iam.gserviceaccount.com"),
                                                    keys: keys)
        let authorization = try signer.authorization(audience: "aud", email: "push@example.iam.gserviceaccount.com", issuedAt: Date())
        let refusals = await withTaskGroup(of: String?.self) { group in
            for _ in 0..<20 { group.addTask { await authenticator.refusal(authorization) } }
            return await group.reduce(into: [String]()) { if let refusal = $1 { $0.append(refusal) } }
        }
        #expect(refusals.isEmpty, "\(refusals)")
        #expect(reads.withLock { $0 } == 1)
        #expect(told.withLock { $0 } == [.ok])
    }
}
