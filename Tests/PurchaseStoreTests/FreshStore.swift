import PurchaseStore
import TestSupport

extension StoreEngine {
    /// A store of this engine on a fresh database, migrated.
    func freshStore() async throws -> SQLPurchaseStore {
        let store = try SQLPurchaseStore(url: try await freshURL())
        try await store.migrate()
        return store
    }
}

/// The newest schema version: a store migrated from an older one is brought to it.
let latestSchemaVersion = SQLPurchaseStore.schemaVersion
