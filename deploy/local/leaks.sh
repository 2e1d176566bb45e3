#!/usr/bin/env bash
# `make leaks`: a short pipeline run under LeakSanitizer. Builds every product with AddressSanitizer (in
# .build/asan), runs `iap-harness demo` (200 submissions: verifier, granter, finisher, sweeper as processes,
# stopped with SIGTERM), and fails when a worker reports a leak whose stack passes through this project's
# sources. librdkafka/OpenSSL/Swift runtime allocations may be suppressed in deploy/local/lsan.supp.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
swift build --scratch-path .build/asan -Xswiftc -sanitize=address >&2
trap stop_started_services EXIT
use_broker
reports="$RUN/leaks"
rm -rf "$reports" && mkdir -p "$reports"
# Workers report to $reports/asan.<executable>.<pid> (container-overflow checks would need an instrumented
# stdlib). The demo CLI itself is not judged: a leak report at its exit would also cut its output short.
options="log_path=$reports/asan:log_exe_name=1:detect_container_overflow=0"
export LSAN_OPTIONS="suppressions=$ROOT/deploy/local/lsan.supp:print_suppressions=0"
status=0
ASAN_OPTIONS="detect_leaks=0:$options" IAP_WORKER_WRAPPER="env ASAN_OPTIONS=detect_leaks=1:$options" \
  IAP_SCHEMAS_DIR="$ROOT/schemas" .build/asan/debug/iap-harness demo --brokers "$KAFKA_BOOTSTRAP_SERVERS" --purchases 200 --users 20 \
  >"$reports/demo.txt" 2>&1 || status=$?
grep -q "books balance" "$reports/demo.txt" || { log "the demo did not complete (exit $status):"; tail -20 "$reports/demo.txt" >&2; exit 1; }
python3 - "$reports" "$ROOT/Sources/" <<'PY'
import glob, os, re, sys
reports, sources = sys.argv[1], sys.argv[2]
failed = False
workers = sorted(glob.glob(os.path.join(reports, "asan.iap-*")))
for path in workers:
    text = open(path, errors="replace").read()
    summary = re.search(r"SUMMARY: \S+: (.*)", text)
    ours = [block for block in re.split(r"\n(?=(?:Direct|Indirect) leak)", text)
            if block.startswith(("Direct leak", "Indirect leak")) and sources in block]
    print(f"{os.path.basename(path)}: {summary.group(1) if summary else 'no summary'}; through the project's sources: {len(ours)}")
    for block in ours[:3]:
        print("\n".join(line for line in block.splitlines()[:12]))
    failed |= bool(ours)
others = [os.path.basename(p) for p in glob.glob(os.path.join(reports, "asan.*")) if p not in workers]
print(f"worker processes with a report: {len(workers)} (none: LeakSanitizer found nothing at their exit)")
if others:
    print(f"other reports (not leaks of the workers): {', '.join(sorted(others))}")
    failed = True
sys.exit(1 if failed else 0)
PY
