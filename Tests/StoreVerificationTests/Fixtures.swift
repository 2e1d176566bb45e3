import PurchaseDomain
import Crypto
import Foundation
import StoreFixtures
import StoreVerification
import JSON

let bundleId = "com.example.coins"
let appAppleId: Int64 = 1_234_567_890

/// One PKI per test process: key generation is the slow part.
let sharedPKI: TestPKI = try! TestPKI.make()

func verifier(
    _ pki: TestPKI = sharedPKI, environment: AppStoreEnvironment = .sandbox, appAppleId: Int64? = appAppleId,
    roots: [Certificate]? = nil, onlineChecks: Bool = false, allowsUnsignedTestData: Bool = false,
    now: @escaping @Sendable () -> Date = Date.init
) throws -> SignedDataVerifier {
    try SignedDataVerifier(
        configuration: .init(trustedRoots: roots ?? [pki.root], bundleId: BundleID(bundleId), environment: environment,
                             appAppleId: appAppleId, onlineChecks: onlineChecks, ocspTimeout: .seconds(2),
                             allowsUnsignedTestData: allowsUnsignedTestData),
        now: now)
}

func transactionPayload(_ id: String = "2000000000000001", productId: String = "coins.100", environment: AppStoreEnvironment = .sandbox,
                        bundle: String = bundleId, signedDate: Date = Date(), extra: [String: JSONValue] = [:]) -> [String: JSONValue] {
    AppStorePayloads.transaction(transactionId: id, productId: productId, bundleId: bundle, environment: environment,
                                 signedDate: signedDate, appAccountToken: "3f0a2f2e-8a7c-4c1e-9d57-000000000001", extra: extra)
}

func signedTransaction(_ pki: TestPKI = sharedPKI, _ payload: [String: JSONValue] = transactionPayload(),
                       header: [String: JSONValue] = [:]) throws -> String {
    try JWSSigner(pki: pki).sign(payload, header: header)
}

extension Result {
    var rejection: Rejection? { if case .failure(let error) = self { error as? Rejection } else { nil } }
    var value: Success? { if case .success(let value) = self { value } else { nil } }
    var failure: Failure? { if case .failure(let error) = self { error } else { nil } }
}
