#!/usr/bin/env bash
# run.sh: the benchmark of issue 2 item 11, in one command. It owns the benchmark's order of work:
# build the release adapter, create (or reuse) the peer's two datasets in a real Prometheus, start
# the fake kube-apiserver with the peer's pods, run every measurement through bench/benchclient.py
# and wrk, and hand the raw results to bench/report.py, which writes docs/benchmarks.md.
#
# DESIGN: the request shapes, datasets and rule are those behind prometheus-adapter's figures
# (../shared/reference/prometheus-adapter-figures.md) so that the two can sit side by side.
# Servers are started and stopped with tests/lib/common.sh (one EXIT trap stops them all). Each
# figure is the median of several runs; raw per-run files stay in bench/.cache/last-run/. Nothing
# here asserts a timing: a failed measurement is reported as missing, and the script goes on.
#
#   bench/run.sh                 everything (about 20 minutes on 2 cores; the 1M dataset needs
#                                ~4 GiB of memory for promtool and ~1 GiB for Prometheus)
# Knobs (environment):
#   BENCH_DATASETS="100k 1m"     which datasets to run (the idle figures are always measured)
#   BENCH_REGEN=1                regenerate the datasets even when the cached blocks are fresh
#   BENCH_NO_BUILD=1             use $CMA_BIN as it is (default build-bench/custom-metrics-adapter)
#   BENCH_RSS_RUNS=3 BENCH_WRK_RUNS=5 BENCH_LAT_RUNS=3 BENCH_LAT_ROUNDS=200 BENCH_IDLE_RUNS=5
#   BENCH_DOC=docs/benchmarks.md where the report goes ("" = do not write it)
#   BENCH_PROFILE=0              skip the perf profiles (taken only when perf is installed)
#   BENCH_CACHE_TTL=0            the adapter's --metrics-cache-ttl (default 0: every request reaches
#                                Prometheus, so repeated requests measure the whole path, not the cache)
#   BENCH_KUBE_WATCH=0           the fake kube-apiserver without watch: label selectors are then
#                                resolved by a live LIST per request (default 1: the adapter's pod
#                                watch cache answers them, as against a real kube-apiserver)

cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

ROOT=$CMA_ROOT
CACHE=$ROOT/bench/.cache
CLIENT=(python3 "$ROOT/bench/benchclient.py")
RULES=$ROOT/bench/adapter-config.yaml
DATASETS=${BENCH_DATASETS:-100k 1m}
RSS_RUNS=${BENCH_RSS_RUNS:-3}
WRK_RUNS=${BENCH_WRK_RUNS:-5}
LAT_RUNS=${BENCH_LAT_RUNS:-3}
LAT_ROUNDS=${BENCH_LAT_ROUNDS:-200}
IDLE_RUNS=${BENCH_IDLE_RUNS:-5}
DOC=${BENCH_DOC-docs/benchmarks.md}
# A dataset's samples run from its generation time - 120 s to + 3,480 s; one dataset's phase takes
# well under 25 minutes, so cached blocks older than this are regenerated.
MAX_DATASET_AGE_S=1800
export RSS_RUNS WRK_RUNS LAT_RUNS LAT_ROUNDS IDLE_RUNS
RESULTS=$CMA_TMP/results
mkdir -p "$RESULTS" "$CACHE"

say() { cma_log "bench: $*"; }
BENCH_POLLER=""
# shellcheck disable=SC2016 # expanded when the hook runs
cma_on_exit '[ -n "$BENCH_POLLER" ] && kill "$BENCH_POLLER" 2>/dev/null'

# --- tools and the binary ---------------------------------------------------------------------

if ! command -v wrk >/dev/null 2>&1; then
  say "installing wrk"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk >/dev/null ||
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk >/dev/null; }
fi
for tool in wrk prometheus promtool jq curl openssl python3 cmake; do
  command -v "$tool" >/dev/null 2>&1 || {
    say "$tool is missing (scripts/setup.sh installs the project's packages)"
    exit 1
  }
done

if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
  say "building the release adapter in build-bench/"
  if ! cmake -S "$ROOT" -B "$ROOT/build-bench" -DCMAKE_BUILD_TYPE=Release >"$CMA_TMP/build.log" 2>&1 ||
    ! cmake --build "$ROOT/build-bench" --target custom-metrics-adapter -j2 >>"$CMA_TMP/build.log" 2>&1; then
    say "build failed:"
    tail -n 30 "$CMA_TMP/build.log" >&2
    exit 1
  fi
  BIN=$ROOT/build-bench/custom-metrics-adapter
else
  BIN=${CMA_BIN:-$ROOT/build-bench/custom-metrics-adapter}
fi
[ -x "$BIN" ] || {
  say "$BIN is not built"
  exit 1
}

# --- the machine ------------------------------------------------------------------------------

machine_json() {
  jq -n \
    --arg date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --arg nproc "$(nproc)" \
    --arg cpu "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)" \
    --arg mhz "$(sed -n 's/^cpu MHz[[:space:]]*: //p' /proc/cpuinfo | head -n 1)" \
    --arg hypervisor "$(grep -q -w hypervisor /proc/cpuinfo && echo yes || echo no)" \
    --arg mem_kb "$(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)" \
    --arg swap_kb "$(sed -n 's/^SwapTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)" \
    --arg kernel "$(uname -r)" \
    --arg debian "$(cat /etc/debian_version 2>/dev/null)" \
    --arg prometheus "$(prometheus --version 2>&1 | head -n 1)" \
    --arg wrk "$(wrk -v 2>&1 | head -n 1)" \
    --arg python "$(python3 --version 2>&1)" \
    --arg cc "$(cc --version 2>/dev/null | head -n 1)" \
    --arg adapter "$("$BIN" --version 2>&1 | head -n 1)" \
    --arg commit "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)" \
    --arg dirty "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | wc -l)" \
    --arg build "$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$(dirname "$BIN")/CMakeCache.txt" 2>/dev/null)" \
    --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
    '{date: $date, nproc: ($nproc | tonumber), cpu: $cpu, cpu_mhz: $mhz, hypervisor: $hypervisor,
      mem_total_kb: ($mem_kb | tonumber), swap_total_kb: ($swap_kb | tonumber), kernel: $kernel,
      debian: $debian, prometheus: $prometheus, wrk: $wrk, python: $python, cc: $cc,
      adapter: $adapter, commit: $commit, modified_tracked_files: ($dirty | tonumber),
      build_type: $build, loadavg_start: $load}'
}
machine_json >"$RESULTS/machine.json" || exit 1
say "machine: $(jq -r '"\(.nproc) x \(.cpu), load \(.loadavg_start)"' "$RESULTS/machine.json")"

# --- helpers ----------------------------------------------------------------------------------

# rss_json PID: {"rss_kb", "hwm_kb", "anon_kb", "file_kb", "shmem_kb"} of PID now (null if gone).
rss_json() {
  "${CLIENT[@]}" rss --pid "$1" || {
    echo null
    return 1
  }
}

# ensure_dataset NAME NAMES PODS: fresh TSDB blocks of `gen_om.py NAMES PODS` in
# $CACHE/NAME/blocks (reused while younger than MAX_DATASET_AGE_S); writes $OUT/dataset.json.
ensure_dataset() {
  local name=$1 names=$2 pods=$3 dir=$CACHE/$1 now age
  now=$(date +%s)
  if [ "${BENCH_REGEN:-0}" != 1 ] && [ -s "$dir/stamp" ] && [ -d "$dir/blocks" ] && [ -s "$dir/dataset.json" ]; then
    age=$((now - $(cat "$dir/stamp")))
    if [ "$age" -lt "$MAX_DATASET_AGE_S" ]; then
      say "$name: reusing cached blocks (${age}s old)"
      jq --argjson age "$age" '. + {reused: true, age_s: $age}' "$dir/dataset.json" >"$OUT/dataset.json"
      return 0
    fi
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  say "$name: generating gen_om.py $names $pods"
  "${CLIENT[@]}" timed --out "$dir/gen.json" -- python3 "$ROOT/bench/gen_om.py" "$names" "$pods" "$dir/ds.om" || return 1
  local om_bytes
  om_bytes=$(stat -c %s "$dir/ds.om")
  say "$name: promtool tsdb create-blocks-from openmetrics ($((om_bytes / 1000000)) MB)"
  "${CLIENT[@]}" timed --out "$dir/promtool.json" -- \
    promtool tsdb create-blocks-from openmetrics "$dir/ds.om" "$dir/blocks" >"$dir/promtool.log" 2>&1 || {
    tail -n 20 "$dir/promtool.log" >&2
    return 1
  }
  rm -f "$dir/ds.om"
  echo "$now" >"$dir/stamp"
  jq -n --slurpfile gen "$dir/gen.json" --slurpfile pt "$dir/promtool.json" \
    --argjson om "$om_bytes" --argjson blocks "$(du -sb "$dir/blocks" | cut -f1)" \
    --argjson nblocks "$(find "$dir/blocks" -mindepth 1 -maxdepth 1 -type d | wc -l)" \
    --argjson names "$names" --argjson pods "$pods" \
    '{names: $names, pods: $pods, series: ($names * $pods), generator_s: $gen[0].seconds,
      openmetrics_bytes: $om, promtool_s: $pt[0].seconds, promtool_peak_rss_kb: $pt[0].peak_rss_kb,
      block_bytes: $blocks, blocks: $nblocks}' >"$dir/dataset.json"
  jq '. + {reused: false, age_s: 0}' "$dir/dataset.json" >"$OUT/dataset.json"
}

# start_prometheus_blocks BLOCKS_DIR: a fresh Prometheus on a copy of BLOCKS_DIR (no scrape jobs,
# no rules). Exports PROM_URL, PROM_PID, PROM_DIR, PROM_LOG.
start_prometheus_blocks() {
  local blocks=$1 dir port attempt rc
  dir=$(mktemp -d "$CMA_TMP/prometheus.XXXX")
  cp -r "$blocks" "$dir/data" || return 1
  printf '%s\n' "# bench: no scrape jobs; all data comes from backfilled blocks." \
    "global:" "  scrape_interval: 15s" >"$dir/prometheus.yml"
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
    say "prometheus: port $port was taken (attempt $attempt), retrying"
  done
  return 1
}

# adapter_args PORT RELIST V CERTDIR: the adapter's command line (bench rule, this run's backends).
adapter_args() {
  printf '%s\n' "$BIN" --bind-address=127.0.0.1 "--secure-port=$1" "--cert-dir=$4" "--config=$RULES" \
    "--metrics-relist-interval=$2" "--v=$3" "--prometheus-url=${A_PROM_URL:-$PROM_URL}" \
    "--lister-kubeconfig=${A_KUBECONFIG:-$KUBE_KUBECONFIG}" "--metrics-cache-ttl=${BENCH_CACHE_TTL:-0}" \
    ${A_EXTRA:+"$A_EXTRA"}
}

# bench_adapter NAME RELIST V EXPECT: starts the adapter and times it from the moment just before
# the process starts until its discovery document lists EXPECT entries ($OUT/NAME-discovery.json).
# Sets A_PID, A_URL, A_LOG. Returns non-zero (adapter stopped) when that does not happen.
bench_adapter() {
  local name=$1 relist=$2 v=$3 expect=$4 port poller certdir t0file attempt tag
  tag=$(basename "$OUT")-$name # one log per dataset and run
  A_LOG=$CMA_TMP/$tag.log
  certdir=$CMA_TMP/certs-$tag
  t0file=$CMA_TMP/$tag.t0
  mkdir -p "$certdir"
  rm -f "$OUT/$name-discovery.json"
  for attempt in 1 2 3; do
    port=$(free_port)
    "${CLIENT[@]}" wait-discovery --port "$port" --expect "$expect" --t0-file "$t0file" \
      --timeout 300 --out "$OUT/$name-discovery.json" &
    poller=$!
    # shellcheck disable=SC2034 # read by the exit hook registered at the top
    BENCH_POLLER=$poller
    sleep 0.3 # the poller is up before the adapter starts
    printf '%s\n' "$EPOCHREALTIME" >"$t0file"
    local cmd
    mapfile -t cmd < <(adapter_args "$port" "$relist" "$v" "$certdir")
    echo "=== $(date +%H:%M:%S) ${cmd[*]}" >>"$A_LOG"
    _cma_spawn "$A_LOG" "${cmd[@]}"
    A_PID=$_CMA_SPAWNED
    A_URL="https://127.0.0.1:$port"
    while kill -0 "$poller" 2>/dev/null; do
      if ! _cma_alive "$A_PID"; then
        kill "$poller" 2>/dev/null
        break
      fi
      sleep 0.05
    done
    wait "$poller" && [ -s "$OUT/$name-discovery.json" ] && return 0
    if ! _cma_alive "$A_PID" && grep -qi 'address already in use' "$A_LOG"; then
      cma_stop "$A_PID" 2
      say "$name: port $port was taken (attempt $attempt), retrying"
      continue
    fi
    say "$name: discovery did not list $expect entries; last lines of $A_LOG:"
    tail -n 15 "$A_LOG" >&2
    cma_stop "$A_PID" 10
    return 1
  done
  return 1
}

# --- 1. idle ----------------------------------------------------------------------------------

PODS_JSON=$CMA_TMP/bench-pods.json
# The figures' pods (gen_om.py --kube-pods) extended to 1,000 for the 1,000-pod selector:
# bench1000=yes on all, bench100=yes on the first 100, bench10=yes on the first 10.
python3 "$ROOT/bench/gen_om.py" --kube-pods 1000 "$PODS_JSON.in" &&
  jq '[.[] | .labels.bench1000 = "yes"
       | if (.name | ltrimstr("pod-") | tonumber) >= 100 then del(.labels.bench100) else . end]' \
    "$PODS_JSON.in" >"$PODS_JSON" || exit 1
# The fake kube-apiserver as tests/lib/common.sh starts it, but through bench/fake_kube_nodelay.py
# (TCP_NODELAY like Go's net/http; see that file for the 40 ms stalls it avoids).
# shellcheck disable=SC2016 # sed script, not shell
eval "$(declare -f start_fake_kube | sed '1s/start_fake_kube/start_fake_kube_nodelay/;
  s#"\$CMA_LIB/fake_kube_apiserver.py"#"$CMA_ROOT/bench/fake_kube_nodelay.py"#')"
KUBE_WATCH_ARGS=()
[ "${BENCH_KUBE_WATCH:-1}" = 1 ] && KUBE_WATCH_ARGS=(--watch)
if declare -f start_fake_kube_nodelay | grep -q fake_kube_nodelay.py; then
  start_fake_kube_nodelay "$PODS_JSON" "${KUBE_WATCH_ARGS[@]}" || exit 1
  FAKE_NODELAY=true
else
  say "common.sh's start_fake_kube changed shape; starting the fake without TCP_NODELAY"
  start_fake_kube "$PODS_JSON" "${KUBE_WATCH_ARGS[@]}" || exit 1
  FAKE_NODELAY=false
fi

say "idle: ${IDLE_RUNS} adapters with Prometheus unreachable (fake kube reachable) and ${IDLE_RUNS} with nothing reachable, 15 s"
OUT=$RESULTS/idle
mkdir -p "$OUT"
dead_kube=$CMA_TMP/dead-kube.kubeconfig
sed "s#server: .*#server: https://127.0.0.1:$(free_port)#" "$KUBE_KUBECONFIG" >"$dead_kube"
idle_pids=()
idle_kinds=()
idle_failed=()
for kind in prom-down all-down; do
  for i in $(seq 1 "$IDLE_RUNS"); do
    port=$(free_port)
    mkdir -p "$CMA_TMP/certs-idle-$kind-$i"
    A_PROM_URL="http://127.0.0.1:$(free_port)"
    A_KUBECONFIG=$KUBE_KUBECONFIG
    # with nothing reachable, start as kube's servers do when told to tolerate the failed lookup
    # of the extension-apiserver-authentication ConfigMap (without it they exit, and so do we)
    [ "$kind" = all-down ] && A_KUBECONFIG=$dead_kube A_EXTRA=--authentication-tolerate-lookup-failure
    mapfile -t cmd < <(adapter_args "$port" 1m 2 "$CMA_TMP/certs-idle-$kind-$i")
    unset A_PROM_URL A_KUBECONFIG A_EXTRA
    _cma_spawn "$CMA_TMP/idle-$kind-$i.log" "${cmd[@]}"
    if _cma_wait_ready adapter "$_CMA_SPAWNED" "$CMA_TMP/idle-$kind-$i.log" "https://127.0.0.1:$port/healthz" -k 2>/dev/null; then
      idle_pids+=("$_CMA_SPAWNED")
      idle_kinds+=("$kind")
    else
      idle_failed+=("$(jq -n --arg kind "$kind" --arg why "$(grep -E ' E ' "$CMA_TMP/idle-$kind-$i.log" | tail -n 1 | cut -c1-300)" \
        '{kind: $kind, started: false, why: $why}')")
    fi
  done
done
sleep 15
[ ${#idle_pids[@]} -gt 0 ] && "${CLIENT[@]}" smaps --pid "${idle_pids[0]}" --out "$OUT/smaps.json"
{
  for idx in "${!idle_pids[@]}"; do
    jq -n --arg kind "${idle_kinds[$idx]}" --argjson m "$(rss_json "${idle_pids[$idx]}")" '{kind: $kind, started: true} + $m'
  done
  for f in "${idle_failed[@]}"; do printf '%s\n' "$f"; done
} | jq -s . >"$OUT/idle.json"
for p in "${idle_pids[@]}"; do cma_stop "$p" 10; done
say "idle: $(jq -c '[.[] | .rss_kb]' "$OUT/idle.json") kB"
# The floor under the idle figure: the adapter's libraries alone, loaded and initialised.
"$ROOT/bench/lib_floor.sh" >"$OUT/lib_floor.md" 2>"$OUT/lib_floor.err" ||
  say "lib_floor.sh failed: $(tail -n 1 "$OUT/lib_floor.err")"

# --- 2.-4. per dataset ----------------------------------------------------------------------------

LAT_CASES=$CMA_TMP/cases.json
jq -n '[{name: "10 pods", selector: "bench10=yes", expect_items: 10},
        {name: "100 pods", selector: "bench100=yes", expect_items: 100},
        {name: "1000 pods", selector: "bench1000=yes", expect_items: 1000}]
       | map(. + {path: ("/apis/custom.metrics.k8s.io/v1beta1/namespaces/bench/pods/*/bench_metric_0000?labelSelector=" + .selector)})' \
  >"$LAT_CASES"

# wrk_runs PREFIX: WRK_RUNS runs of wrk on the discovery document of the adapter ($A_PID), each
# with the adapter's and wrk's CPU time: $OUT/PREFIX-N.txt and $OUT/PREFIX-N-cpu.json.
wrk_runs() {
  local prefix=$1 i cpu0 cpu1
  for i in $(seq 1 "$WRK_RUNS"); do
    cpu0=$("${CLIENT[@]}" cpu --pid "$A_PID")
    "${CLIENT[@]}" timed --out "$OUT/$prefix-$i-cpu.json" -- wrk -t2 -c32 -d10s --latency \
      -H 'Accept: application/json' "$A_URL/apis/custom.metrics.k8s.io/v1beta1" >"$OUT/$prefix-$i.txt" 2>&1
    cpu1=$("${CLIENT[@]}" cpu --pid "$A_PID")
    jq --argjson a "${cpu1:-null}" --argjson b "${cpu0:-null}" '. + {adapter_cpu_s: (if $a and $b then $a - $b else null end)}' \
      "$OUT/$prefix-$i-cpu.json" >"$OUT/$prefix-$i-cpu.json.tmp" && mv "$OUT/$prefix-$i-cpu.json.tmp" "$OUT/$prefix-$i-cpu.json"
    say "$name: $prefix run $i: $(grep -E 'Requests/sec' "$OUT/$prefix-$i.txt" | tr -s ' '), adapter CPU $(jq .adapter_cpu_s "$OUT/$prefix-$i-cpu.json") s, wrk CPU $(jq .cpu_s "$OUT/$prefix-$i-cpu.json") s"
  done
}

# profile_adapter WHAT...: with perf (when installed and BENCH_PROFILE != 0), 10 s samples of the
# adapter ($A_PID) under wrk on the discovery document (discovery) or under back-to-back 1,000-pod
# requests (selector1000); flat profiles (self time by library and symbol) in $OUT/profile-*.txt.
profile_adapter() {
  [ "${BENCH_PROFILE:-1}" != 0 ] && command -v perf >/dev/null 2>&1 || return 0
  local what data
  for what in "$@"; do
    data=$CMA_TMP/perf-$what.data
    perf record -F 499 -p "$A_PID" -o "$data" -- sleep 10 >/dev/null 2>&1 &
    local perf_pid=$!
    sleep 0.5
    if [ "$what" = discovery ]; then
      wrk -t2 -c32 -d9s -H 'Accept: application/json' "$A_URL/apis/custom.metrics.k8s.io/v1beta1" >/dev/null 2>&1
    else
      "${CLIENT[@]}" loop --adapter "$A_URL" --seconds 9 \
        --path "/apis/custom.metrics.k8s.io/v1beta1/namespaces/bench/pods/*/bench_metric_0000?labelSelector=bench1000=yes" >/dev/null
    fi
    wait "$perf_pid"
    perf report -i "$data" --stdio --no-children --sort dso 2>/dev/null | grep -v '^#' | grep -v '^$' |
      head -n 12 >"$OUT/profile-$what-dso.txt"
    perf report -i "$data" --stdio --no-children --sort dso,sym 2>/dev/null | grep -v '^#' | grep -v '^$' |
      head -n 25 >"$OUT/profile-$what.txt"
    rm -f "$data"
  done
}

# avoid_block_gap PHASE_S: promtool cuts each dataset into blocks at 2-hour boundaries (UTC). With
# samples 240 s apart, the last sample before a boundary B and the first after it are up to 240 s
# apart and no block covers the time between them, so /api/v1/series over [now - 60 s, now] (the
# adapter's discovery window at relist 1m) finds no series at all for a few minutes around B. If a
# phase of PHASE_S seconds starting now would come near a boundary, wait until it is well past.
avoid_block_gap() {
  local phase=$1 now next prev until=0
  now=$(date +%s)
  next=$(((now / 7200 + 1) * 7200))
  prev=$((next - 7200))
  if [ "$now" -lt $((prev + 300)) ]; then
    until=$((prev + 300))
  elif [ $((now + phase)) -gt $((next - 240)) ]; then
    until=$((next + 300))
  fi
  if [ "$until" -gt "$now" ]; then
    say "waiting $((until - now)) s: the 2-hour TSDB block boundary at $(date -u -d "@$((until - 300))" +%H:%M) UTC would fall inside the next measurements (see avoid_block_gap)"
    sleep $((until - now))
  fi
}

run_dataset() {
  local name=$1 names=$2 pods=$3 expect i
  expect=$((names * 2)) # pods/<metric> and namespaces/<metric>
  OUT=$RESULTS/$name
  mkdir -p "$OUT"
  # a phase takes about 8 minutes for 100k series and 20 for 1M (with the dataset's generation)
  avoid_block_gap $((names >= 1000 ? 1200 : 600))
  ensure_dataset "$name" "$names" "$pods" || return 1
  start_prometheus_blocks "$CACHE/$name/blocks" || return 1
  local count
  count=$(prom_query 'count({namespace!="",pod!=""})' | jq -r '.data.result[0].value[1] // "null"')
  jq -n --argjson count "$count" --argjson m "$(rss_json "$PROM_PID")" \
    '{series_visible: $count, after_start_and_count: $m}' >"$OUT/prometheus-start.json"
  say "$name: Prometheus sees $count series; RSS $(jq -c .after_start_and_count "$OUT/prometheus-start.json")"
  # the series answer alone, as the adapter asks for it (start = now - relist interval), with curl
  for i in 1 2 3; do
    curl -s -o /dev/null -w '{"seconds": %{time_total}, "first_byte_s": %{time_starttransfer}, "bytes": %{size_download}, "status": %{http_code}}\n' \
      -G "$PROM_URL/api/v1/series" --data-urlencode 'match[]={namespace!="",pod!=""}' \
      -d "start=$(($(date +%s) - 60))" -d "end=$(date +%s)"
  done | jq -s . >"$OUT/series-direct.json"
  say "$name: /api/v1/series straight from Prometheus: $(jq -c 'map(.seconds)' "$OUT/series-direct.json") s, $(jq '.[0].bytes' "$OUT/series-direct.json") bytes"

  # 1. memory after the first relist (relist 1m) and time to discovery
  for i in $(seq 1 "$RSS_RUNS"); do
    if bench_adapter "first-$i" 1m 2 "$expect"; then
      sleep 2
      jq --argjson m "$(rss_json "$A_PID")" --argjson relists "$("${CLIENT[@]}" relists --log "$A_LOG")" \
        '. + {after_first_relist: $m, relists: $relists}' "$OUT/first-$i-discovery.json" >"$OUT/first-$i.json"
      cma_stop "$A_PID" 10
      say "$name: run $i: discovery in $(jq .seconds_to_discovery "$OUT/first-$i.json") s, RSS $(jq -c .after_first_relist "$OUT/first-$i.json")"
    fi
  done

  # 1b. peak over >= 3 more relists with a 15 s relist interval, sampled every 0.1 s
  for i in $(seq 1 "$RSS_RUNS"); do
    if bench_adapter "relist-$i" 15s 2 "$expect"; then
      "${CLIENT[@]}" rss-watch --pid "$A_PID" --log "$A_LOG" --relists 3 --interval 0.1 \
        --timeout 600 --out "$OUT/relist-$i.json" &&
        say "$name: relist run $i: $(jq -c '{final_rss_kb, final_hwm_kb, rss_min_kb, rss_max_kb}' "$OUT/relist-$i.json")"
      cma_stop "$A_PID" 10
    fi
  done

  # 2.-3. requests, against one adapter (relist 1m, --v=5 for the PromQL lines)
  if bench_adapter "requests" 1m 5 "$expect"; then
    jq --argjson m "$(rss_json "$A_PID")" '. + {after_first_relist: $m}' \
      "$OUT/requests-discovery.json" >"$OUT/requests-start.json"
    "${CLIENT[@]}" capture --adapter "$A_URL" --prom "$PROM_URL" --kube "$KUBE_URL" --cases "$LAT_CASES" \
      --adapter-log "$A_LOG" --kube-log "$KUBE_REQUEST_LOG" --out "$OUT/cases.json" ||
      say "$name: capture failed"
    for i in $(seq 1 "$WRK_RUNS"); do
      "${CLIENT[@]}" discovery-latency --adapter "$A_URL" --n 200 --out "$OUT/discovery-latency-$i.json" ||
        say "$name: discovery-latency run $i had errors"
    done
    wrk_runs wrk-log
    if [ -s "$OUT/cases.json" ]; then
      for i in $(seq 1 "$LAT_RUNS"); do
        "${CLIENT[@]}" latency --adapter "$A_URL" --prom "$PROM_URL" --kube "$KUBE_URL" \
          --cases "$OUT/cases.json" --rounds "$LAT_ROUNDS" --out "$OUT/latency-$i.json" ||
          say "$name: latency run $i had errors: $(jq -c .errors "$OUT/latency-$i.json" 2>/dev/null)"
        say "$name: latency run $i: $(jq -c '.cases | to_entries | map({(.key): [.value.adapter.p50, .value.direct.p50, .value.adapter.p99, .value.direct.p99]}) | add' "$OUT/latency-$i.json" 2>/dev/null)"
      done
    fi
    jq -n --argjson m "$(rss_json "$A_PID")" --argjson relists "$("${CLIENT[@]}" relists --log "$A_LOG")" \
      '{after_requests: $m, relists: $relists}' >"$OUT/requests-end.json"
    profile_adapter selector1000
    cma_stop "$A_PID" 10
  fi

  # 2. discovery throughput at the verbosity deploy/ and the chart ship (--v=1), where no line is
  # logged per request; wrk-log-* above are the same runs with the access log on (--v=5).
  if bench_adapter "discovery" 1m 1 "$expect"; then
    wrk_runs wrk
    profile_adapter discovery
    cma_stop "$A_PID" 10
  fi

  # where the by-selector time goes, from the adapter's own --v=6 log
  if [ -s "$OUT/cases.json" ] && bench_adapter "breakdown" 1m 6 "$expect"; then
    "${CLIENT[@]}" breakdown --adapter "$A_URL" --cases "$OUT/cases.json" --log "$A_LOG" \
      --rounds 50 --out "$OUT/breakdown.json" ||
      say "$name: breakdown failed"
    cma_stop "$A_PID" 10
  fi
  jq -n --argjson m "$(rss_json "$PROM_PID")" '{at_end: $m}' >"$OUT/prometheus-end.json"
  cma_stop "$PROM_PID" 30
  rm -rf "$PROM_DIR"
}

for ds in $DATASETS; do
  case $ds in
    100k) run_dataset 100k 100 1000 || say "100k: failed" ;;
    1m) run_dataset 1m 1000 1000 || say "1m: failed" ;;
    *) say "unknown dataset $ds (100k, 1m)" ;;
  esac
done

# --- the report ---------------------------------------------------------------------------------

jq --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" --arg date_end "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  --arg datasets "$DATASETS" --argjson nodelay "$FAKE_NODELAY" --arg kube_watch "${BENCH_KUBE_WATCH:-1}" \
  '. + {loadavg_end: $load, date_end: $date_end, datasets: $datasets, fake_kube_nodelay: $nodelay, kube_watch: ($kube_watch == "1"),
        runs: {rss: $ENV.RSS_RUNS, wrk: $ENV.WRK_RUNS, latency: $ENV.LAT_RUNS,
               latency_rounds: $ENV.LAT_ROUNDS, idle: $ENV.IDLE_RUNS}}' \
  "$RESULTS/machine.json" >"$RESULTS/machine.json.tmp" && mv "$RESULTS/machine.json.tmp" "$RESULTS/machine.json"
rm -rf "$CACHE/last-run"
cp -r "$RESULTS" "$CACHE/last-run"
say "raw results in bench/.cache/last-run/"
if [ -n "$DOC" ]; then
  case $DOC in /*) ;; *) DOC=$ROOT/$DOC ;; esac
  python3 "$ROOT/bench/report.py" "$CACHE/last-run" "$DOC" && say "wrote $DOC"
fi
