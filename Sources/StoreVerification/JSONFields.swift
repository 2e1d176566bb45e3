import Foundation
import JSON
import PurchaseDomain

/// Typed reads from a JSON object, tolerant of absent fields and strict about types.
struct JSONFields {
    let object: [String: JSONValue]

    func string(_ key: String) -> String? { object[key]?.stringValue }
    /// A string field as an identifier (compared by its bytes).
    func identifier<Kind>(_ key: String) -> Identifier<Kind>? { object[key]?.stringValue.map { Identifier($0) } }
    func int(_ key: String) -> Int64? { object[key]?.int64Value }
    /// An int64 field, as a number or as the decimal string Google's APIs send int64 values as.
    func int64(_ key: String) -> Int64? { int(key) ?? string(key).flatMap { Int64($0) } }
    func bool(_ key: String) -> Bool? { object[key]?.boolValue }
    /// A date in milliseconds since 1970, as the App Store sends them.
    func date(_ key: String) -> Date? { int(key).flatMap(EpochMilliseconds.date) }
    func object(_ key: String) -> JSONFields? { object[key]?.objectValue.map(JSONFields.init) }
}
