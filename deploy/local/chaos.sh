#!/usr/bin/env bash
# `make chaos`: builds in release mode, starts the local broker and PostgreSQL (a fresh database), and runs
# `iapctl chaos` on them: 50,000 messages by default, each worker killed at least 5 times, PostgreSQL down
# for 20 s once. Arguments pass through: `make chaos ARGS="--purchases 5000 --json"`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
swift build -c release >&2
started=()
cleanup() { for service in "${started[@]}"; do bash "deploy/local/$service.sh" stop >/dev/null 2>&1 || true; done; }
trap cleanup EXIT
if [ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  eval "export $(bash deploy/local/broker.sh start 2>/dev/null)"
  started+=(broker)
fi
eval "export $(bash deploy/local/postgres.sh start 2>/dev/null)"
started+=(postgres)
db="chaos_$(date +%s)"
psql "$IAP_POSTGRES_URL" -qc "CREATE DATABASE $db" >/dev/null
IAP_SCHEMAS_DIR="$ROOT/schemas" .build/release/iapctl chaos --brokers "$KAFKA_BOOTSTRAP_SERVERS" --store "${IAP_POSTGRES_URL%/*}/$db" \
  --store-down "bash $ROOT/deploy/local/postgres.sh down" --store-up "bash $ROOT/deploy/local/postgres.sh up" "$@"
