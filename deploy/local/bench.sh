#!/usr/bin/env bash
# `make bench`: builds in release mode, starts the local broker and PostgreSQL, and runs `iap-harness bench`
# on them (50,000 purchases by default; PostgreSQL with fsync on, IAP_BENCH_FSYNC=off to compare). Arguments pass
# through: `make bench ARGS="--json"`,
# `ARGS="--purchases 5000 --store sqlite:/tmp/bench.sqlite"`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
swift build -c release >&2
trap stop_started_services EXIT
# A broker of the benchmark's own, started and stopped with the run (unless KAFKA_BOOTSTRAP_SERVERS names one): the
# tests' broker carries their topics and groups, whose cost (a quarter of a core, gigabytes after a few suites) the
# figures would charge to the pipeline.
export IAP_BROKER_INSTANCE=bench
use_broker
if [[ " ${STARTED_SERVICES[*]:-} " != *" broker "* ]] && grep -qsx "KAFKA_BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP_SERVERS" "$(broker_file env)"; then
  log "the benchmark's broker at $KAFKA_BOOTSTRAP_SERVERS was running already (another run's?) and is shared with its other clients: stop it (IAP_BROKER_INSTANCE=bench deploy/local/broker.sh stop) for figures of the pipeline alone"
fi
if [ -z "${IAP_STORE_URL:-}" ]; then
  # A cluster of the benchmark's own, committing durably as production does (fsync on) unless IAP_BENCH_FSYNC=off.
  export IAP_POSTGRES_INSTANCE=bench IAP_POSTGRES_FSYNC="${IAP_BENCH_FSYNC:-on}"
  use_fresh_database bench
  export IAP_STORE_URL="$FRESH_DATABASE_URL"
fi
IAP_SCHEMAS_DIR="$ROOT/schemas" .build/release/iap-harness bench --brokers "$KAFKA_BOOTSTRAP_SERVERS" --store "$IAP_STORE_URL" "$@"
