/// A verifier that cannot be built as configured.
public struct VerifierConfigurationError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

extension AppStoreEnvironment {
    /// Whether a verifier of this environment skips signatures: only Xcode and LocalTesting ones, and only with the
    /// explicit permission, so that an environment name alone never turns verification off.
    /// - Throws: `VerifierConfigurationError` for Xcode or LocalTesting without the permission (nothing of theirs
    ///   is signed by Apple, so nothing could be verified), and for the permission anywhere else.
    func acceptsUnsignedData(allowed: Bool) throws -> Bool {
        switch (isLocallySigned, allowed) {
        case (true, true): return true
        case (false, false): return false
        case (true, false):
            throw VerifierConfigurationError("\(rawValue) data is not signed by the App Store; accepting it unsigned needs allowsUnsignedTestData")
        case (false, true):
            throw VerifierConfigurationError("allowsUnsignedTestData is only for Xcode and LocalTesting, not \(rawValue)")
        }
    }
}
