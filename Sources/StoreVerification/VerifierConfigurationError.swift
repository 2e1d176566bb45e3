/// A verifier that cannot be built as configured.
public struct VerifierConfigurationError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

extension AppStoreEnvironment {
    /// The environments a verifier can be configured for.
    public static let configurable: [AppStoreEnvironment] = [.production, .sandbox, .xcode, .localTesting]

    /// What is wrong with a permission to accept unsigned test data in this environment, if anything.
    public enum UnsignedTestDataProblem: Sendable {
        /// Xcode or LocalTesting without the permission: nothing of theirs is signed by Apple, so nothing could be
        /// verified, and the environment's name alone must never turn verification off.
        case permissionMissing
        /// The permission anywhere else.
        case permissionMisplaced
    }

    /// The rule every configuration (verifiers, `iap-verifier`, `iapctl verify`) applies; nil when `allowed` fits.
    public func unsignedTestDataProblem(allowed: Bool) -> UnsignedTestDataProblem? {
        switch (isLocallySigned, allowed) {
        case (true, true), (false, false): nil
        case (true, false): .permissionMissing
        case (false, true): .permissionMisplaced
        }
    }

    /// Whether a verifier of this environment skips signatures: only Xcode and LocalTesting ones, and only with the
    /// explicit permission.
    /// - Throws: `VerifierConfigurationError` when `unsignedTestDataProblem(allowed:)` finds one.
    func acceptsUnsignedData(allowed: Bool) throws -> Bool {
        switch unsignedTestDataProblem(allowed: allowed) {
        case nil: return allowed
        case .permissionMissing?:
            throw VerifierConfigurationError("\(rawValue) data is not signed by the App Store; accepting it unsigned needs allowsUnsignedTestData")
        case .permissionMisplaced?:
            throw VerifierConfigurationError("allowsUnsignedTestData is only for Xcode and LocalTesting, not \(rawValue)")
        }
    }
}
