#!/usr/bin/env bash
# Starts or stops a throwaway PostgreSQL cluster on a free loopback port (trust auth, loopback only).
#   postgres.sh start   prints IAP_POSTGRES_URL=postgres://postgres@127.0.0.1:PORT/postgres
#   postgres.sh stop
#   postgres.sh down|up   stops and restarts the running server on the same port and data (an outage)
# IAP_POSTGRES_INSTANCE=NAME: a cluster of its own beside the default one (`make bench` runs on `bench`).
# IAP_POSTGRES_FSYNC=on|off (off): on for durable commits, as in production; off keeps tests fast.
# IAP_POSTGRES_EXTRA: more server options, e.g. "-c shared_preload_libraries=pg_stat_statements" to see which statements
#   a benchmark's time goes to (with IAP_POSTGRES_INSTANCE=stats; then IAP_STORE_URL=… make bench, see docs/benchmarks.md).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SUFFIX="${IAP_POSTGRES_INSTANCE:+-$IAP_POSTGRES_INSTANCE}"
ENVFILE="$RUN/postgres$SUFFIX.env"
DIRFILE="$RUN/postgres$SUFFIX.dir"
FSYNC="${IAP_POSTGRES_FSYNC:-off}"
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)

# PostgreSQL refuses to run as root: as root, the cluster belongs to the postgres OS user, and lives
# under .deps/ when that user can reach it (a checkout under /root is not reachable), else under /tmp.
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
data_dir() {
  if [ "$(id -u)" -ne 0 ] || runuser -u postgres -- test -x "$DEPS" 2>/dev/null; then
    echo "$DEPS/pg$SUFFIX"
  else
    echo "/tmp/iap-pipeline-pg-$(echo "$ROOT" | md5sum | cut -c1-8)$SUFFIX"
  fi
}

start() {
  [ -n "$BIN" ] || { log "PostgreSQL is not installed: run make bootstrap"; exit 1; }
  local dir; dir=$(data_dir)
  if [ -f "$ENVFILE" ] && as_pg "$BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    log "already running"; cat "$ENVFILE"; return
  fi
  mkdir -p "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_pg "$BIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$RUN/postgres-initdb.log" 2>&1 \
      || { tail -20 "$RUN/postgres-initdb.log" >&2; exit 1; }
  fi
  local port; port=$(free_port)
  as_pg "$BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
    -o "-p $port -h 127.0.0.1 -k $dir -c fsync=$FSYNC -c max_connections=200 ${IAP_POSTGRES_EXTRA:-}" start >/dev/null \
    || { tail -20 "$dir/postgres.log" >&2; exit 1; }
  echo "IAP_POSTGRES_URL=postgres://postgres@127.0.0.1:$port/postgres" >"$ENVFILE"
  echo "$dir" >"$DIRFILE"
  log "postgres up on 127.0.0.1:$port ($dir)"
  cat "$ENVFILE"
}

# down/up: an outage of the running server (same data, same port), e.g. for `make chaos`.
down() {
  as_pg "$BIN/pg_ctl" -D "$(cat "$DIRFILE")/data" -m fast -w stop >/dev/null
  log "postgres down"
}

up() {
  local dir port; dir=$(cat "$DIRFILE"); port=$(sed 's/.*127.0.0.1:\([0-9]*\).*/\1/' "$ENVFILE")
  as_pg "$BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
    -o "-p $port -h 127.0.0.1 -k $dir -c fsync=$FSYNC -c max_connections=200 ${IAP_POSTGRES_EXTRA:-}" start >/dev/null \
    || { tail -20 "$dir/postgres.log" >&2; exit 1; }
  log "postgres up again on 127.0.0.1:$port"
}

stop() {
  [ -f "$DIRFILE" ] || return 0
  local dir; dir=$(cat "$DIRFILE")
  as_pg "$BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -f "$ENVFILE" "$DIRFILE"
  log "postgres stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  down) down ;;
  up) up ;;
  *) echo "usage: $0 start|stop|down|up" >&2; exit 2 ;;
esac
