# shellcheck shell=bash
# common.sh: what every end-to-end test and the demo source. It owns the per-run temp dir, free
# ports, starting and stopping the helpers (Prometheus, VictoriaMetrics, the fake kube-apiserver,
# the adapter), all bound to 127.0.0.1, and the assertions that end in "N passed, N failed".
#
# DESIGN: every server is started in its own process group (setsid) and registered; one EXIT trap
# stops them all (SIGTERM to the group, SIGKILL after 10 s), runs cma_on_exit hooks and removes the
# temp dir (kept with CMA_KEEP_TMP=1). Scripts that source this must not install their own EXIT
# trap (use cma_on_exit) and should not use `set -e`: the helpers return non-zero on failure and
# the assertions count failures instead of aborting. Readiness is always polled against a
# generous deadline; timings never decide pass or fail.
#
# Environment knobs:
#   CMA_BIN       adapter binary (default build/custom-metrics-adapter, relative to the repo root)
#   CMA_WRAPPER   command prefix for the adapter, e.g. "valgrind --error-exitcode=99 --leak-check=full"
#   RELIST, V     --metrics-relist-interval (default 5s) and --v (default 2) for start_adapter
#   CMA_KEEP_TMP  1 = keep the temp dir; CMA_FIXTURES = recorded kube-apiserver fixtures
#   CMA_START_TIMEOUT  seconds to wait for a server to become ready (default 60; 180 with a wrapper)

if [ -n "${CMA_COMMON_SOURCED:-}" ]; then
  return 0
fi
CMA_COMMON_SOURCED=1

CMA_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CMA_ROOT=$(cd "$CMA_LIB/../.." && pwd)
if [ -z "${CMA_FIXTURES:-}" ]; then
  CMA_FIXTURES=$(cd "$CMA_ROOT/.." && pwd)/shared/fixtures/kube-apiserver
fi
export CMA_LIB CMA_ROOT CMA_FIXTURES

CMA_TMP=$(mktemp -d "${TMPDIR:-/tmp}/cma-e2e.XXXXXX") || {
  echo "common.sh: mktemp failed" >&2
  exit 1
}
export CMA_TMP
# Debian's python3 first on PATH: scripts/setup.sh installs the tests' Python modules
# (python3-jsonschema, python3-yaml) for it, and a version manager's shim that may come before it
# (pyenv's) costs about 0.35 s of CPU per start against 0.05 s, where the tests start Python
# thousands of times (free ports, JSON, the fake servers). Elsewhere PATH is left as it is.
if [ -x /usr/bin/python3 ] && [ "$(command -v python3)" != /usr/bin/python3 ]; then
  mkdir -p "$CMA_TMP/bin" && ln -s /usr/bin/python3 "$CMA_TMP/bin/python3" && PATH="$CMA_TMP/bin:$PATH"
fi
# cma_tmp: prints this run's temp dir (removed on exit unless CMA_KEEP_TMP=1).
cma_tmp() { printf '%s\n' "$CMA_TMP"; }

_cma_pids=()
_cma_exit_hooks=()
# cma_on_exit CMD...: run CMD (eval'd) at exit, before the servers are stopped.
cma_on_exit() { _cma_exit_hooks+=("$*"); }

cma_log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# _cma_alive PID: true while PID runs (a zombie counts as gone).
_cma_alive() {
  local state
  state=$(sed -n 's/^.*) \(.\).*$/\1/p' "/proc/$1/stat" 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ]
}

# _cma_spawn LOG CMD...: starts CMD in the background in a new process group, output to LOG
# (appended), stdin from /dev/null; registers it for cleanup; sets _CMA_SPAWNED to its pid (which
# is also its process group id). Runs in the calling shell so that `wait PID` works later.
_cma_spawn() {
  local log=$1
  shift
  if [[ $- == *m* ]]; then
    "$@" >>"$log" 2>&1 </dev/null &
  else
    setsid "$@" >>"$log" 2>&1 </dev/null &
  fi
  _CMA_SPAWNED=$!
  _cma_pids+=("$_CMA_SPAWNED")
}

_cma_forget() {
  local remaining=() p
  for p in "${_cma_pids[@]}"; do
    [ "$p" = "$1" ] || remaining+=("$p")
  done
  _cma_pids=("${remaining[@]}")
}

# cma_stop PID [TIMEOUT_S]: SIGTERM to PID's process group, SIGKILL after TIMEOUT_S (default 10);
# reaps it and returns its exit status.
cma_stop() {
  local pid=$1 timeout=${2:-10} deadline rc
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  deadline=$((SECONDS + timeout))
  while _cma_alive "$pid" && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.1
  done
  if _cma_alive "$pid"; then
    cma_log "process $pid ignored SIGTERM for ${timeout}s; sending SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
  rc=$?
  kill -KILL -- "-$pid" 2>/dev/null # leftovers of the group, if any
  _cma_forget "$pid"
  return "$rc"
}

_cma_cleanup() {
  local rc=$? hook p
  trap - EXIT
  for hook in "${_cma_exit_hooks[@]}"; do
    eval "$hook"
  done
  for p in "${_cma_pids[@]}"; do
    kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null
  done
  for p in "${_cma_pids[@]}"; do
    cma_stop "$p" 10
  done
  if [ "${CMA_KEEP_TMP:-0}" = 1 ]; then
    cma_log "kept $CMA_TMP"
  else
    rm -rf "$CMA_TMP"
  fi
  exit "$rc"
}
# No INT/TERM traps on purpose: bash runs the EXIT trap when those signals end it, and a trap
# action that runs while bash parses a multi-line command substitution fails with "unexpected
# EOF" in bash 5.2 (the script then keeps going instead of stopping).
trap _cma_cleanup EXIT

_cma_start_timeout() {
  if [ -n "${CMA_START_TIMEOUT:-}" ]; then
    echo "$CMA_START_TIMEOUT"
  elif [ -n "${CMA_WRAPPER:-}" ]; then
    echo 180
  else
    echo 60
  fi
}

# free_port: prints a TCP port on 127.0.0.1 that the OS reports free right now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# wait_http URL [TIMEOUT_S] [CURL_ARGS...]: polls until URL answers HTTP 200. Returns 0 when it
# does, 1 at the deadline (default 60 s), 2 as soon as $WAIT_PID (if set) has exited.
wait_http() {
  local url=$1 timeout=60 deadline code
  shift
  if [ $# -gt 0 ]; then
    timeout=$1
    shift
  fi
  deadline=$((SECONDS + timeout))
  while :; do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$@" "$url" 2>/dev/null)
    [ "$code" = 200 ] && return 0
    if [ -n "${WAIT_PID:-}" ] && ! _cma_alive "$WAIT_PID"; then
      return 2
    fi
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.2
  done
}

# _cma_wait_ready NAME PID LOG URL [CURL_ARGS...]: wait_http with the process's liveness; on
# failure prints the log tail. Returns 0 ready, 2 died with "address already in use" (retry on
# another port), 1 otherwise.
_cma_wait_ready() {
  local name=$1 pid=$2 log=$3 url=$4 rc
  shift 4
  WAIT_PID=$pid wait_http "$url" "$(_cma_start_timeout)" "$@"
  rc=$?
  [ $rc -eq 0 ] && return 0
  if [ $rc -eq 2 ] && grep -qi -E 'address already in use|bind: address' "$log" 2>/dev/null; then
    cma_stop "$pid" 2
    return 2
  fi
  if [ $rc -eq 2 ]; then
    cma_log "$name exited before it was ready; last lines of $log:"
  else
    cma_log "$name not ready at $url after $(_cma_start_timeout)s; last lines of $log:"
  fi
  tail -n 30 "$log" >&2
  cma_stop "$pid" 5
  return 1
}

# start_prometheus OM_FILE [RULES_FILE]: backfills OM_FILE (OpenMetrics) into a fresh TSDB with
# promtool, starts Prometheus on it (no scrape jobs, rules evaluated every second) and waits for
# /-/ready. Exports PROM_URL, PROM_PID, PROM_DIR, PROM_LOG.
start_prometheus() {
  local om=$1 rules=${2:-} dir port attempt rc
  [ -r "$om" ] || {
    cma_log "start_prometheus: cannot read $om"
    return 1
  }
  dir=$(mktemp -d "$CMA_TMP/prometheus.XXXX")
  if ! promtool tsdb create-blocks-from openmetrics "$om" "$dir/data" >"$dir/promtool.log" 2>&1; then
    cma_log "start_prometheus: promtool failed:"
    tail -n 20 "$dir/promtool.log" >&2
    return 1
  fi
  {
    echo "# Minimal test Prometheus: no scrape jobs; all data comes from backfilled blocks."
    echo "global:"
    echo "  scrape_interval: 15s"
    echo "  evaluation_interval: 1s"
    if [ -n "$rules" ]; then
      echo "rule_files:"
      echo "  - \"$(realpath "$rules")\""
    fi
    echo "storage:"
    echo "  tsdb:"
    echo "    # The backfilled blocks reach an hour into the future. Without an out-of-order window"
    echo "    # the head rejects recording-rule samples at 'now' as out of bounds."
    echo "    out_of_order_time_window: 1d"
  } >"$dir/prometheus.yml"
  PROM_LOG="$dir/prometheus.log"
  for attempt in 1 2 3; do
    port=$(free_port)
    _cma_spawn "$PROM_LOG" prometheus --config.file="$dir/prometheus.yml" \
      --storage.tsdb.path="$dir/data" --storage.tsdb.retention.time=30d \
      --web.listen-address="127.0.0.1:$port" --log.level=warn
    _cma_wait_ready prometheus "$_CMA_SPAWNED" "$PROM_LOG" "http://127.0.0.1:$port/-/ready"
    rc=$?
    if [ $rc -eq 0 ]; then
      export PROM_URL="http://127.0.0.1:$port" PROM_PID=$_CMA_SPAWNED PROM_DIR=$dir PROM_LOG
      return 0
    fi
    [ $rc -eq 2 ] || return 1
    cma_log "start_prometheus: port $port was taken (attempt $attempt), retrying"
  done
  return 1
}

# start_victoria_metrics PROM_TEXT_FILE [MATCH]: starts VictoriaMetrics, imports the file
# (Prometheus text format, ms timestamps) through /api/v1/import/prometheus, forces a flush and
# waits until /api/v1/series?match[]=MATCH (default {__name__!=""}) returns something.
# Exports VM_URL, VM_PID, VM_DIR, VM_LOG. VM_ARGS (optional) adds flags, e.g. -search.maxQueryLen=300.
start_victoria_metrics() {
  local file=$1 match=${2:-'{__name__!=""}'} dir port attempt rc deadline code
  [ -r "$file" ] || {
    cma_log "start_victoria_metrics: cannot read $file"
    return 1
  }
  dir=$(mktemp -d "$CMA_TMP/victoria-metrics.XXXX")
  VM_LOG="$dir/victoria-metrics.log"
  for attempt in 1 2 3; do
    port=$(free_port)
    # VM_ARGS: further flags, e.g. -search.maxQueryLen=300 (word-split on purpose)
    # shellcheck disable=SC2086
    _cma_spawn "$VM_LOG" victoria-metrics -httpListenAddr="127.0.0.1:$port" \
      -storageDataPath="$dir/data" -retentionPeriod=100y -search.disableCache ${VM_ARGS:-}
    _cma_wait_ready victoria-metrics "$_CMA_SPAWNED" "$VM_LOG" "http://127.0.0.1:$port/health"
    rc=$?
    [ $rc -eq 0 ] && break
    [ $rc -eq 2 ] || return 1
    cma_log "start_victoria_metrics: port $port was taken (attempt $attempt), retrying"
  done
  [ $rc -eq 0 ] || return 1
  export VM_URL="http://127.0.0.1:$port" VM_PID=$_CMA_SPAWNED VM_DIR=$dir VM_LOG
  code=$(curl -s -o "$dir/import.out" -w '%{http_code}' --max-time 60 --data-binary "@$file" \
    "$VM_URL/api/v1/import/prometheus")
  if [ "$code" != 204 ] && [ "$code" != 200 ]; then
    cma_log "start_victoria_metrics: import answered $code: $(head -c 500 "$dir/import.out")"
    return 1
  fi
  deadline=$((SECONDS + $(_cma_start_timeout)))
  while :; do
    curl -s -o /dev/null --max-time 10 "$VM_URL/internal/force_flush"
    if curl -s --max-time 10 -G "$VM_URL/api/v1/series" --data-urlencode "match[]=$match" |
      jq -e '.data | length > 0' >/dev/null 2>&1; then
      return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      cma_log "start_victoria_metrics: imported series never became visible"
      tail -n 20 "$VM_LOG" >&2
      return 1
    fi
    sleep 0.5
  done
}

# start_fake_kube [EXTRA_PODS_JSON] [FAKE_FLAGS...]: starts tests/lib/fake_kube_apiserver.py over
# TLS (a fresh self-signed certificate for IP:127.0.0.1) and writes a kubeconfig for it (bearer
# token "fake-admin"). Exports KUBE_URL, KUBE_KUBECONFIG, KUBE_REQUEST_LOG, KUBE_CA, KUBE_PID,
# KUBE_LOG. Extra flags: --with-v1beta2, --expire-continue, --token X (see the script).
start_fake_kube() {
  local extra=${1:-} dir port deadline
  [ $# -gt 0 ] && shift
  dir=$(mktemp -d "$CMA_TMP/fake-kube.XXXX")
  if ! openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
    -subj "/CN=fake-kube-apiserver" -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
    -keyout "$dir/apiserver.key" -out "$dir/apiserver.crt" >"$dir/openssl.log" 2>&1; then
    cma_log "start_fake_kube: openssl failed:"
    cat "$dir/openssl.log" >&2
    return 1
  fi
  local args=(--cert "$dir/apiserver.crt" --key "$dir/apiserver.key" --port 0
    --port-file "$dir/port" --request-log "$dir/requests.jsonl" --fixtures "$CMA_FIXTURES")
  [ -n "$extra" ] && args+=(--extra-pods "$extra")
  KUBE_LOG="$dir/fake-kube.log"
  _cma_spawn "$KUBE_LOG" python3 -u "$CMA_LIB/fake_kube_apiserver.py" "${args[@]}" "$@"
  deadline=$((SECONDS + $(_cma_start_timeout)))
  while [ ! -s "$dir/port" ]; do
    if ! _cma_alive "$_CMA_SPAWNED" || [ "$SECONDS" -ge "$deadline" ]; then
      cma_log "start_fake_kube: the fake kube-apiserver did not start:"
      tail -n 30 "$KUBE_LOG" >&2
      return 1
    fi
    sleep 0.1
  done
  port=$(cat "$dir/port")
  _cma_wait_ready fake-kube-apiserver "$_CMA_SPAWNED" "$KUBE_LOG" "https://127.0.0.1:$port/version" \
    --cacert "$dir/apiserver.crt" || return 1
  cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: fake-kube
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority: $dir/apiserver.crt
users:
- name: fake-admin
  user:
    token: fake-admin
contexts:
- name: fake-kube
  context:
    cluster: fake-kube
    user: fake-admin
current-context: fake-kube
EOF
  export KUBE_URL="https://127.0.0.1:$port" KUBE_KUBECONFIG="$dir/kubeconfig" \
    KUBE_REQUEST_LOG="$dir/requests.jsonl" KUBE_CA="$dir/apiserver.crt" KUBE_PID=$_CMA_SPAWNED \
    KUBE_LOG
}

# cma_adapter_bin: prints the adapter binary's absolute path.
cma_adapter_bin() {
  local bin=${CMA_BIN:-build/custom-metrics-adapter}
  case $bin in
    /*) printf '%s\n' "$bin" ;;
    *) printf '%s\n' "$CMA_ROOT/$bin" ;;
  esac
}

# start_adapter CONFIG [EXTRA_FLAGS...]: starts the adapter (wrapped by $CMA_WRAPPER if set) on a
# free port with a self-generated serving certificate (in $CMA_CERT_DIR, default
# $CMA_TMP/adapter-certs), pointed at $PROM_URL and $KUBE_KUBECONFIG
# (each only when set), logging to $CMA_TMP/adapter.log or $CMA_ADAPTER_LOG (appended), and
# waits for /healthz.
# Exports ADAPTER_URL, ADAPTER_PID, ADAPTER_CA, ADAPTER_KUBECONFIG, ADAPTER_LOG. ADAPTER_KUBECONFIG
# carries no credential (see the comment in it), so kubectl's requests are anonymous.
start_adapter() {
  local config=$1 bin port attempt rc certdir
  shift
  bin=$(cma_adapter_bin)
  if [ ! -x "$bin" ]; then
    cma_log "start_adapter: $bin is not built"
    return 1
  fi
  certdir="${CMA_CERT_DIR:-$CMA_TMP/adapter-certs}"
  mkdir -p "$certdir"
  ADAPTER_LOG="${CMA_ADAPTER_LOG:-$CMA_TMP/adapter.log}"
  local base=(--bind-address=127.0.0.1 "--cert-dir=$certdir" "--config=$config"
    "--metrics-relist-interval=${RELIST:-5s}" "--v=${V:-2}")
  [ -n "${PROM_URL:-}" ] && base+=("--prometheus-url=$PROM_URL")
  [ -n "${KUBE_KUBECONFIG:-}" ] && base+=("--lister-kubeconfig=$KUBE_KUBECONFIG")
  for attempt in 1 2 3; do
    port=$(free_port)
    echo "=== start_adapter $(date +%H:%M:%S) port $port: ${CMA_WRAPPER:-} $bin ${base[*]} --secure-port=$port $*" >>"$ADAPTER_LOG"
    # shellcheck disable=SC2086 # CMA_WRAPPER is a command line on purpose
    _cma_spawn "$ADAPTER_LOG" ${CMA_WRAPPER:-} "$bin" "${base[@]}" "--secure-port=$port" "$@"
    _cma_wait_ready adapter "$_CMA_SPAWNED" "$ADAPTER_LOG" "https://127.0.0.1:$port/healthz" \
      --cacert "$certdir/apiserver.crt"
    rc=$?
    if [ $rc -eq 0 ]; then
      break
    fi
    [ $rc -eq 2 ] || return 1
    cma_log "start_adapter: port $port was taken (attempt $attempt), retrying"
  done
  [ $rc -eq 0 ] || return 1
  export ADAPTER_URL="https://127.0.0.1:$port" ADAPTER_PID=$_CMA_SPAWNED \
    ADAPTER_CA="$certdir/apiserver.crt" ADAPTER_KUBECONFIG="$CMA_TMP/adapter.kubeconfig" ADAPTER_LOG
  cat >"$ADAPTER_KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: adapter
  cluster:
    server: $ADAPTER_URL
    certificate-authority: $ADAPTER_CA
users:
- name: anonymous
  user:
    # Not a credential: kubectl prompts for a username (and fails without a terminal) when a user
    # has none at all. A bare username makes it send "Authorization: Basic YW5vbnltb3VzOg==",
    # which kube-apiserver-style authenticators ignore, so the requests stay anonymous.
    username: anonymous
contexts:
- name: adapter
  context:
    cluster: adapter
    user: anonymous
current-context: adapter
EOF
}

# stop_adapter [TIMEOUT_S]: SIGTERM to the adapter, SIGKILL after TIMEOUT_S (default 30, 120
# with a wrapper); returns its exit status (valgrind's with CMA_WRAPPER).
stop_adapter() {
  local pid=${ADAPTER_PID:-} timeout=${1:-} deadline rc
  [ -n "$pid" ] || {
    cma_log "stop_adapter: no adapter running"
    return 1
  }
  if [ -z "$timeout" ]; then
    timeout=30
    [ -n "${CMA_WRAPPER:-}" ] && timeout=120
  fi
  kill -TERM "$pid" 2>/dev/null
  deadline=$((SECONDS + timeout))
  while _cma_alive "$pid" && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.1
  done
  if _cma_alive "$pid"; then
    cma_log "stop_adapter: still running after ${timeout}s, SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
  rc=$?
  _cma_forget "$pid"
  unset ADAPTER_PID
  return "$rc"
}

# wait_discovery METRIC [GROUP_VERSION] [TIMEOUT_S]: polls the adapter's discovery document
# (default custom.metrics.k8s.io/v1beta1, 60 s) until an entry's name is METRIC or ends with
# /METRIC.
wait_discovery() {
  local metric=$1 gv=${2:-custom.metrics.k8s.io/v1beta1} timeout=${3:-60} deadline
  deadline=$((SECONDS + timeout))
  while :; do
    if curl -s --max-time 5 --cacert "$ADAPTER_CA" "$ADAPTER_URL/apis/$gv" |
      jq -e --arg m "$metric" 'any(.resources[]?; .name == $m or (.name | endswith("/" + $m)))' \
        >/dev/null 2>&1; then
      return 0
    fi
    if [ -n "${ADAPTER_PID:-}" ] && ! _cma_alive "$ADAPTER_PID"; then
      cma_log "wait_discovery: the adapter exited"
      return 2
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      cma_log "wait_discovery: $metric not in /apis/$gv after ${timeout}s"
      return 1
    fi
    sleep 0.5
  done
}

# --- small request helpers --------------------------------------------------------------------

# adapter_get PATH: kubectl get --raw PATH against the adapter (prints the body).
adapter_get() { kubectl --kubeconfig "$ADAPTER_KUBECONFIG" get --raw "$1"; }

# adapter_curl PATH [CURL_ARGS...]: prints the body; the HTTP status goes to $CMA_TMP/last_status
# (read it with last_status).
adapter_curl() {
  local path=$1
  shift
  curl -s --max-time 30 --cacert "$ADAPTER_CA" -o "$CMA_TMP/last_body" -w '%{http_code}' "$@" \
    "$ADAPTER_URL$path" >"$CMA_TMP/last_status"
  cat "$CMA_TMP/last_body"
}
last_status() { cat "$CMA_TMP/last_status" 2>/dev/null; }

# prom_query EXPR / vm_query EXPR: instant query at now; prints the JSON answer.
prom_query() { curl -s --max-time 30 -G "$PROM_URL/api/v1/query" --data-urlencode "query=$1"; }
vm_query() { curl -s --max-time 30 -G "$VM_URL/api/v1/query" --data-urlencode "query=$1" -d nocache=1; }

# gen_dcgm [GEN_DCGM_FLAGS...]: generates the synthetic DCGM data set into $CMA_TMP/dcgm and
# exports DCGM_DIR (dcgm.om, dcgm.prom, pods.json, expected.json).
gen_dcgm() {
  DCGM_DIR="$CMA_TMP/dcgm"
  python3 "$CMA_LIB/gen_dcgm.py" "$DCGM_DIR" "$@" || return 1
  export DCGM_DIR
}

# expected_value METRIC JQ_CONDITION: the generated value of the one series of METRIC whose
# entry in expected.json satisfies JQ_CONDITION (e.g. '.labels.pod == "bert-0"').
expected_value() {
  jq -r --arg m "$1" "[.series[] | select(.name == \$m) | select($2) | .value] |
    if length == 1 then .[0] else error(\"\(length) series match\") end" "$DCGM_DIR/expected.json"
}

# --- assertions --------------------------------------------------------------------------------

T_PASS=0
T_FAIL=0
T_FAILED=()

t_pass() {
  T_PASS=$((T_PASS + 1))
  printf 'ok   %s\n' "$1"
}

# t_fail NAME [DETAIL...]
t_fail() {
  local name=$1
  shift
  T_FAIL=$((T_FAIL + 1))
  T_FAILED+=("$name")
  printf 'FAIL %s\n' "$name"
  [ $# -gt 0 ] && printf '     %s\n' "$@"
  # Non-zero, so `if t_ok ...` / `t_eq ... || ...` see the failure (the count is kept either way).
  return 1
}

# t_ok NAME CMD...: passes when CMD exits 0 (its output is shown on failure).
t_ok() {
  local name=$1 out rc
  shift
  out=$("$@" 2>&1)
  rc=$?
  if [ $rc -eq 0 ]; then
    t_pass "$name"
  else
    t_fail "$name" "command failed (exit $rc): $*" "${out:0:2000}"
  fi
}

# t_eq NAME EXPECTED ACTUAL
t_eq() {
  if [ "$2" = "$3" ]; then
    t_pass "$1"
  else
    t_fail "$1" "expected: ${2:0:2000}" "actual:   ${3:0:2000}"
  fi
}

# t_json NAME JSON JQ_EXPR EXPECTED: compares `jq -r JQ_EXPR` of JSON with EXPECTED.
t_json() {
  local actual
  actual=$(printf '%s' "$2" | jq -r "$3" 2>&1)
  if [ "$actual" = "$4" ]; then
    t_pass "$1"
  else
    t_fail "$1" "jq: $3" "expected: ${4:0:2000}" "actual:   ${actual:0:2000}" \
      "document: ${2:0:1000}"
  fi
}

# t_summary: prints "checks: N ok, N not ok" on its own line (after the adapter log tail when
# something failed); returns non-zero on any failure or when nothing was checked. The wording is
# not the suite's closing "N passed, N failed" line (scripts/test.sh), so the two never mix.
t_summary() {
  if [ "$T_FAIL" -gt 0 ]; then
    printf 'failed: %s\n' "${T_FAILED[@]}"
    if [ -n "${ADAPTER_LOG:-}" ] && [ -s "$ADAPTER_LOG" ]; then
      echo "--- last lines of $ADAPTER_LOG"
      tail -n "${LOG_TAIL_LINES:-40}" "$ADAPTER_LOG"
      echo "---"
    fi
  fi
  echo "checks: $T_PASS ok, $T_FAIL not ok"
  [ "$T_FAIL" -eq 0 ] && [ "$T_PASS" -gt 0 ]
}

# --- more servers and helpers for the end-to-end tests -----------------------------------------

# stop_prometheus: stops the Prometheus of start_prometheus (SIGTERM, SIGKILL after 10 s); its
# config and data stay in $PROM_DIR for restart_prometheus. Returns Prometheus's exit status.
stop_prometheus() {
  [ -n "${PROM_PID:-}" ] || {
    cma_log "stop_prometheus: no Prometheus running"
    return 1
  }
  cma_stop "$PROM_PID" 10
  local rc=$?
  unset PROM_PID
  return "$rc"
}

# restart_prometheus: starts Prometheus again with the config, data and port of the last
# start_prometheus (PROM_URL stays valid) and waits for /-/ready. Exports PROM_PID.
restart_prometheus() {
  local port=${PROM_URL##*:}
  [ -n "${PROM_DIR:-}" ] && [ -n "$port" ] || {
    cma_log "restart_prometheus: start_prometheus has not run"
    return 1
  }
  _cma_spawn "$PROM_LOG" prometheus --config.file="$PROM_DIR/prometheus.yml" \
    --storage.tsdb.path="$PROM_DIR/data" --storage.tsdb.retention.time=30d \
    --web.listen-address="127.0.0.1:$port" --log.level=warn
  _cma_wait_ready prometheus "$_CMA_SPAWNED" "$PROM_LOG" "$PROM_URL/-/ready" || return 1
  export PROM_PID=$_CMA_SPAWNED
}

# _cma_start_with_port_file NAME LOG PORT_FILE READY_PATH CMD...: starts CMD (a helper that
# writes its port to PORT_FILE once listening), waits for the file and for http://127.0.0.1:
# PORT/READY_PATH to answer 200. Sets _CMA_PORT and _CMA_SPAWNED.
_cma_start_with_port_file() {
  local name=$1 log=$2 port_file=$3 ready=$4 deadline
  shift 4
  _cma_spawn "$log" "$@"
  deadline=$((SECONDS + $(_cma_start_timeout)))
  while [ ! -s "$port_file" ]; do
    if ! _cma_alive "$_CMA_SPAWNED" || [ "$SECONDS" -ge "$deadline" ]; then
      cma_log "$name did not start:"
      tail -n 30 "$log" >&2
      return 1
    fi
    sleep 0.1
  done
  _CMA_PORT=$(cat "$port_file")
  _cma_wait_ready "$name" "$_CMA_SPAWNED" "$log" "http://127.0.0.1:$_CMA_PORT$ready"
}

# --- MetricRules through the fake kube-apiserver (tests/lib/fake_metric_rules.py) ---------------

# kube_control CURL_ARGS...: curl to the fake kube-apiserver ($KUBE_URL) as its admin: its test
# controls (/__fake/...) and reads.
kube_control() { curl -s --max-time 10 --cacert "$KUBE_CA" -H "Authorization: Bearer fake-admin" "$@"; }
# mr_apply NS NAME SPEC_JSON: creates or updates the MetricRule NS/NAME through the fake's
# /__fake/metricrules/apply (what `kubectl apply` does); prints the fake's answer to stderr when it
# did not take it.
mr_apply() {
  jq -n --arg ns "$1" --arg name "$2" --argjson spec "$3" \
    '{apiVersion: "metrics.custom-metrics-adapter.dev/v1alpha1", kind: "MetricRule",
      metadata: {namespace: $ns, name: $name}, spec: $spec}' |
    kube_control -X POST -H "Content-Type: application/json" --data-binary @- \
      "$KUBE_URL/__fake/metricrules/apply" >"$CMA_TMP/apply.out"
  jq -e '.resourceVersion' "$CMA_TMP/apply.out" >/dev/null || cat "$CMA_TMP/apply.out" >&2
}
# metric_values PATH: "NAME VALUE" lines of the adapter's custom metrics answer for PATH, or
# "HTTP <status>".
metric_values() {
  local body
  body=$(adapter_curl "$1")
  if [ "$(last_status)" = 200 ]; then item_values "$body"; else echo "HTTP $(last_status)"; fi
}
# wait_metric_values PATH EXPECTED [TIMEOUT_S]: until metric_values PATH prints EXPECTED (60 s).
wait_metric_values() {
  local deadline=$((SECONDS + ${3:-60}))
  while [ "$(metric_values "$1")" != "$2" ]; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.3
  done
}

# start_query_log_proxy UPSTREAM_URL LOG [--hold SUBSTRING SECONDS]: starts tests/lib/
# query_log_proxy.py in front of UPSTREAM_URL (a Prometheus): it forwards every request and appends
# its PromQL to LOG ({"path", "query": [...], "match": [...]} a line); --hold delays the queries
# that contain SUBSTRING. Exports QUERY_PROXY_URL and QUERY_PROXY_PID.
start_query_log_proxy() {
  local upstream=$1 log=$2 dir
  shift 2
  dir=$(mktemp -d "$CMA_TMP/query-proxy.XXXX")
  : >"$log"
  _cma_start_with_port_file query-log-proxy "$dir/proxy.log" "$dir/port" /-/ready \
    python3 -u "$CMA_LIB/query_log_proxy.py" "$upstream" "$dir/port" "$log" "$@" || return 1
  export QUERY_PROXY_URL="http://127.0.0.1:$_CMA_PORT" QUERY_PROXY_PID=$_CMA_SPAWNED
}

# start_auth_proxy UPSTREAM_URL [AUTH_PROXY_FLAGS...]: starts tests/lib/auth_proxy.py (Mimir's
# authenticating query path: prefix /prometheus, basic auth or bearer token, X-Scope-OrgID) in
# front of UPSTREAM_URL. Flags: --basic-user U --basic-password P | --bearer-token T, --org-id ID.
# Exports AUTH_PROXY_URL (with the /prometheus prefix), AUTH_PROXY_PID, AUTH_PROXY_LOG and
# AUTH_PROXY_REQUEST_LOG (one JSON line per request).
start_auth_proxy() {
  local upstream=$1 dir
  shift
  dir=$(mktemp -d "$CMA_TMP/auth-proxy.XXXX")
  # Readiness: "/" is outside the prefix, so the proxy itself answers it (404); curl's exit status
  # says that it listens.
  _cma_spawn "$dir/auth-proxy.log" python3 -u "$CMA_LIB/auth_proxy.py" --upstream "$upstream" \
    --port 0 --port-file "$dir/port" --request-log "$dir/requests.jsonl" "$@"
  local deadline=$((SECONDS + $(_cma_start_timeout)))
  while ! [ -s "$dir/port" ] ||
    ! curl -s -o /dev/null --max-time 5 "http://127.0.0.1:$(cat "$dir/port")/"; do
    if ! _cma_alive "$_CMA_SPAWNED" || [ "$SECONDS" -ge "$deadline" ]; then
      cma_log "start_auth_proxy: the proxy did not start:"
      tail -n 30 "$dir/auth-proxy.log" >&2
      return 1
    fi
    sleep 0.1
  done
  local port
  port=$(cat "$dir/port")
  export AUTH_PROXY_URL="http://127.0.0.1:$port/prometheus" \
    AUTH_PROXY_PID=$_CMA_SPAWNED AUTH_PROXY_LOG="$dir/auth-proxy.log" \
    AUTH_PROXY_REQUEST_LOG="$dir/requests.jsonl"
}

# start_slow_backend SERIES_BODY_FILE [SLOW_BACKEND_FLAGS...]: starts tests/lib/slow_backend.py
# (a hung Prometheus: series at once, queries sleep 30 s). Exports SLOW_URL, SLOW_PID, SLOW_LOG,
# SLOW_REQUEST_LOG.
start_slow_backend() {
  local body=$1 dir
  shift
  dir=$(mktemp -d "$CMA_TMP/slow-backend.XXXX")
  _cma_start_with_port_file slow-backend "$dir/slow-backend.log" "$dir/port" /debug/in-flight \
    python3 -u "$CMA_LIB/slow_backend.py" --series-body "$body" --port 0 --port-file "$dir/port" \
    --request-log "$dir/requests.jsonl" "$@" || return 1
  export SLOW_URL="http://127.0.0.1:$_CMA_PORT" SLOW_PID=$_CMA_SPAWNED \
    SLOW_LOG="$dir/slow-backend.log" SLOW_REQUEST_LOG="$dir/requests.jsonl"
}

# adapter_fetch PATH [CURL_ARGS...]: one request to the adapter with curl; sets R_BODY,
# R_STATUS (HTTP status, 000 when none) and R_CTYPE (the Content-Type header, "" when none).
# shellcheck disable=SC2034 # R_BODY and R_CTYPE are for the caller
adapter_fetch() {
  local path=$1 hdr="$CMA_TMP/fetch.headers"
  shift
  R_STATUS=$(curl -s --max-time 60 --cacert "$ADAPTER_CA" -D "$hdr" -o "$CMA_TMP/fetch.body" \
    -w '%{http_code}' "$@" "$ADAPTER_URL$path")
  R_BODY=$(cat "$CMA_TMP/fetch.body" 2>/dev/null)
  R_CTYPE=$(sed -n 's/^[Cc]ontent-[Tt]ype: *\([^\r]*\)\r*$/\1/p' "$hdr" 2>/dev/null | tail -n 1)
}

# adapter_log_since_start: prints $ADAPTER_LOG from the last start_adapter on (the log file is
# shared by every adapter a script starts).
adapter_log_since_start() {
  awk '/^=== start_adapter / { n = 0 } { line[n++] = $0 } END { for (i = 0; i < n; i++) print line[i] }' \
    "$ADAPTER_LOG" 2>/dev/null
}

# wait_adapter_log ERE [TIMEOUT_S]: polls the log of the adapter started last until a line
# matches ERE (default 60 s).
wait_adapter_log() {
  local re=$1 timeout=${2:-60} deadline
  deadline=$((SECONDS + timeout))
  until adapter_log_since_start | grep -Eq -- "$re"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      cma_log "wait_adapter_log: no line matching '$re' in $ADAPTER_LOG after ${timeout}s"
      return 1
    fi
    sleep 0.2
  done
}

# wait_status PATH STATUS [TIMEOUT_S] [CURL_ARGS...]: polls the adapter until PATH answers STATUS
# (default deadline 60 s); leaves the last answer in R_BODY/R_STATUS/R_CTYPE.
wait_status() {
  local path=$1 want=$2 timeout=${3:-60} deadline
  shift 2
  [ $# -gt 0 ] && shift
  deadline=$((SECONDS + timeout))
  while :; do
    adapter_fetch "$path" "$@"
    [ "$R_STATUS" = "$want" ] && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      cma_log "wait_status: $path still answers $R_STATUS (want $want) after ${timeout}s"
      return 1
    fi
    sleep 0.3
  done
}

# CMA_JQ_QUANTITY: a jq definition `quantity` turning a number into the canonical Kubernetes
# quantity string the adapter serves: milli-units truncated toward zero (prometheus-adapter's
# int64(v*1000)), then the largest SI suffix (m, "", k, M, G, T, P, E) with an integer mantissa.
# shellcheck disable=SC2016 # jq code
CMA_JQ_QUANTITY='def quantity: (. * 1000 | if . >= 0 then floor else ceil end) as $m
  | if $m == 0 then "0" else
      {m: $m, e: -3}
      | until((.m % 1000) != 0 or .e >= 18; .m = (.m / 1000) | .e = (.e + 3))
      | "\(.m)" + ({"-3": "m", "0": "", "3": "k", "6": "M", "9": "G", "12": "T", "15": "P",
                    "18": "E"}[.e | tostring])
    end;'

# quantity NUMBER: prints NUMBER as the adapter would serve it (see CMA_JQ_QUANTITY).
quantity() { jq -rn --argjson v "$1" "$CMA_JQ_QUANTITY \$v | quantity"; }

# expected_agg METRIC AGG KEY_LABEL [JQ_CONDITION]: from expected.json, the series of METRIC that
# satisfy JQ_CONDITION (default true) and carry KEY_LABEL, grouped by KEY_LABEL and aggregated with
# AGG (avg, sum, max or min, as PromQL does); prints "KEY QUANTITY" lines sorted by KEY. A group with
# a NaN sample is left out (the adapter never serves NaN).
expected_agg() {
  local metric=$1 agg=$2 key=$3 cond=${4:-true}
  jq -r --arg m "$metric" --arg k "$key" --arg agg "$agg" "$CMA_JQ_QUANTITY
    [.series[] | select(.name == \$m) | select($cond) | select(.labels[\$k] != null)]
    | group_by(.labels[\$k])[]
    | select(all(.[]; .value != \"NaN\"))
    | (map(.value)) as \$v
    | \"\(.[0].labels[\$k]) \(if \$agg == \"avg\" then (\$v | add / length)
        elif \$agg == \"sum\" then (\$v | add) elif \$agg == \"max\" then (\$v | max)
        else (\$v | min) end | quantity)\"" "$DCGM_DIR/expected.json"
}

# item_values JSON: "NAME VALUE" lines (describedObject.name and value) of a MetricValueList,
# sorted by name.
item_values() { printf '%s' "$1" | jq -r '.items[] | "\(.describedObject.name) \(.value)"' | sort; }

# --- external metrics (test_external_metrics.sh) -----------------------------------------------

# om_merge OUT IN...: merges OpenMetrics files into OUT family by family (promtool wants each
# metric family in one contiguous block, so a test's extra series of a family that gen_dcgm.py
# already writes cannot simply be appended). Families keep their first appearance's order and
# metadata lines (# TYPE/# HELP/# UNIT, first one of each kind wins); samples keep file order;
# one "# EOF" ends OUT.
om_merge() {
  python3 - "$@" <<'PYEOF'
import sys
out_path, in_paths = sys.argv[1], sys.argv[2:]
meta, samples, order = {}, {}, []
def family(name):
    if name not in samples:
        samples[name], meta[name] = [], {}
        order.append(name)
for path in in_paths:
    current = ""
    family(current)
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# EOF"):
                break
            if line.startswith("#"):
                parts = line.split()
                if len(parts) >= 3 and parts[1] in ("TYPE", "HELP", "UNIT"):
                    current = parts[2]
                    family(current)
                    meta[current].setdefault(parts[1], line)
                continue
            samples[current].append(line)
with open(out_path, "w", encoding="utf-8") as out:
    for name in order:
        for kind in ("HELP", "TYPE", "UNIT"):
            if kind in meta[name]:
                out.write(meta[name][kind])
        out.writelines(samples[name])
    out.write("# EOF\n")
PYEOF
}

# ext_items JSON [LABEL]: "LABEL_VALUE VALUE" lines of an ExternalMetricValueList (metricLabels
# [LABEL], "-" when absent; LABEL defaults to pod), sorted bytewise.
ext_items() {
  printf '%s' "$1" | jq -r --arg k "${2:-pod}" '.items[] | "\(.metricLabels[$k] // "-") \(.value)"' |
    LC_ALL=C sort
}

# --- metrics.k8s.io: resource metrics data and the `kubectl top` test front ------------------------

# gen_resource [GEN_RESOURCE_FLAGS...]: generates the synthetic cAdvisor/kubelet resource metrics
# into $CMA_TMP/resource and exports RES_DIR (resource.om, pods.json, expected.json).
gen_resource() {
  RES_DIR="$CMA_TMP/resource"
  python3 "$CMA_LIB/gen_resource.py" "$RES_DIR" "$@" || return 1
  export RES_DIR
}

# start_test_front EXTRA_PODS_JSON ADAPTER_URL: a second fake kube-apiserver that plays
# kube-aggregator for metrics.k8s.io (fake_kube_apiserver.py --proxy-metrics ADAPTER_URL: lists
# the group, proxies /apis/metrics.k8s.io/v1beta1/... to the adapter, nodes with capacity and
# allocatable), for the real `kubectl top`. Exports FRONT_URL, FRONT_KUBECONFIG (bearer token
# fake-admin), FRONT_REQUEST_LOG, FRONT_PID, FRONT_LOG; the KUBE_* variables of an earlier
# start_fake_kube keep pointing at that one.
start_test_front() {
  local extra=$1 target=$2 rc v
  local saved_names=(KUBE_URL KUBE_KUBECONFIG KUBE_REQUEST_LOG KUBE_CA KUBE_PID KUBE_LOG)
  local saved_values=() saved_set=()
  for v in "${saved_names[@]}"; do
    saved_values+=("${!v-}")
    if [ -n "${!v+x}" ]; then saved_set+=(1); else saved_set+=(0); fi
  done
  start_fake_kube "$extra" --proxy-metrics "$target"
  rc=$?
  if [ $rc -eq 0 ]; then
    export FRONT_URL=$KUBE_URL FRONT_KUBECONFIG=$KUBE_KUBECONFIG \
      FRONT_REQUEST_LOG=$KUBE_REQUEST_LOG FRONT_PID=$KUBE_PID FRONT_LOG=$KUBE_LOG
  fi
  for v in "${!saved_names[@]}"; do
    if [ "${saved_set[$v]}" = 1 ]; then
      export "${saved_names[$v]}=${saved_values[$v]}"
    else
      unset "${saved_names[$v]}"
    fi
  done
  return $rc
}

# front_kubectl ARGS...: the real kubectl against the test front (own discovery cache dir).
front_kubectl() {
  kubectl --kubeconfig "$FRONT_KUBECONFIG" --cache-dir "$CMA_TMP/kubectl-cache" "$@"
}

# res_expected JQ_EXPR: jq -r JQ_EXPR over $RES_DIR/expected.json.
res_expected() { jq -r "$1" "$RES_DIR/expected.json"; }

# adapter_log_lines: how many lines the adapter log has now (mark a point, then adapter_log_after).
adapter_log_lines() { wc -l <"$ADAPTER_LOG" 2>/dev/null || echo 0; }
# adapter_log_after N: the adapter log after its first N lines.
adapter_log_after() { tail -n "+$(($1 + 1))" "$ADAPTER_LOG" 2>/dev/null; }

# start_replay_prometheus ROOT [REPLAY_FLAGS...]: starts tests/lib/replay_prometheus.py over the
# cases directory ROOT (tests/cases): it answers /<case>/api/v1/query and /<case>/api/v1/series
# from ROOT/<case>/prometheus.json (a real Prometheus's recorded answers), or with
# --record-upstream URL proxies to a real Prometheus and records. Exports REPLAY_URL (append
# /<case> for an adapter's --prometheus-url), REPLAY_PID, REPLAY_LOG, REPLAY_REQUEST_LOG.
start_replay_prometheus() {
  local root=$1 dir
  shift
  dir=$(mktemp -d "$CMA_TMP/replay-prometheus.XXXX")
  _cma_start_with_port_file replay-prometheus "$dir/replay.log" "$dir/port" /-/ready \
    python3 -u "$CMA_LIB/replay_prometheus.py" --root "$root" --port 0 --port-file "$dir/port" \
    --request-log "$dir/requests.jsonl" "$@" || return 1
  export REPLAY_URL="http://127.0.0.1:$_CMA_PORT" REPLAY_PID=$_CMA_SPAWNED \
    REPLAY_LOG="$dir/replay.log" REPLAY_REQUEST_LOG="$dir/requests.jsonl"
}

# --- nginx as a TLS gateway (test_backend_auth.sh, test_credential_rotation.sh) -----------------

# start_nginx BODY_FILE: starts Debian's nginx (nginx-light) in the foreground (own process group,
# stopped at exit) with pid file, logs and temp paths in a fresh dir under $CMA_TMP, workers as
# root (they read files under $CMA_TMP, which is 0700), and an `include BODY_FILE;` in its http
# block: the caller's server blocks and maps, rewritten before each reload_nginx. A status server
# on its own port answers the config generation, so a reload is known to be in effect. Each
# request is logged to $NGINX_DIR/access.log as "port status Authorization X-Scope-OrgID
# client-cert-subject". Exports NGINX_DIR, NGINX_CONF, NGINX_PID, NGINX_LOG.
start_nginx() {
  local body=$1 dir status_port deadline
  dir=$(mktemp -d "$CMA_TMP/nginx.XXXX")
  mkdir -p "$dir/tmp"
  status_port=$(free_port)
  echo 'return 200 "1";' >"$dir/gen.conf"
  cat >"$dir/nginx.conf" <<NGINX
daemon off;
user root;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 512; }
http {
  log_format cma '\$server_port \$status "\$http_authorization" "\$http_x_scope_orgid" "\$ssl_client_s_dn"';
  access_log $dir/access.log cma;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  server {
    listen 127.0.0.1:$status_port;
    location / { include $dir/gen.conf; }
  }
  include $(realpath "$body");
}
NGINX
  NGINX_LOG="$dir/error.log"
  _cma_spawn "$dir/nginx.out" nginx -c "$dir/nginx.conf"
  export NGINX_DIR=$dir NGINX_CONF="$dir/nginx.conf" NGINX_PID=$_CMA_SPAWNED NGINX_LOG \
    NGINX_STATUS_PORT=$status_port NGINX_GEN=1
  deadline=$((SECONDS + $(_cma_start_timeout)))
  until [ "$(curl -s --max-time 2 "http://127.0.0.1:$status_port/")" = 1 ]; do
    if ! _cma_alive "$NGINX_PID" || [ "$SECONDS" -ge "$deadline" ]; then
      cma_log "start_nginx: nginx did not start:"
      tail -n 20 "$dir/nginx.out" "$dir/error.log" >&2
      return 1
    fi
    sleep 0.1
  done
}

# reload_nginx: `nginx -s reload` (the body file was rewritten) and waits until the new config
# answers on the status port and the old workers have exited (an old worker finishes the requests
# of its kept-alive connections with the old config), so every request from then on meets the new
# config.
reload_nginx() {
  local deadline gen=$((NGINX_GEN + 1)) old_workers p
  old_workers=$(pgrep -P "$NGINX_PID")
  echo "return 200 \"$gen\";" >"$NGINX_DIR/gen.conf"
  if ! nginx -c "$NGINX_CONF" -t >"$NGINX_DIR/test.out" 2>&1; then
    cma_log "reload_nginx: the new config does not load:"
    cat "$NGINX_DIR/test.out" >&2
    return 1
  fi
  nginx -c "$NGINX_CONF" -s reload || return 1
  deadline=$((SECONDS + 30))
  until [ "$(curl -s --max-time 2 "http://127.0.0.1:$NGINX_STATUS_PORT/")" = "$gen" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      cma_log "reload_nginx: generation $gen not in effect after 30 s"
      tail -n 20 "$NGINX_LOG" >&2
      return 1
    fi
    sleep 0.1
  done
  for p in $old_workers; do
    while _cma_alive "$p"; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        cma_log "reload_nginx: old worker $p still runs after 30 s"
        return 1
      fi
      sleep 0.05
    done
  done
  export NGINX_GEN=$gen
}

# make_ca DIR NAME: a CA key and self-signed certificate DIR/NAME.key, DIR/NAME.crt (EC P-256).
make_ca() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=$2" -keyout "$1/$2.key" -out "$1/$2.crt" >/dev/null 2>&1
}

# make_cert DIR NAME CA [SAN]: a key and certificate DIR/NAME.{key,crt} signed by DIR/CA.{crt,key};
# with SAN (e.g. IP:127.0.0.1) a serving certificate, else a client certificate (CN=NAME).
make_cert() {
  local d=$1 name=$2 ca=$3 san=${4:-} ext
  ext="$d/$name.ext"
  if [ -n "$san" ]; then
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" >"$ext"
  else
    printf 'extendedKeyUsage=clientAuth\n' >"$ext"
  fi
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$name" \
    -keyout "$d/$name.key" -out "$d/$name.csr" >/dev/null 2>&1 &&
    openssl x509 -req -in "$d/$name.csr" -CA "$d/$ca.crt" -CAkey "$d/$ca.key" -CAcreateserial \
      -days 2 -extfile "$ext" -out "$d/$name.crt" >/dev/null 2>&1
}

# projected_write DIR VERSION FILE=SRC...: updates DIR the way the kubelet's atomic writer updates
# a projected volume (a Secret, a service-account token): the files go into a new DIR/..VERSION,
# DIR/..data (a symlink to it) is swapped with one rename, and DIR/FILE are symlinks into ..data.
projected_write() {
  local d=$1 version=$2 spec old
  shift 2
  mkdir -p "$d/..$version"
  for spec in "$@"; do
    cp "${spec#*=}" "$d/..$version/${spec%%=*}"
  done
  old=$(readlink "$d/..data" 2>/dev/null)
  ln -sfn "..$version" "$d/..data_tmp" && mv -T "$d/..data_tmp" "$d/..data"
  for spec in "$@"; do
    [ -L "$d/${spec%%=*}" ] || ln -s "..data/${spec%%=*}" "$d/${spec%%=*}"
  done
  [ -n "$old" ] && [ "$old" != "..$version" ] && rm -rf "${d:?}/$old"
  return 0
}
