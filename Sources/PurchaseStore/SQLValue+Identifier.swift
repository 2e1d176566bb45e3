import Database
import PurchaseDomain

extension SQLValue {
    /// An identifier bound as text: its bytes as the producer wrote them.
    static func text<Kind>(_ identifier: Identifier<Kind>) -> SQLValue { .text(identifier.rawValue) }

    /// The identifier a text column holds (nil for NULL).
    func identifier<Kind>(_ kind: Identifier<Kind>.Type = Identifier<Kind>.self) -> Identifier<Kind>? { string.map { Identifier<Kind>($0) } }
}
