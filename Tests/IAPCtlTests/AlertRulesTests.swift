import Foundation
import JSON
import Testing
import TestSupport

/// deploy/prometheus/alerts.yaml and deploy/grafana/iap-pipeline.json as files: what they are made of, for the tests.
enum MonitoringFiles {
    static let rules = TestServices.packageRoot.appendingPathComponent("deploy/prometheus/alerts.yaml")
    static let ruleTests = TestServices.packageRoot.appendingPathComponent("deploy/prometheus/alerts.test.yaml")
    static let dashboard = TestServices.packageRoot.appendingPathComponent("deploy/grafana/iap-pipeline.json")
    static let runbook = TestServices.packageRoot.appendingPathComponent("docs/runbook.md")

    static func text(_ file: URL) throws -> String { String(decoding: try Data(contentsOf: file), as: UTF8.self) }

    /// The alerts' names, in the file's order.
    static func alertNames() throws -> [String] {
        try text(rules).split(separator: "\n").compactMap { line in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            return trimmed.hasPrefix("- alert: ") ? String(trimmed.dropFirst("- alert: ".count)) : nil
        }
    }

    /// Every PromQL expression of the dashboard's panels, with Grafana's interval variables as a query would have them.
    static func dashboardExpressions() throws -> [String] {
        let document = try #require(JSONValue.parse(Array(try Data(contentsOf: dashboard))), "the dashboard is JSON")
        let panels = document.objectValue?["panels"]?.arrayValue ?? []
        return panels.flatMap { panel in
            (panel.objectValue?["targets"]?.arrayValue ?? []).compactMap { $0.objectValue?["expr"]?.stringValue }
        }.map { $0.replacingOccurrences(of: "$__rate_interval", with: "1m").replacingOccurrences(of: "$__range", with: "1h") }
    }

    /// The metric names `text` (rules or expressions) reads: `iap_…` and `up`, once each.
    static func metricNames(in text: String) -> Set<String> {
        var names: Set<String> = []
        var word = ""
        for character in text + " " {
            if character.isLetter || character.isNumber || character == "_" {
                word.append(character)
            } else {
                if word.hasPrefix("iap_") { names.insert(word) }
                word = ""
            }
        }
        return names
    }

    /// The families of a `/metrics` text (`# TYPE name kind`), with the series names a histogram adds.
    static func exportedNames(_ exposition: String) -> Set<String> {
        var names: Set<String> = []
        for line in exposition.split(separator: "\n") where line.hasPrefix("# TYPE ") {
            let parts = line.split(separator: " ")
            guard parts.count == 4 else { continue }
            names.insert(String(parts[2]))
            if parts[3] == "histogram" { for suffix in ["_bucket", "_sum", "_count"] { names.insert(String(parts[2]) + suffix) } }
        }
        return names
    }
}

/// The alert rules as `promtool` checks them, with a unit test and a runbook entry for each alert.
@Suite(TestServices.prometheus)
struct AlertRulesTests {
    @Test func theRulesAreValidAndPassTheirUnitTests() async throws {
        let promtool = try TestServices.requirePrometheus("promtool")
        let check = try await offPool { try runCommand(promtool, ["check", "rules", MonitoringFiles.rules.path]) }
        #expect(check.status == 0 && check.output.contains("SUCCESS"), "\(check.output)")
        let unitTests = try await offPool { try runCommand(promtool, ["test", "rules", MonitoringFiles.ruleTests.path]) }
        #expect(unitTests.status == 0 && unitTests.output.contains("SUCCESS"), "\(unitTests.output)")
    }

    @Test func everyAlertHasAUnitTestAndARunbookEntry() throws {
        let alerts = try MonitoringFiles.alertNames()
        #expect(alerts.count >= 16 && Set(alerts).count == alerts.count, "\(alerts)")
        let tests = try MonitoringFiles.text(MonitoringFiles.ruleTests)
        let runbook = try MonitoringFiles.text(MonitoringFiles.runbook)
        let rules = try MonitoringFiles.text(MonitoringFiles.rules)
        for alert in alerts {
            #expect(tests.contains("alertname: \(alert)\n") || tests.contains("alertname: \(alert),"), "\(alert) has a promtool test")
            #expect(runbook.contains("\n## \(alert)\n"), "\(alert) has a runbook entry")
            #expect(rules.contains("runbook_url: docs/runbook.md#\(alert.lowercased())\n"), "\(alert) links its runbook entry")
        }
    }

    /// The manifest for the Prometheus Operator holds the same rules, as `make k8s-rules` writes it.
    @Test func theKubernetesPrometheusRuleHoldsTheSameRules() throws {
        let manifest = try MonitoringFiles.text(TestServices.packageRoot.appendingPathComponent("deploy/k8s/prometheus-rule.yaml"))
        let rules = try MonitoringFiles.text(MonitoringFiles.rules)
        let body = rules.split(separator: "\n", omittingEmptySubsequences: false).drop { $0.hasPrefix("#") || $0.isEmpty }
            .map { $0.isEmpty ? "" : "  " + $0 }.joined(separator: "\n")
        #expect(manifest.hasSuffix("spec:\n" + body), "deploy/k8s/prometheus-rule.yaml is out of date: run make k8s-rules")
    }
}
