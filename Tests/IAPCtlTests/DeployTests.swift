import Foundation
import JSON
import Testing
import TestSupport

/// deploy/ cannot run here (no container engine, no cluster), so it is checked offline: the YAML parses, the
/// Kubernetes manifests pass kubernetes-validate, and every command and environment variable they give the
/// executables is one the executables really take.
@Suite(TestServices.pythonTools, .timeLimit(.minutes(2)))
struct DeployTests {
    static let executables = ["iap-verifier", "iap-granter", "iap-finisher", "iap-sweeper", "iap-ingest", "iap-webhooks", "iapctl"]

    static func help(_ executable: String) async throws -> String {
        let result = try await offPool { try runCommand(ExecutableProcess.binary(executable).path, ["--help"]) }
        #expect(result.status == 0, "\(executable) --help")
        return result.output
    }

    @Test func manifestsAreValidAndNameRealFlagsAndSettings() async throws {
        let python = try TestServices.requirePython()
        let check = try await offPool {
            try runCommand(python, [TestServices.packageRoot.appendingPathComponent("Tests/IAPCtlTests/deploy_check.py").path,
                                    TestServices.packageRoot.appendingPathComponent("deploy").path])
        }
        #expect(check.status == 0, "\(check.output)")
        let report = try #require(JSONValue.parse(Array((check.output.split(separator: "\n").last ?? "").utf8))?.objectValue)
        let invocations = report["invocations"]?.arrayValue?.compactMap(\.objectValue) ?? []
        var helps: [String: String] = [:]
        for executable in Self.executables { helps[executable] = try await Self.help(executable) }
        let allHelp = helps.values.joined(separator: "\n")
        var stagesDeployed: Set<String> = []
        for invocation in invocations {
            let place = invocation["where"]?.stringValue ?? "?"
            let command = invocation["command"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let executable = try #require(command.first, "\(place) has a command")
            let help = try #require(helps[executable], "\(place): \(executable) is not one of the executables")
            stagesDeployed.insert(executable)
            for flag in command.dropFirst() where flag.hasPrefix("--") {
                let name = flag.split(separator: "=").first.map(String.init) ?? flag
                let known = help.contains("\(name) ") || help.contains("\(name)]") || help.contains("\(name)\n")
                #expect(known, "\(place): \(executable) has no \(name)")
            }
            if executable == "iapctl", command.count > 1 {
                #expect(help.contains("  \(command[1]) "), "\(place): iapctl has no command \(command[1])")
            }
            let env = invocation["env"]?.arrayValue?.compactMap(\.stringValue) ?? []
            // The test-only fault is never set where the pipeline is deployed: no message can reach the trap there.
            #expect(!env.contains("IAP_TEST_FAULT_MARK") && !command.contains { $0.hasPrefix("--test-fault-mark") }, "\(place) sets the test-only fault")
            // In Kubernetes a stage's worker keeps its trap records where its restarted container finds them (an emptyDir: a
            // restart there is a new container, on a read-only root). Compose restarts the same container, /tmp and all.
            if place.contains("/k8s/"), ["iap-verifier", "iap-granter", "iap-finisher", "iap-webhooks"].contains(executable) {
                #expect(env.contains("IAP_TRAP_RECORDS"), "\(place): no IAP_TRAP_RECORDS")
            }
            for variable in env {
                if variable.hasPrefix("KAFKA_") {
                    // librdkafka properties, dots as underscores.
                    #expect(variable.allSatisfy { $0.isUppercase || $0.isNumber || $0 == "_" }, "\(place): \(variable)")
                } else {
                    let known = allHelp.contains(variable)
                    #expect(known, "\(place): no executable reads \(variable)")
                }
            }
            if let probes = invocation["probes"]?.arrayValue?.compactMap(\.stringValue), !probes.isEmpty {
                #expect(Set(probes) == ["/healthz", "/readyz"], "\(place): probes")
            }
        }
        #expect(stagesDeployed.isSuperset(of: ["iap-verifier", "iap-granter", "iap-finisher", "iap-sweeper", "iap-ingest"]), "every stage is deployed")
    }

    @Test func theImageBuildsEveryExecutableAndCarriesTheSchemas() throws {
        let dockerfile = try String(contentsOf: TestServices.packageRoot.appendingPathComponent("deploy/docker/Dockerfile"), encoding: .utf8)
        for executable in Self.executables {
            #expect(dockerfile.contains("--product \(executable) ") || dockerfile.contains("--product \(executable)\n"), "builds \(executable)")
        }
        // The image puts the schemas where the executables look for them.
        #expect(dockerfile.contains("COPY schemas /usr/share/iap-pipeline/schemas"))
        let codec = try String(contentsOf: TestServices.packageRoot.appendingPathComponent("Sources/PurchaseEvents/EventCodec.swift"), encoding: .utf8)
        #expect(codec.contains("\"/usr/share/iap-pipeline/schemas\""))
        #expect(dockerfile.contains("FROM swift:6.3"), "built with the project's toolchain")
    }
}
