#!/usr/bin/env bash
# `make fuzz ARGS="--seconds N --seed S"`: the hostile-input run (HostileInputTests) for N seconds per test against the
# in-memory repository, SQLite and the local PostgreSQL (started here when it is not running): rounds of seeds from S
# (default: the time) until the time is up. Prints the inputs tried per topic and route and their outcomes; a failure
# names its seed, which `--seed S` runs first. `--steps K`: messages (or requests) per seed (default 150).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

seconds=60 seed=$(date +%s) steps=150
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) log "unknown option $1 (use --seconds N, --seed S, --steps K)"; exit 2 ;;
  esac
done

swift build --build-tests >&2
trap stop_started_services EXIT
output=$(bash deploy/local/postgres.sh start 2>&1)
eval "export $(grep '^IAP_POSTGRES_URL=' <<<"$output")"
grep -q "already running" <<<"$output" || STARTED_SERVICES+=(postgres)
log "seed $seed, $seconds s per test, $steps steps per seed"
export IAP_TEST_POSTGRES_URL="$IAP_POSTGRES_URL" IAP_REQUIRE_SERVICES=1
export IAP_FUZZ_SECONDS="$seconds" IAP_FUZZ_SEED="$seed" IAP_FUZZ_STEPS="$steps"
swift test --skip-build --filter 'HostileInputTests\.HostileInputTests' 2>&1 | grep -v '^↳ ///'
