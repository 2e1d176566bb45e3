#!/usr/bin/env bash
# `make bench`: builds in release mode, starts the local broker and PostgreSQL, and runs `iapctl bench`
# on them (50,000 purchases by default). Arguments pass through: `make bench ARGS="--json"`,
# `ARGS="--purchases 5000 --store sqlite:/tmp/bench.sqlite"`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
swift build -c release >&2
started=()
if [ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  eval "export $(bash deploy/local/broker.sh start 2>/dev/null)"
  started+=(broker)
fi
if [ -z "${IAP_STORE_URL:-}" ]; then
  eval "export $(bash deploy/local/postgres.sh start 2>/dev/null)"
  # A fresh database per run, so that earlier runs' purchases do not count.
  db="bench_$(date +%s)"
  psql "$IAP_POSTGRES_URL" -qc "CREATE DATABASE $db" >/dev/null
  export IAP_STORE_URL="${IAP_POSTGRES_URL%/*}/$db"
  started+=(postgres)
fi
cleanup() { for service in "${started[@]}"; do bash "deploy/local/$service.sh" stop >/dev/null 2>&1 || true; done; }
trap cleanup EXIT
IAP_SCHEMAS_DIR="$ROOT/schemas" .build/release/iapctl bench --brokers "$KAFKA_BOOTSTRAP_SERVERS" --store "$IAP_STORE_URL" "$@"
