#!/usr/bin/env bash
# `make scale`: the scaling scenario, as `make chaos --replicas one-two-one` (same build, broker and fresh
# PostgreSQL): 3,000 submissions at a steady 34 per second (about 90 s) on 8 partitions; a second replica of the
# verifier, granter and finisher joins a third of the way, the first ones get SIGTERM two thirds of the way; then
# the books, and each second replica must have done work. No kills and no store outage. Arguments pass through:
# `make scale ARGS=--json`.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/chaos.sh" --replicas one-two-one --purchases 3000 --users 1000 --partitions 8 --rate 34 \
  --kills-per-worker 0 --outage-seconds 0 --timeout 180 "$@"
