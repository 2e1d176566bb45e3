extension Lifecycle {
    /// The lifecycle as a Markdown table (the README's): every event and state where something happens or is
    /// refused or waits, with the product types it holds for. Pairs not listed change nothing: a repeat
    /// ("already …") or nothing to do for that type.
    public static func markdownTable() -> String {
        struct Row: Hashable {
            var event: String
            var outcome: String
            var to: String
            var effects: String
            var types: String
        }
        var rows: [(row: Row, states: [PurchaseState])] = []
        for event in LifecycleEvent.allCases {
            for state in PurchaseState.allCases {
                // Group the types that take this (event, state) the same way.
                var byTransition: [(Transition, [ProductType])] = []
                for type in ProductType.allCases {
                    let transition = transition(from: state, on: event, type: type)
                    if let index = byTransition.firstIndex(where: { $0.0 == transition }) { byTransition[index].1.append(type) } else { byTransition.append((transition, [type])) }
                }
                for (transition, types) in byTransition where transition.outcome != .repeated && transition.outcome != .ignored {
                    let row = Row(event: event.description, outcome: transition.outcome.rawValue + (transition.reason.map { " (\($0.rawValue))" } ?? ""),
                                  to: transition.to == state ? "(unchanged)" : transition.to.rawValue,
                                  effects: transition.effects.isEmpty ? "—" : transition.effects.map(\.rawValue).joined(separator: ", "),
                                  types: types.count == ProductType.allCases.count ? "any" : types.map(\.rawValue).joined(separator: ", "))
                    // States that lead to the same row share one line.
                    if let index = rows.firstIndex(where: { $0.row == row }) { rows[index].states.append(state) } else { rows.append((row, [state])) }
                }
            }
        }
        var lines = ["| event | from | product types | to | effects | outcome |", "| --- | --- | --- | --- | --- | --- |"]
        for (row, states) in rows {
            lines.append("| \(row.event) | \(states.map(\.rawValue).joined(separator: ", ")) | \(row.types) | \(row.to) | \(row.effects) | \(row.outcome) |")
        }
        return lines.joined(separator: "\n")
    }
}
