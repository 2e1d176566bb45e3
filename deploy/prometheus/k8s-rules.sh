#!/usr/bin/env bash
# Prints alerts.yaml as a PrometheusRule for the Prometheus Operator (deploy/k8s/prometheus-rule.yaml; `make k8s-rules`):
# the same groups under `spec:`, so that the rules have one source.
set -euo pipefail
cat <<'HEADER'
# Generated from deploy/prometheus/alerts.yaml by `make k8s-rules`: edit that file, not this one.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: iap-pipeline
  labels: { app.kubernetes.io/part-of: iap-pipeline }
spec:
HEADER
# The rules without their leading comment, each line indented under spec.
awk 'started || !/^(#|$)/ { started = 1; print ($0 == "" ? "" : "  " $0) }' "$(dirname "${BASH_SOURCE[0]}")/alerts.yaml"
