import Foundation
import Ingest
import StoreFixtures
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
}
