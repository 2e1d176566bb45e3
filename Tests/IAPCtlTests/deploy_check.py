"""Offline checks of deploy/ (no container engine or cluster here): every YAML file parses, every
Kubernetes manifest passes kubernetes-validate (strict), KEDA objects point at the Deployments and
consumer groups that exist, and it prints, as JSON, every command and environment variable the
manifests give the executables, for the Swift test to check against their --help.

usage: deploy_check.py DEPLOY_DIR   (exit 1 with the problems on stderr)
"""
import glob
import json
import os
import sys

import kubernetes_validate
import yaml

KUBERNETES_VERSION = "1.37.0"
PARTITIONS = 12


def pod_template(doc):
    """The pod template of a Deployment, Job or CronJob (else None)."""
    if not isinstance(doc, dict) or "kind" not in doc:
        return None
    spec = doc.get("spec", {})
    return spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template")


def pod_spec(doc):
    return (pod_template(doc) or {}).get("spec")


def pod_labels(doc):
    return (pod_template(doc) or {}).get("metadata", {}).get("labels", {})


def main(deploy):
    problems, invocations, documents = [], [], []
    for path in sorted(glob.glob(os.path.join(deploy, "**", "*.yaml"), recursive=True)):
        try:
            with open(path) as handle:
                documents += [(path, d) for d in yaml.safe_load_all(handle) if d is not None]
        except yaml.YAMLError as error:
            problems.append("%s: %s" % (path, error))

    config_maps = {d["metadata"]["name"]: d.get("data", {}) for p, d in documents if d.get("kind") == "ConfigMap"}
    deployments = {d["metadata"]["name"]: d for p, d in documents if d.get("kind") == "Deployment"}
    for path, doc in documents:
        if "services" in doc:  # docker compose
            shared = doc.get("x-iap-environment", {})
            for name, service in doc["services"].items():
                command = service.get("command")
                if command and command[0].startswith(("iap", "iapctl")):
                    env = service.get("environment", {})
                    invocations.append({"where": "%s:%s" % (path, name), "command": command, "env": sorted(env if isinstance(env, dict) else shared)})
            continue
        if "kind" not in doc and ("groups" in doc or "scrape_configs" in doc or "rule_files" in doc):
            continue  # Prometheus's own files (rules, their tests, a configuration): promtool checks them
        kind = doc.get("kind")
        if doc.get("apiVersion", "").startswith("monitoring.coreos.com/"):
            if kind == "PodMonitor":
                selector = doc["spec"]["selector"]["matchLabels"]
                ports = [e["port"] for e in doc["spec"]["podMetricsEndpoints"]]
                selected = [(p, d) for p, d in documents if pod_spec(d) is not None
                            and selector.items() <= pod_labels(d).items()]
                if not selected:
                    problems.append("%s: PodMonitor %s selects no pod" % (path, doc["metadata"]["name"]))
                for where, selected_doc in selected:
                    names = [port.get("name") for c in pod_spec(selected_doc)["containers"] for port in c.get("ports", [])]
                    for port in ports:
                        if port not in names:
                            problems.append("%s: %s has no port %s to scrape" % (where, selected_doc["metadata"]["name"], port))
            continue  # PrometheusRule: AlertRulesTests checks it against deploy/prometheus/alerts.yaml
        if doc.get("apiVersion", "").startswith("keda.sh/"):
            if kind == "ScaledObject":
                target = doc["spec"]["scaleTargetRef"]["name"]
                if target not in deployments:
                    problems.append("%s: ScaledObject %s targets missing Deployment %s" % (path, doc["metadata"]["name"], target))
                if doc["spec"]["maxReplicaCount"] > PARTITIONS:
                    problems.append("%s: more replicas than partitions" % path)
                for trigger in doc["spec"]["triggers"]:
                    if trigger["type"] != "kafka" or trigger["metadata"]["consumerGroup"] != target:
                        problems.append("%s: trigger must be kafka on consumer group %s" % (path, target))
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as error:
            problems.append("%s: %s %s: %s" % (path, kind, doc.get("metadata", {}).get("name"), error))
        for container in (pod_spec(doc) or {}).get("containers", []):
            env = [e["name"] for e in container.get("env", [])]
            for source in container.get("envFrom", []):
                name = source.get("configMapRef", {}).get("name")
                if name not in config_maps:
                    problems.append("%s: envFrom names missing ConfigMap %s" % (path, name))
                env += list(config_maps.get(name, {}))
            invocations.append({"where": "%s:%s" % (path, doc["metadata"]["name"]), "command": container["command"],
                                "env": sorted(env), "probes": [p["httpGet"]["path"] for k, p in container.items() if k.endswith("Probe")]})
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    print(json.dumps({"documents": len(documents), "invocations": invocations}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
