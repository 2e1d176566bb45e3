import PurchaseDomain

/// The lifecycle's sets of states and product types as SQL conditions, in the words the partial indexes use (a single
/// state as `=`, several as `IN (…)` in the lifecycle's order), so that SQLite matches a query to its index.
enum LifecycleConditions {
    /// `state = 'granted'` or `state IN ('verified', 'granted')`.
    static func state(in states: [PurchaseState]) -> String { condition("state", states.map(\.rawValue)) }

    /// `product_type = 'consumable'` or `product_type IN (…)`.
    static func productType(in types: [ProductType]) -> String { condition("product_type", types.map(\.rawValue)) }

    private static func condition(_ column: String, _ values: [String]) -> String {
        precondition(!values.isEmpty, "a condition on \(column) that no row meets")
        // Raw values of the domain's enums: lowercase words and underscores, nothing to escape.
        let literals = values.map { "'\($0)'" }
        return literals.count == 1 ? "\(column) = \(literals[0])" : "\(column) IN (\(literals.joined(separator: ", ")))"
    }
}
