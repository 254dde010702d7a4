#!/usr/bin/env bash
# Start a Dask scheduler for dmcsvm in the background (or in the foreground for containers).
#
#   cluster/start-scheduler.sh [--host 0.0.0.0] [--port 8786] [--tls-dir DIR]
#                              [--dashboard 127.0.0.1:8787 | --no-dashboard]
#                              [--run-dir DIR] [--config FILE] [--wait SECONDS] [--foreground]
#
#   --host H        address to listen on (DMCSVM_HOST; default 127.0.0.1: this machine only;
#                   give the host's address or 0.0.0.0 for workers on other hosts)
#   --port P        scheduler port (DMCSVM_PORT; default 8786)
#   --tls-dir DIR   serve tls:// with DIR/ca.pem, DIR/scheduler.pem, DIR/scheduler-key.pem
#                   (DMCSVM_TLS_DIR; made by cluster/tls/make-certs.sh); unencrypted
#                   connections are then refused
#   --dashboard A   dashboard address (DMCSVM_DASHBOARD; default 127.0.0.1:8787, reach it
#                   through an ssh tunnel); --no-dashboard for none
#   --run-dir DIR   pid, log and scheduler files (DMCSVM_RUN_DIR; default ./dask-run)
#   --config FILE   Dask config (DMCSVM_DASK_CONFIG; default cluster/dask-config.yaml)
#   --wait S        wait up to S seconds for the scheduler to listen (default 30)
#   --idle-timeout T  exit after T (e.g. 1h) without work or clients (default: never)
#   --foreground    replace this shell by the scheduler (containers, batch jobs): no pid file
#
# Prints the scheduler address on success (stdout), and the dashboard's URL (stderr; needs
# bokeh: pip install "dmcsvm[dask]"); writes RUN_DIR/scheduler.{pid,log,json}.
# (scheduler.json is Dask's scheduler file: `dask worker --scheduler-file` reads it.)
# Stop with cluster/stop.sh --run-dir DIR.
set -euo pipefail
source "$(dirname "$0")/_common.sh"

host="${DMCSVM_HOST:-127.0.0.1}"
port="${DMCSVM_PORT:-8786}"
dashboard="${DMCSVM_DASHBOARD:-127.0.0.1:8787}"
wait_s=30
idle_timeout=""
foreground=0
while [ $# -gt 0 ]; do
  case "$1" in
    --host) need_value "$@"; host="$2"; shift 2 ;;
    --port) need_value "$@"; port="$2"; shift 2 ;;
    --tls-dir) need_value "$@"; TLS_DIR="$2"; shift 2 ;;
    --dashboard) need_value "$@"; dashboard="$2"; shift 2 ;;
    --no-dashboard) dashboard=""; shift ;;
    --run-dir) need_value "$@"; RUN_DIR="$2"; shift 2 ;;
    --config) need_value "$@"; DASK_CONFIG_FILE="$2"; shift 2 ;;
    --wait) need_value "$@"; wait_s="$2"; shift 2 ;;
    --idle-timeout) need_value "$@"; idle_timeout="$2"; shift 2 ;;
    --foreground) foreground=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
case "$port" in ''|*[!0-9]*) die "--port must be a number, got '$port'" ;; esac
case "$wait_s" in ''|*[!0-9]*) die "--wait must be a whole number of seconds, got '$wait_s'" ;; esac
check_tools
check_tls scheduler
mkdir -p "$RUN_DIR"
RUN_DIR="$(cd "$RUN_DIR" && pwd)"

args=(scheduler --host "$host" --port "$port" "${TLS_ARGS[@]}"
      --scheduler-file "$RUN_DIR/scheduler.json")
if [ -n "$dashboard" ]; then args+=(--dashboard --dashboard-address "$dashboard"); else args+=(--no-dashboard); fi
[ -z "$idle_timeout" ] || args+=(--idle-timeout "$idle_timeout")

if [ "$foreground" = 1 ]; then
  exec "$DASK" "${args[@]}"
fi

rm -f "$RUN_DIR/scheduler.json"
launch scheduler "$DASK" "${args[@]}"
pid=$LAUNCHED_PID

# ready when Dask has written the scheduler file (it does so once it listens)
deadline=$((SECONDS + wait_s))
while [ ! -s "$RUN_DIR/scheduler.json" ]; do
  kill -0 "$pid" 2>/dev/null || fail_started scheduler
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "$(basename "$0"): the scheduler (pid $pid) is not listening after ${wait_s}s; see $RUN_DIR/scheduler.log" >&2
    exit 1
  fi
  sleep 0.2
done
address="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["address"])' "$RUN_DIR/scheduler.json" 2>/dev/null \
           || sed -n 's/.*"address": *"\([^"]*\)".*/\1/p' "$RUN_DIR/scheduler.json")"
echo "$address"
if [ -n "$dashboard" ]; then
  # Dask logs the dashboard's URL when it serves one (bokeh installed), else says it does not
  url="$(sed -n 's/.*dashboard at: *\(http[^ ]*\).*/\1/p' "$RUN_DIR/scheduler.log" | tail -n 1)"
  if [ -n "$url" ]; then
    echo "dashboard: $url" >&2
  else
    echo "dashboard: none (bokeh is not installed where the scheduler runs: pip install \"dmcsvm[dask]\")" >&2
  fi
fi
