import CommandLineOptions
import Foundation
import PurchaseStore

extension IAPCtl {
    /// The purchase store `--store` names (else `IAP_STORE_URL`), its password from `--password-file` (else
    /// `IAP_STORE_PASSWORD_FILE`, `PGPASSWORD`, `~/.pgpass`); nil when neither names one.
    static func store(_ options: CommandOptions, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> SQLPurchaseStore? {
        guard let url = options.string("--store") ?? environment["IAP_STORE_URL"] else { return nil }
        let password = try (options.string("--password-file") ?? environment["IAP_STORE_PASSWORD_FILE"]).map(SQLPurchaseStore.password(fromFile:))
        return try SQLPurchaseStore(url: url, password: password)
    }
}
