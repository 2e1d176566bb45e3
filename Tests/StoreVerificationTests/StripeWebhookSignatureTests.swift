import Crypto
import Foundation
import StoreFixtures
import StoreVerification
import Testing

/// `Stripe-Signature` as Stripe signs webhook deliveries (`StripeWebhookSigner`): which deliveries are taken, and why the
/// others are refused. The clock is the test's.
@Suite struct StripeWebhookSignatureTests {
    static let body = Data(#"{"id":"evt_1","object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_test_1"}}}"#.utf8)
    static let sent = Date(timeIntervalSince1970: 1_764_400_000)

    static func checker(_ secrets: [String], at date: Date = sent, tolerance: TimeInterval = 300) throws -> StripeWebhookSignature {
        try StripeWebhookSignature(secrets: secrets, tolerance: tolerance, now: { date })
    }

    @Test func aDeliverySignedWithTheEndpointSecretIsTaken() throws {
        let signer = StripeWebhookSigner()
        let header = signer.header(for: Self.body, at: Self.sent)
        #expect(header.hasPrefix("t=1764400000,v1="))
        #expect(try Self.checker(signer.secrets).refusal(header: header, body: Self.body) == nil)
    }

    /// The signature is HMAC-SHA-256 under the secret's bytes of `t`, a dot and the body, in hex: built here from those
    /// parts, not by the signer, so that the two cannot share a mistake.
    @Test func theSignatureIsTheHMACOfTheTimestampADotAndTheBody() throws {
        let secret = StripeWebhookSigner.newSecret()
        let mac = hmacSHA256(key: Data(secret.utf8), data: Data("1764400000.".utf8) + Self.body)
        let checker = try Self.checker([secret])
        #expect(checker.refusal(header: "t=1764400000,v1=" + mac.lowercaseHex, body: Self.body) == nil)
        #expect(checker.refusal(header: "t=1764400000,v1=" + mac.lowercaseHex.uppercased(), body: Self.body) == nil, "hex of either case")
        let withoutDot = hmacSHA256(key: Data(secret.utf8), data: Data("1764400000".utf8) + Self.body)
        #expect(checker.refusal(header: "t=1764400000,v1=" + withoutDot.lowercaseHex, body: Self.body) == .mismatch)
    }

    /// While an endpoint's secret is rolled Stripe signs with the old and the new one: a delivery with either signature
    /// is taken by a checker configured with both, one signed only by a secret not configured is not.
    @Test func duringARollEitherSecretIsTaken() throws {
        let old = StripeWebhookSigner.newSecret(), new = StripeWebhookSigner.newSecret(), other = StripeWebhookSigner.newSecret()
        let checker = try Self.checker([new, old])
        for signers in [[old], [new], [old, new], [new, old], [other, new]] {
            let header = StripeWebhookSigner(secrets: signers).header(for: Self.body, at: Self.sent)
            #expect(checker.refusal(header: header, body: Self.body) == nil, "\(signers.count) signatures")
        }
        #expect(checker.refusal(header: StripeWebhookSigner(secrets: [other]).header(for: Self.body, at: Self.sent), body: Self.body) == .mismatch)
        #expect(try Self.checker([new]).refusal(header: StripeWebhookSigner(secrets: [old]).header(for: Self.body, at: Self.sent), body: Self.body) == .mismatch,
                "once the old secret is dropped its signatures are refused")
    }

    /// `t` within the tolerance either way of the clock, in whole seconds: 300 s is in, 301 s is not.
    @Test(arguments: [(0.0, true), (-300, true), (300, true), (-301, false), (301, false), (-86_400, false), (0.999, true)])
    func theTimestampMustBeWithinTheTolerance(_ offset: TimeInterval, _ taken: Bool) throws {
        let signer = StripeWebhookSigner()
        let header = signer.header(for: Self.body, at: Self.sent)
        let refusal = try Self.checker(signer.secrets, at: Self.sent.addingTimeInterval(-offset)).refusal(header: header, body: Self.body)
        #expect(refusal == (taken ? nil : .outsideTolerance(tolerance: 300)))
    }

    @Test func theToleranceIsTheOperators() throws {
        let signer = StripeWebhookSigner()
        let header = signer.header(for: Self.body, at: Self.sent)
        #expect(try Self.checker(signer.secrets, at: Self.sent.addingTimeInterval(600), tolerance: 900).refusal(header: header, body: Self.body) == nil)
        #expect(try Self.checker(signer.secrets, at: Self.sent.addingTimeInterval(60), tolerance: 30).refusal(header: header, body: Self.body)
                == .outsideTolerance(tolerance: 30))
        #expect(throws: VerifierConfigurationError.self) { try StripeWebhookSignature(secrets: ["whsec_x"], tolerance: -1) }
        #expect(throws: VerifierConfigurationError.self) { try StripeWebhookSignature(secrets: []) }
        #expect(throws: VerifierConfigurationError.self) { try StripeWebhookSignature(secrets: [""]) }
    }

    /// Any change to the body, a byte added, removed or changed, or the JSON re-serialized, breaks the signature.
    @Test func aTamperedBodyIsRefused() throws {
        let signer = StripeWebhookSigner()
        let header = signer.header(for: Self.body, at: Self.sent)
        let checker = try Self.checker(signer.secrets)
        var changed = Self.body
        changed[changed.count / 2] ^= 0x01
        let reserialized = Data(String(decoding: Self.body, as: UTF8.self).replacingOccurrences(of: ":", with: ": ").utf8)
        for body in [changed, Self.body + Data(" ".utf8), Self.body.dropLast(), reserialized, Data()] {
            #expect(checker.refusal(header: header, body: body) == .mismatch)
        }
        // The timestamp is signed too: moving it into the window does not pass.
        let moved = header.replacingOccurrences(of: "t=1764400000", with: "t=1764400001")
        #expect(checker.refusal(header: moved, body: Self.body) == .mismatch)
    }

    /// Every refusal says why.
    @Test func malformedHeadersAreRefusedWithTheirReason() throws {
        let signer = StripeWebhookSigner()
        let checker = try Self.checker(signer.secrets)
        let v1 = StripeWebhookSigner.signature(secret: signer.secrets[0], timestamp: 1_764_400_000, body: Self.body)
        let cases: [(String?, StripeWebhookSignature.Refusal)] = [
            (nil, .missingHeader),
            ("", .malformedTimestamp),
            ("v1=\(v1)", .malformedTimestamp),
            ("t=abc,v1=\(v1)", .malformedTimestamp),
            ("t=-5,v1=\(v1)", .malformedTimestamp),
            ("t=1764400000", .noV1Signature),
            ("t=1764400000,v0=\(v1)", .noV1Signature),
            ("t=1764400000,v2=\(v1)", .noV1Signature),
            ("t=1764400000,v1=", .mismatch),
            ("t=1764400000,v1=zz\(v1.dropFirst(2))", .mismatch),
            ("t=1764400000,v1=\(v1.dropLast(2))", .mismatch),
        ]
        for (header, refusal) in cases {
            #expect(checker.refusal(header: header, body: Self.body) == refusal, "\(header ?? "nil")")
            #expect(!refusal.description.isEmpty)
        }
        // Other elements and schemes beside a good v1, and spaces after commas, are ignored.
        #expect(checker.refusal(header: "t=1764400000, v0=00, v1=\(v1), x=y", body: Self.body) == nil)
        // A second t cannot move the signed time.
        #expect(checker.refusal(header: "t=1764400000,t=1,v1=\(v1)", body: Self.body) == nil)
    }
}
