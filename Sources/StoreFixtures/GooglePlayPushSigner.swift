import Crypto
import Foundation
import JSON

/// Google as a Pub/Sub push to an authenticated endpoint plays it: one of its signing keys (an RSA key under a key id,
/// published as a certificate in the form of `https://www.googleapis.com/oauth2/v1/certs`), the OIDC token each push
/// carries, and the push's body around a real-time developer notification.
public struct GooglePlayPushSigner: Sendable {
    public let key: PrivateKey
    public let keyID: String
    public let certificate: Certificate

    public init(keyID: String = "stand-in-key-\(UUID().uuidString.prefix(8))") throws {
        key = try PrivateKey.generateRSA()
        self.keyID = keyID
        let now = Date()
        certificate = try CertificateIssuer.issue(.init(commonName: "stand-in Google OIDC", isCA: false, notBefore: now.addingTimeInterval(-3600),
                                                        notAfter: now.addingTimeInterval(86_400)), subjectKey: key, issuer: nil)
    }

    /// The published certificates (key id → PEM) of `signers`, as Google serves them.
    public static func certificatesJSON(_ signers: [GooglePlayPushSigner]) -> String {
        JSONValue.object(Dictionary(signers.map { ($0.keyID, JSONValue.string($0.certificate.pemRepresentation)) }, uniquingKeysWith: { first, _ in first }))
            .serializedText
    }

    /// The `Authorization` header of a push: an OIDC token for `audience`, of the service account `email`.
    public func authorization(audience: String, email: String, issuedAt: Date = Date(), lifetime: TimeInterval = 3600,
                              issuer: String = "https://accounts.google.com", emailVerified: Bool = true) throws -> String {
        let header = JSONValue.object(["alg": .string("RS256"), "kid": .string(keyID), "typ": .string("JWT")]).serializedText
        let issued = Int64(issuedAt.timeIntervalSince1970)
        let claims = JSONValue.object([
            "iss": .string(issuer), "aud": .string(audience), "email": .string(email), "email_verified": .bool(emailVerified),
            "sub": .string("100000000000000000002"), "iat": .integer(issued), "exp": .integer(issued + Int64(lifetime)),
        ]).serializedText
        let input = Base64URL.encode(Data(header.utf8)) + "." + Base64URL.encode(Data(claims.utf8))
        return "Bearer " + input + "." + Base64URL.encode(try key.signRSA(Data(input.utf8), digest: .sha256))
    }

    /// A push's body: `notification` (a DeveloperNotification's JSON) as the message's base64 data.
    public static func pushBody(_ notification: String, messageId: String = String(Int.random(in: 1_000_000...9_999_999))) -> Data {
        Data(JSONValue.object([
            "message": .object(["data": .string(Data(notification.utf8).base64EncodedString()), "messageId": .string(messageId),
                                "publishTime": .string(RFC3339.format(Date()))]),
            "subscription": .string("projects/stand-in-project/subscriptions/play-rtdn"),
        ]).serializedText.utf8)
    }

    /// A DeveloperNotification of `package`: `kind` is `subscriptionNotification`, `oneTimeProductNotification`,
    /// `voidedPurchaseNotification` or `testNotification`, with `fields`.
    public static func notification(package: String, _ kind: String, _ fields: [String: JSONValue], at time: Date = Date()) -> String {
        JSONValue.object(["version": .string("1.0"), "packageName": .string(package),
                          "eventTimeMillis": .string(String(Int64(time.timeIntervalSince1970 * 1000))), kind: .object(fields)]).serializedText
    }
}
