#!/usr/bin/env bash
# Start N Dask workers on this host for dmcsvm, in the background (or one in the foreground).
#
#   cluster/start-workers.sh SCHEDULER_ADDRESS | --scheduler-file FILE
#                            [-n N] [--nthreads T] [--memory-limit 8GiB] [--host H]
#                            [--tls-dir DIR] [--name PREFIX] [--local-directory DIR]
#                            [--run-dir DIR] [--config FILE] [--wait SECONDS] [--foreground]
#
#   SCHEDULER_ADDRESS  tcp://host:8786, or tls://host:8786 with --tls-dir
#   --scheduler-file F the scheduler.json written by start-scheduler.sh (shared storage)
#   -n, --nworkers N   worker processes (DMCSVM_NWORKERS; default 1). Each is a separate process
#                      (with its own nanny) holding some of dmcsvm's row partitions
#   --nthreads T       threads per worker (DMCSVM_NTHREADS; default 1: dmcsvm makes one partition
#                      per worker thread, and BLAS threads inside a round use the cores)
#   --memory-limit M   per worker process (DMCSVM_MEMORY_LIMIT; default: RAM / N); the nanny
#                      kills a worker above 95% of it (cluster/dask-config.yaml)
#   --host H           address the workers listen on and advertise (DMCSVM_WORKER_HOST;
#                      default auto: the address through which this host reaches the scheduler)
#   --tls-dir DIR      connect with DIR/ca.pem, DIR/worker.pem, DIR/worker-key.pem (DMCSVM_TLS_DIR)
#   --name PREFIX      worker names PREFIX-0 .. PREFIX-(N-1) (default: the host name)
#   --local-directory  scratch space of the workers (default: Dask's, under the temp dir)
#   --run-dir DIR      pid and log files (DMCSVM_RUN_DIR; default ./dask-run)
#   --config FILE      Dask config (DMCSVM_DASK_CONFIG; default cluster/dask-config.yaml)
#   --wait S           wait up to S seconds for every worker to register (default 60; 0 = no)
#   --death-timeout T  exit when the scheduler has been unreachable for T seconds (default:
#                      keep trying to reconnect forever)
#   --foreground       replace this shell by one worker (containers, batch jobs; needs -n 1)
#
# Writes RUN_DIR/worker-PREFIX-k.{pid,log}. Stop with cluster/stop.sh --run-dir DIR.
set -euo pipefail
source "$(dirname "$0")/_common.sh"

scheduler=""
scheduler_file=""
nworkers="${DMCSVM_NWORKERS:-1}"
nthreads="${DMCSVM_NTHREADS:-1}"
memory_limit="${DMCSVM_MEMORY_LIMIT:-auto}"
host="${DMCSVM_WORKER_HOST:-auto}"
prefix="$HOSTNAME_"
local_dir=""
wait_s=60
death_timeout=""
foreground=0
while [ $# -gt 0 ]; do
  case "$1" in
    --scheduler-file) need_value "$@"; scheduler_file="$2"; shift 2 ;;
    -n|--nworkers) need_value "$@"; nworkers="$2"; shift 2 ;;
    --nthreads) need_value "$@"; nthreads="$2"; shift 2 ;;
    --memory-limit) need_value "$@"; memory_limit="$2"; shift 2 ;;
    --host) need_value "$@"; host="$2"; shift 2 ;;
    --tls-dir) need_value "$@"; TLS_DIR="$2"; shift 2 ;;
    --name) need_value "$@"; prefix="$2"; shift 2 ;;
    --local-directory) need_value "$@"; local_dir="$2"; shift 2 ;;
    --run-dir) need_value "$@"; RUN_DIR="$2"; shift 2 ;;
    --config) need_value "$@"; DASK_CONFIG_FILE="$2"; shift 2 ;;
    --wait) need_value "$@"; wait_s="$2"; shift 2 ;;
    --death-timeout) need_value "$@"; death_timeout="$2"; shift 2 ;;
    --foreground) foreground=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$scheduler" ] || die "one scheduler address only (got '$scheduler' and '$1')"
       scheduler="$1"; shift ;;
  esac
done
[ -n "$scheduler" ] || [ -n "$scheduler_file" ] || die "give the scheduler address (tcp://host:8786) or --scheduler-file FILE"
[ -z "$scheduler" ] || [ -z "$scheduler_file" ] || die "give the scheduler address or --scheduler-file, not both"
case "$nworkers" in ''|*[!0-9]*|0) die "-n must be a positive number of workers, got '$nworkers'" ;; esac
case "$nthreads" in ''|*[!0-9]*|0) die "--nthreads must be a positive number, got '$nthreads'" ;; esac
case "$wait_s" in ''|*[!0-9]*) die "--wait must be a whole number of seconds, got '$wait_s'" ;; esac
if [ -n "$TLS_DIR" ] && [ -n "$scheduler" ] && [ "${scheduler#tls://}" = "$scheduler" ]; then
  die "with --tls-dir the scheduler address must start with tls://, got '$scheduler'"
fi
if [ "$memory_limit" = auto ] && [ "$nworkers" -gt 1 ]; then
  # Dask's 'auto' gives every process all of the RAM; split it between the N workers
  memory_limit="$(awk -v n="$nworkers" '/^MemTotal:/ {printf "%d", $2 * 1024 / n}' /proc/meminfo 2>/dev/null || echo auto)"
  [ -n "$memory_limit" ] || memory_limit=auto
fi
check_tools
check_tls worker
mkdir -p "$RUN_DIR"
RUN_DIR="$(cd "$RUN_DIR" && pwd)"

worker_args() {  # worker_args NAME
  args=(worker)
  if [ -n "$scheduler" ]; then args+=("$scheduler"); else args+=(--scheduler-file "$scheduler_file"); fi
  args+=(--name "$1" --nworkers 1 --nthreads "$nthreads" --memory-limit "$memory_limit"
         --no-dashboard "${TLS_ARGS[@]}")
  [ "$host" = auto ] || args+=(--host "$host")
  [ -z "$local_dir" ] || args+=(--local-directory "$local_dir")
  [ -z "$death_timeout" ] || args+=(--death-timeout "$death_timeout")
}

if [ "$foreground" = 1 ]; then
  [ "$nworkers" = 1 ] || die "--foreground runs one worker; got -n $nworkers"
  worker_args "$prefix"
  exec "$DASK" "${args[@]}"
fi

names=()
for ((k = 0; k < nworkers; k++)); do
  name="$prefix-$k"
  worker_args "$name"
  launch "worker-$name" "$DASK" "${args[@]}"
  names+=("$name")
done

[ "$wait_s" -gt 0 ] || { printf 'started worker %s\n' "${names[@]}"; exit 0; }
# a worker logs "Registered to: <scheduler>" once the scheduler accepted it
deadline=$((SECONDS + wait_s))
for name in "${names[@]}"; do
  until grep -q "Registered to" "$RUN_DIR/worker-$name.log" 2>/dev/null; do
    alive "$RUN_DIR/worker-$name.pid" || fail_started "worker-$name"
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "$(basename "$0"): worker $name did not register within ${wait_s}s; last lines of $RUN_DIR/worker-$name.log:" >&2
      tail -n 20 "$RUN_DIR/worker-$name.log" >&2
      exit 1
    fi
    sleep 0.2
  done
  echo "worker $name registered"
done
