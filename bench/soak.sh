#!/usr/bin/env bash
# soak.sh: the soak test of issue "Reliability" item 6, in one command. It owns the soak's setup:
# a release build of the adapter, one real Prometheus holding the synthetic DCGM data and the
# synthetic cAdvisor/kubelet data (covering the whole run), the fake kube-apiserver with their
# pods, and the adapter with bench/soak-config.yaml (custom, external and resource rules), a 30 s
# relist and a catalog cache file. bench/soak_client.py then sends the mixed traffic at a bounded
# rate and records the adapter's RSS, open fds and threads every minute into a CSV; the verdict
# (RSS and fds flat or not) is printed at the end.
#
#   bench/soak.sh [--seconds 3600] [--sample-seconds 60] [--rate 20] [--workers 4] [--no-build]
#                 [--out DIR]
#     --seconds N         how long the traffic runs (default 3600)
#     --sample-seconds N  how often RSS/fds/threads are recorded (default 60)
#     --rate R            requests per second, all workers together (default 20)
#     --workers N         client connections (default 4)
#     --no-build          use $CMA_BIN as it is (default build-soak/custom-metrics-adapter; a relative
#                         path is relative to the repository, as in tests/lib/common.sh)
#     --out DIR           where the results go (default bench/.cache/soak/last; its files are
#                         replaced)
# Results: soak.csv, soak.json, adapter.log, machine.txt in the --out directory. Exit status 0 when
# RSS and fds are flat and every answer had its expected status (see bench/soak_client.py).
# Servers are started and stopped with tests/lib/common.sh (one EXIT trap stops them all).

CALLER_DIR=$PWD
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

ROOT=$CMA_ROOT
SOAK_SECONDS=3600
SAMPLE_SECONDS=60
RATE=20
WORKERS=4
BUILD=1
OUT=""
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) SOAK_SECONDS=${2:-}; shift 2 ;;
    --seconds=*) SOAK_SECONDS=${1#*=}; shift ;;
    --sample-seconds) SAMPLE_SECONDS=${2:-}; shift 2 ;;
    --sample-seconds=*) SAMPLE_SECONDS=${1#*=}; shift ;;
    --rate) RATE=${2:-}; shift 2 ;;
    --rate=*) RATE=${1#*=}; shift ;;
    --workers) WORKERS=${2:-}; shift 2 ;;
    --workers=*) WORKERS=${1#*=}; shift ;;
    --no-build) BUILD=0; shift ;;
    --out) OUT=${2:-}; shift 2 ;;
    --out=*) OUT=${1#*=}; shift ;;
    -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for v in "$SOAK_SECONDS" "$SAMPLE_SECONDS" "$WORKERS"; do
  case $v in '' | *[!0-9]* | 0) echo "soak.sh: --seconds, --sample-seconds and --workers take a positive integer" >&2; exit 2 ;; esac
done
say() { cma_log "soak: $*"; }
case $OUT in '') OUT=$ROOT/bench/.cache/soak/last ;; /*) ;; *) OUT=$CALLER_DIR/$OUT ;; esac

if [ "$BUILD" = 1 ]; then
  say "building the release adapter in build-soak/"
  if ! cmake -S "$ROOT" -B "$ROOT/build-soak" -DCMAKE_BUILD_TYPE=Release -DCMA_BUILD_TESTS=OFF \
    >"$CMA_TMP/build.log" 2>&1 ||
    ! cmake --build "$ROOT/build-soak" --target custom-metrics-adapter -j2 >>"$CMA_TMP/build.log" 2>&1; then
    say "build failed:"
    tail -n 30 "$CMA_TMP/build.log" >&2
    exit 1
  fi
  export CMA_BIN=$ROOT/build-soak/custom-metrics-adapter
else
  export CMA_BIN=${CMA_BIN:-$ROOT/build-soak/custom-metrics-adapter}
fi

# --- data covering the whole run: DCGM (custom, external) and cAdvisor/kubelet (resource) -------
span=$((SOAK_SECONDS + 900))
gen_dcgm --span "$span" || exit 1
gen_resource --span $((1800 + span)) || exit 1
om_merge "$CMA_TMP/soak.om" "$DCGM_DIR/dcgm.om" "$RES_DIR/resource.om" || exit 1
jq -s '[.[0][], .[1][]] | unique_by(.namespace + "/" + .name)' "$DCGM_DIR/pods.json" \
  "$RES_DIR/pods.json" >"$CMA_TMP/pods.json" || exit 1

mkdir -p "$OUT" || exit 1
rm -f "$OUT/soak.csv" "$OUT/soak.json" "$OUT/adapter.log" "$OUT/machine.txt"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(nproc) x $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "adapter: $("$CMA_BIN" --version 2>&1 | head -n 1), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
  echo "run: --seconds $SOAK_SECONDS --sample-seconds $SAMPLE_SECONDS --rate $RATE --workers $WORKERS"
} >"$OUT/machine.txt"

RELIST=30s
V=1
export RELIST V
if ! start_prometheus "$CMA_TMP/soak.om" || ! start_fake_kube "$CMA_TMP/pods.json" ||
  ! start_adapter "$ROOT/bench/soak-config.yaml" --metrics-max-age=5m \
    "--catalog-cache-file=$CMA_TMP/catalog.cache"; then
  say "could not start Prometheus, the fake kube-apiserver and the adapter"
  exit 1
fi
if ! wait_discovery DCGM_FI_DEV_GPU_UTIL custom.metrics.k8s.io/v1beta1 120; then
  say "the adapter's discovery never listed DCGM_FI_DEV_GPU_UTIL"
  exit 1
fi
say "adapter pid $ADAPTER_PID at $ADAPTER_URL; traffic for ${SOAK_SECONDS}s at $RATE req/s, samples every ${SAMPLE_SECONDS}s"
python3 "$ROOT/bench/soak_client.py" --adapter "$ADAPTER_URL" --pid "$ADAPTER_PID" \
  --seconds "$SOAK_SECONDS" --sample-seconds "$SAMPLE_SECONDS" --rate "$RATE" --workers "$WORKERS" \
  --csv "$OUT/soak.csv" --out "$OUT/soak.json"
rc=$?
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"
stop_adapter
cp "$ADAPTER_LOG" "$OUT/adapter.log"

jq -r '
  def mib: . / 1024 * 10 | round / 10;
  "requests: \(.requests) in \(.seconds) s (\(.rate) req/s), unexpected answers: \(.unexpected)",
  "by kind: \(.by_kind | to_entries | map("\(.key) \(.value | to_entries | map("\(.key)x\(.value)") | join(","))") | join("; "))",
  (.verdict // {} |
    "RSS MiB: first \(.rss_kb.first | mib), last \(.rss_kb.last | mib), max \(.rss_kb.max | mib); per-interval minimum: first after start \(.rss_min_kb.first | mib), last \(.rss_min_kb.last | mib)",
    "RSS floor slope: \(.rss_slope_kb_per_min) ± \(.rss_slope_error_kb_per_min) kB/min over the window (\(.rss_projected_growth_pct_per_hour) %/h; limit \(.rss_limit_kb_per_min) kB/min = 5 %/h), \(.rss_slope_kb_per_min_after_warmup) kB/min over the whole run after the warm-up: \(.rss_verdict | ascii_upcase)",
    "fds under load: first \(.fds.first), last \(.fds.last), max \(.fds.max); idle (no client connected): \(.fds_idle_after_warmup) after the warm-up, \(.fds_idle_end) at the end, max \(.fds_idle.max): \(.fds_verdict | ascii_upcase)",
    "threads: first \(.threads.first), last \(.threads.last), max \(.threads.max)",
    "window: \(.window_start_s)-\(.window_end_s) s (\(.window_samples) samples)\(if .reason then "; " + .reason else "" end)")
' "$OUT/soak.json"
say "CSV and JSON in $OUT/"
exit $rc
