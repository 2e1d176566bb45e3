/// The rule the event schemas state for an identifier (`common.v1.schema.json`: `minLength` 1, a `maxLength` in
/// characters, which JSON Schema counts as code points, and no C0 control character or DEL): what a value from outside
/// must meet before an event carries it, checked where it comes in, so that no stage publishes an event its schema
/// refuses and no NUL reaches a database.
public enum IdentifierRule {
    /// Why `text` does not meet the rule with `maxLength` (`is empty`, `is 70 characters long, more than 64`, `holds the
    /// control character U+0000 at character 3`), nil when it does.
    public static func fault(of text: String, maxLength: Int) -> String? {
        var count = 0
        for scalar in text.unicodeScalars {
            count += 1
            if scalar.value < 0x20 || scalar.value == 0x7F {
                let hex = String(scalar.value, radix: 16, uppercase: true)
                return "holds the control character U+\(String(repeating: "0", count: 4 - hex.count))\(hex) at character \(count)"
            }
        }
        if count == 0 { return "is empty" }
        if count > maxLength { return "is \(count) characters long, more than \(maxLength)" }
        return nil
    }

    /// `text`'s first `maxLength` characters, counted as JSON Schema's `maxLength` counts them (code points; a Swift
    /// `Character` may hold many): informational text from outside, cut to what its event's schema carries.
    public static func truncated(_ text: String, maxLength: Int) -> String {
        text.unicodeScalars.count <= maxLength ? text : String(String.UnicodeScalarView(text.unicodeScalars.prefix(maxLength)))
    }
}

extension Identifier {
    /// Why the identifier does not meet `IdentifierRule` with `maxLength`, nil when it does.
    public func fault(maxLength: Int) -> String? { IdentifierRule.fault(of: rawValue, maxLength: maxLength) }
}
