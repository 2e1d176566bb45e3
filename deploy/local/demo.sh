#!/usr/bin/env bash
# `make demo`: builds the workers, starts the local broker, and runs `iap-harness demo` on an SQLite store:
# the workers and the ingest as processes, 1,000 signed coin purchases and one story per product type, the books checked at the end (exit 0 only if they
# balance). Arguments pass through: `make demo ARGS=--json`, `ARGS="--purchases 5000"`,
# `ARGS="--store postgres://…"`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
swift build -c release >&2
started_broker=0
if [ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  eval "export $(bash deploy/local/broker.sh start 2>/dev/null)"
  started_broker=1
fi
cleanup() { if [ "$started_broker" = 1 ]; then bash deploy/local/broker.sh stop >/dev/null 2>&1 || true; fi; }
trap cleanup EXIT
.build/release/iap-harness demo --brokers "$KAFKA_BOOTSTRAP_SERVERS" "$@"
