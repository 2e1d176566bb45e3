#!/usr/bin/env bash
# `make demo`: the end-to-end pipeline demo arrives with the pipeline itself (issue: "The pipeline").
# Until then it shows the environment it will run on.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
swift build -c release --product iapctl >/dev/null
echo "The demo will start the local broker and an SQLite store, launch the four workers and push"
echo "1,000 signed purchases through them. The workers are not built yet; this machine is ready:"
.build/release/iapctl version
