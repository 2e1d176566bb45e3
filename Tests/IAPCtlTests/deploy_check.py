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
        kind = doc.get("kind")
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
        spec = doc.get("spec", {})
        pod = spec.get("template", {}).get("spec") or spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec")
        for container in (pod or {}).get("containers", []):
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
