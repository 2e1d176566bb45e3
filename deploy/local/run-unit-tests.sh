#!/usr/bin/env bash
# `make test-unit`: the unit tests alone (Tests/unit-tests.txt), with no service and no child process allowed: a listed
# test that needs a broker, PostgreSQL or Python, or starts a process, fails here. Arguments go to `swift test`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

# A line `Target` selects the target's tests, `Target.Suite` one suite's: test ids read Target.Suite/test().
filters=()
while read -r entry; do
  [[ -z $entry || $entry == '#'* ]] && continue
  filters+=(--filter "^${entry//./\\.}[./]")
done < Tests/unit-tests.txt

unset IAP_TEST_BROKERS IAP_TEST_POSTGRES_URL IAP_TEST_PYTHON
export IAP_REQUIRE_SERVICES=1 IAP_UNIT_TESTS_ONLY=1
swift test "${filters[@]}" "$@"
