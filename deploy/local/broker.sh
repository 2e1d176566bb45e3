#!/usr/bin/env bash
# Starts or stops the local Kafka-compatible broker (Tansu, in-memory: it loses everything on stop).
#   broker.sh start [TOPIC[:PARTITIONS]...]   prints KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:PORT
#   broker.sh stop
# IAP_BROKER_INSTANCE=NAME: a broker of that name, beside the default one (`make bench` runs on `bench`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TANSU="$DEPS/bin/tansu"
PIDFILE="$(broker_file pid)"
ENVFILE="$(broker_file env)"
LOGFILE="$(broker_file log)"

start() {
  [ -x "$TANSU" ] || { log "tansu is not installed: run make bootstrap"; exit 1; }
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    log "already running ($(cat "$ENVFILE"))"
  else
    local port; port=$(free_port)
    nohup "$TANSU" broker --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
      >"$LOGFILE" 2>&1 &
    echo $! >"$PIDFILE"
    echo "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$port" >"$ENVFILE"
    wait_for 30 port_open "$port" || { log "broker did not open port $port; log:"; tail -20 "$LOGFILE" >&2; exit 1; }
    log "broker up on 127.0.0.1:$port (pid $(cat "$PIDFILE"))"
  fi
  local servers; servers=$(cut -d= -f2 "$ENVFILE")
  for spec in "$@"; do
    "$TANSU" topic create "${spec%%:*}" --partitions "$( [[ $spec == *:* ]] && echo "${spec##*:}" || echo 4 )" \
      --broker "tcp://$servers" >/dev/null 2>&1 || log "topic ${spec%%:*}: not created (exists?)"
  done
  cat "$ENVFILE"
}

stop() {
  if [ -f "$PIDFILE" ]; then
    kill "$(cat "$PIDFILE")" 2>/dev/null || true
    rm -f "$PIDFILE" "$ENVFILE"
    log "broker stopped"
  fi
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop ;;
  *) echo "usage: $0 start [TOPIC[:PARTITIONS]...] | stop" >&2; exit 2 ;;
esac
