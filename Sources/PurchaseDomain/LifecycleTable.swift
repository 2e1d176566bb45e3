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
        // What each (event, state) does, by the types that take it the same way; the cases of one event (a refund's
        // reversal, by what its refund had taken) that do the same share one line, named by them unless all do.
        var entries: [(name: String, cases: [String], state: PurchaseState, transition: Transition, types: [ProductType])] = []
        for event in LifecycleEvent.allCases {
            for state in PurchaseState.allCases {
                // Group the types that take this (event, state) the same way.
                var byTransition: [(Transition, [ProductType])] = []
                for type in ProductType.allCases {
                    let transition = transition(from: state, on: event, type: type)
                    if let index = byTransition.firstIndex(where: { $0.0 == transition }) { byTransition[index].1.append(type) } else { byTransition.append((transition, [type])) }
                }
                for (transition, types) in byTransition where transition.outcome != .repeated && transition.outcome != .ignored {
                    if let index = entries.firstIndex(where: { $0.name == event.name && $0.state == state && $0.transition == transition && $0.types == types }) {
                        entries[index].cases += event.caseName.map { [$0] } ?? []
                    } else {
                        entries.append((event.name, event.caseName.map { [$0] } ?? [], state, transition, types))
                    }
                }
            }
        }
        var rows: [(row: Row, states: [PurchaseState])] = []
        for entry in entries {
            let allCases = LifecycleEvent.allCases.filter { $0.name == entry.name }.compactMap(\.caseName)
            let row = Row(event: entry.cases == allCases ? entry.name : "\(entry.name) (\(entry.cases.joined(separator: ", ")))",
                          outcome: entry.transition.outcome.rawValue + (entry.transition.reason.map { " (\($0.rawValue))" } ?? ""),
                          to: entry.transition.to == entry.state ? "(unchanged)" : entry.transition.to.rawValue,
                          effects: entry.transition.effects.isEmpty ? "—" : entry.transition.effects.map(\.rawValue).joined(separator: ", "),
                          types: entry.types.count == ProductType.allCases.count ? "any" : entry.types.map(\.rawValue).joined(separator: ", "))
            // States that lead to the same row share one line.
            if let index = rows.firstIndex(where: { $0.row == row }) { rows[index].states.append(entry.state) } else { rows.append((row, [entry.state])) }
        }
        var lines = ["| event | from | product types | to | effects | outcome |", "| --- | --- | --- | --- | --- | --- |"]
        for (row, states) in rows {
            lines.append("| \(row.event) | \(states.map(\.rawValue).joined(separator: ", ")) | \(row.types) | \(row.to) | \(row.effects) | \(row.outcome) |")
        }
        return lines.joined(separator: "\n")
    }
}
