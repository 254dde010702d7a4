# Shared by start-scheduler.sh, start-workers.sh and stop.sh (sourced, not run).
# Every setting has a flag and an environment variable; flags win.

CLUSTER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DASK="${DMCSVM_DASK:-dask}"                       # the dask command line (distributed)
RUN_DIR="${DMCSVM_RUN_DIR:-$PWD/dask-run}"        # pid and log files
DASK_CONFIG_FILE="${DMCSVM_DASK_CONFIG:-$CLUSTER_DIR/dask-config.yaml}"
TLS_DIR="${DMCSVM_TLS_DIR:-}"                     # make-certs.sh output; empty = plain TCP
HOSTNAME_="$(hostname)"

die() { echo "$(basename "$0"): $*" >&2; exit 2; }

# usage: the header comment of the running script (its lines after the #! line up to the first
# line that is not a comment), without the leading "# "
usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }

need_value() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"; }

check_tools() {
  command -v "$DASK" >/dev/null 2>&1 || die "the dask command line '$DASK' was not found (pip install distributed, or set DMCSVM_DASK)"
  command -v setsid >/dev/null 2>&1 || die "setsid (util-linux) is required to run processes in the background"
  [ -f "$DASK_CONFIG_FILE" ] || die "Dask config file $DASK_CONFIG_FILE does not exist"
  export DASK_CONFIG="$DASK_CONFIG_FILE"
}

# check_tls ROLE: the CA, certificate and key of ROLE under $TLS_DIR exist; sets TLS_ARGS
check_tls() {
  TLS_ARGS=()
  [ -n "$TLS_DIR" ] || return 0
  local f
  for f in ca.pem "$1.pem" "$1-key.pem"; do
    [ -r "$TLS_DIR/$f" ] || die "TLS: $TLS_DIR/$f is missing or unreadable (make it with cluster/tls/make-certs.sh $TLS_DIR)"
  done
  TLS_ARGS=(--protocol tls --tls-ca-file "$TLS_DIR/ca.pem" --tls-cert "$TLS_DIR/$1.pem"
            --tls-key "$TLS_DIR/$1-key.pem")
  # refuse unencrypted connections in this process too
  export DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION=True
}

# alive PIDFILE: the process of a pid file written on this host still runs
alive() {
  local pid host
  { read -r pid; read -r host; } < "$1" || return 1
  [ "$host" = "$HOSTNAME_" ] && kill -0 "$pid" 2>/dev/null
}

# launch NAME CMD...: run CMD in its own session (so stop.sh can end it with its children),
# output to $RUN_DIR/NAME.log, pid and host to $RUN_DIR/NAME.pid
launch() {
  local name="$1"; shift
  local pidfile="$RUN_DIR/$name.pid"
  if [ -f "$pidfile" ] && alive "$pidfile"; then
    die "$name is already running (pid $(head -n1 "$pidfile"), $pidfile); stop it with cluster/stop.sh --run-dir $RUN_DIR"
  fi
  mkdir -p "$RUN_DIR"
  # a background job of a script is not a process-group leader, so setsid execs in place:
  # $! is the dask process and the id of its new process group
  setsid "$@" > "$RUN_DIR/$name.log" 2>&1 < /dev/null &
  printf '%s\n%s\n' "$!" "$HOSTNAME_" > "$pidfile"
  LAUNCHED_PID=$!
}

# fail_started NAME: the process died during start-up; show why
fail_started() {
  echo "$(basename "$0"): $1 exited during start-up; last lines of $RUN_DIR/$1.log:" >&2
  tail -n 20 "$RUN_DIR/$1.log" >&2
  rm -f "$RUN_DIR/$1.pid"
  exit 1
}
