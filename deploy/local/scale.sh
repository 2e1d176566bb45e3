#!/usr/bin/env bash
# `make scale`: builds in release mode, starts the local broker and PostgreSQL (a fresh database), and runs the
# scaling scenario with `iapctl chaos --replicas one-two-one`: 3,000 submissions at a steady 34 per second (about
# 90 s) on 8 partitions; a second replica of the verifier, granter and finisher joins a third of the way, the
# first ones get SIGTERM two thirds of the way; then the books, and each second replica must have done work.
# No kills and no store outage (that is `make chaos`). Arguments pass through: `make scale ARGS=--json`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
swift build -c release >&2
trap stop_started_services EXIT
use_broker
use_fresh_database scale
IAP_SCHEMAS_DIR="$ROOT/schemas" .build/release/iapctl chaos --brokers "$KAFKA_BOOTSTRAP_SERVERS" --store "$FRESH_DATABASE_URL" \
  --replicas one-two-one --purchases 3000 --users 1000 --partitions 8 --rate 34 --kills-per-worker 0 --outage-seconds 0 --timeout 180 "$@"
