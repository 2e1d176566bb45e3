# Shared helpers for the local-environment scripts (sourced, not run).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEPS="$ROOT/.deps"
RUN="$DEPS/run"
mkdir -p "$RUN"

log() { printf '[%s] %s\n' "$(basename "$0" .sh)" "$*" >&2; }

# A TCP port on the loopback interface that nothing listens on right now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Waits until `command...` succeeds, up to $1 seconds.
wait_for() {
  local seconds=$1; shift
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then return 1; fi
    sleep 0.2
  done
}

port_open() { python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1).close()" "$1"; }

# Services a script started, stopped by `stop_started_services` (use it as the EXIT trap).
STARTED_SERVICES=()
stop_started_services() {
  for service in "${STARTED_SERVICES[@]}"; do bash "$ROOT/deploy/local/$service.sh" stop >/dev/null 2>&1 || true; done
}

# A file of the local broker's: `broker_file env` is where it says KAFKA_BOOTSTRAP_SERVERS (also `pid`, `log`). With
# IAP_BROKER_INSTANCE set, those of a broker of that name, beside the default one (the benchmark's: `bench`).
broker_file() { echo "$RUN/broker${IAP_BROKER_INSTANCE:+-$IAP_BROKER_INSTANCE}.$1"; }

# The broker in KAFKA_BOOTSTRAP_SERVERS, else the local one (stopped at the end if started here, left running
# if it already was).
use_broker() {
  # The local Tansu 0.6 keeps a leader that sent LeaveGroup mid-rebalance as its group's leader, and the group never
  # completes a rebalance again: workers on it go silently at shutdown and are expelled when their session ends. Also
  # when KAFKA_BOOTSTRAP_SERVERS names the local broker already running.
  if [ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
    if [ -f "$(broker_file env)" ] && [ "$(cat "$(broker_file env)")" = "KAFKA_BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP_SERVERS" ]; then
      export IAP_LEAVE_GROUP="${IAP_LEAVE_GROUP:-false}"
    fi
    return
  fi
  export IAP_LEAVE_GROUP="${IAP_LEAVE_GROUP:-false}"
  local output; output=$(bash "$ROOT/deploy/local/broker.sh" start 2>&1)
  eval "export $(grep '^KAFKA_BOOTSTRAP_SERVERS=' <<<"$output")"
  grep -q "already running" <<<"$output" || STARTED_SERVICES+=(broker)
}

# A fresh database NAME_<time> on the local PostgreSQL (stopped at the end if started here), so that earlier
# runs do not count; its URL in FRESH_DATABASE_URL.
use_fresh_database() {
  local output; output=$(bash "$ROOT/deploy/local/postgres.sh" start 2>&1)
  eval "export $(grep '^IAP_POSTGRES_URL=' <<<"$output")"
  grep -q "already running" <<<"$output" || STARTED_SERVICES+=(postgres)
  # A run's database stays for a look after it, until the next run of its kind drops it (one database a run, kept,
  # grew the benchmark's cluster by ~40 MB a run). One still in use (another run of the kind) is left alone.
  local old
  for old in $(psql "$IAP_POSTGRES_URL" -Atc "SELECT datname FROM pg_database WHERE datname ~ '^$1_[0-9]+\$'"); do
    psql "$IAP_POSTGRES_URL" -qc "DROP DATABASE IF EXISTS $old" >/dev/null 2>&1 || true
  done
  local db; db="$1_$(date +%s)"
  psql "$IAP_POSTGRES_URL" -qc "CREATE DATABASE $db" >/dev/null
  FRESH_DATABASE_URL="${IAP_POSTGRES_URL%/*}/$db"
}
