#!/usr/bin/env bash
# Stop the scheduler and workers that start-scheduler.sh / start-workers.sh started on this host.
#
#   cluster/stop.sh [--run-dir DIR] [--timeout SECONDS] [--workers-only]
#
# Workers first, then the scheduler. Each gets SIGTERM (Dask closes cleanly: a worker's nanny
# ends its worker process) and SIGKILL after --timeout seconds (default 20). Signals go to the
# process group that start-*.sh created, so nannies' children end too. Pid files written on
# another host (a run dir on shared storage) are left alone. Exit status 1 if something
# survived SIGKILL.
set -uo pipefail
source "$(dirname "$0")/_common.sh"

timeout_s=20
workers_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --run-dir) need_value "$@"; RUN_DIR="$2"; shift 2 ;;
    --timeout) need_value "$@"; timeout_s="$2"; shift 2 ;;
    --workers-only) workers_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
case "$timeout_s" in ''|*[!0-9]*) die "--timeout must be a whole number of seconds, got '$timeout_s'" ;; esac
[ -d "$RUN_DIR" ] || { echo "nothing to stop: no run dir $RUN_DIR"; exit 0; }

# group_alive PID: a process of the group led by PID is still running
group_alive() { kill -0 -- "-$1" 2>/dev/null || kill -0 "$1" 2>/dev/null; }

stop_files() {  # stop_files PIDFILE...
  local f pid host pids=() files=()
  for f in "$@"; do
    [ -f "$f" ] || continue
    { read -r pid; read -r host; } < "$f" || { rm -f "$f"; continue; }
    if [ "$host" != "$HOSTNAME_" ]; then echo "skipping $f (started on $host)"; continue; fi
    if group_alive "$pid"; then
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
      pids+=("$pid"); files+=("$f")
      echo "stopping $(basename "$f" .pid) (pid $pid)"
    else
      rm -f "$f"
    fi
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  local deadline=$((SECONDS + timeout_s)) left
  while :; do
    left=0
    for pid in "${pids[@]}"; do group_alive "$pid" && left=1; done
    [ "$left" = 1 ] || break
    [ "$SECONDS" -lt "$deadline" ] || break
    sleep 0.2
  done
  for pid in "${pids[@]}"; do
    if group_alive "$pid"; then
      echo "pid $pid did not stop within ${timeout_s}s: SIGKILL" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    fi
  done
  sleep 0.2
  for k in "${!pids[@]}"; do
    if group_alive "${pids[$k]}"; then status=1; echo "pid ${pids[$k]} survived SIGKILL" >&2
    else rm -f "${files[$k]}"; fi
  done
}

status=0
shopt -s nullglob
stop_files "$RUN_DIR"/worker-*.pid
[ "$workers_only" = 1 ] || stop_files "$RUN_DIR"/scheduler.pid
exit $status
