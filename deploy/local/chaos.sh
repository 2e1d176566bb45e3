#!/usr/bin/env bash
# `make chaos`: builds in release mode, starts the local broker and PostgreSQL (a fresh database), and runs
# `iap-harness chaos` on them: 50,000 messages by default, each worker killed at least 5 times, PostgreSQL down
# for 20 s once, replicas of verifier, granter and finisher joining and leaving (two of each per stage), Google Play's
# notifications pushed to iap-ingest, Stripe's refunds and disputes of web purchases (webhooks to iap-ingest, or lost). Arguments pass through: `make chaos ARGS="--purchases 5000 --json"`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
swift build -c release >&2
trap stop_started_services EXIT
use_broker
use_fresh_database chaos
IAP_SCHEMAS_DIR="$ROOT/schemas" .build/release/iap-harness chaos --brokers "$KAFKA_BOOTSTRAP_SERVERS" --store "$FRESH_DATABASE_URL" \
  --store-down "bash $ROOT/deploy/local/postgres.sh down" --store-up "bash $ROOT/deploy/local/postgres.sh up" "$@"
