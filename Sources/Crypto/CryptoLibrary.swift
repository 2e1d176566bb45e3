import COpenSSL

/// The OpenSSL loaded at run time.
public enum CryptoLibrary {
    /// e.g. `OpenSSL 3.0.17 1 Jul 2025`.
    public static var version: String { String(cString: OpenSSL_version(OPENSSL_VERSION)) }
}
