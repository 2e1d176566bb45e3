#!/usr/bin/env bash
# `make test`: builds, starts the services the tests need, runs all tests, stops the services.
# Tests that need a service fail (not skip) here when it is missing: IAP_REQUIRE_SERVICES=1.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

# Quiet, so that the test runner's summary stays the last line of the output.
cleanup() {
  bash deploy/local/broker.sh stop >/dev/null 2>&1 || true
  bash deploy/local/postgres.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

swift build --build-tests
eval "export $(bash deploy/local/broker.sh start)"
eval "export $(bash deploy/local/postgres.sh start)"
export IAP_TEST_BROKERS="$KAFKA_BOOTSTRAP_SERVERS" IAP_TEST_POSTGRES_URL="$IAP_POSTGRES_URL" IAP_REQUIRE_SERVICES=1
export IAP_TEST_PYTHON="$DEPS/venv/bin/python" IAP_TEST_PROMETHEUS_BIN="$DEPS/prometheus/usr/bin"
unset KAFKA_BOOTSTRAP_SERVERS
swift test --skip-build "$@"
