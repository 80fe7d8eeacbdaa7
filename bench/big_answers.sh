#!/usr/bin/env bash
# big_answers.sh: the adapter's memory while it decodes big backend answers (the figures under
# "Big backend answers" in docs/benchmarks.md). A fake Prometheus (tests/lib/big_backend.py)
# answers every instant query with a vector of ANSWER_BYTES (default 50,000,000) in which only
# the three pods asked about matter (one at the start, two at the very end); the fake
# kube-apiserver holds those pods. Per run: a fresh adapter, base VmRSS after discovery, then
# VmHWM (reset through /proc/PID/clear_refs) over one custom-metrics request, then over eight
# concurrent ones; every answer is checked (the three values) and timed. Prints one Markdown table:
# median and range over the runs, with the load average before and after.
#   bench/big_answers.sh [RUNS]        (default 5; CMA_BIN=... measures another build)
# shellcheck disable=SC2119 # stop_adapter is called without its optional argument
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

runs=${1:-5}
answer_bytes=${ANSWER_BYTES:-50000000}
bin=$(cma_adapter_bin)
tmp=$(cma_tmp)
[ -x "$bin" ] || {
  echo "big_answers.sh: $bin is not built" >&2
  exit 1
}
cat >"$tmp/pods.json" <<'EOF'
[{"namespace": "ml", "name": "big-0", "labels": {"app": "big"}},
 {"namespace": "ml", "name": "big-1", "labels": {"app": "big"}},
 {"namespace": "ml", "name": "big-2", "labels": {"app": "big"}}]
EOF
cat >"$tmp/config.yaml" <<'EOF'
rules:
- seriesQuery: 'big_metric{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
EOF
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
dir=$(mktemp -d "$tmp/big-backend.XXXX")
_cma_start_with_port_file big-backend "$dir/log" "$dir/port" /debug/counts \
  python3 -u tests/lib/big_backend.py --metric big_metric --wanted ml/big-0=11 \
  --wanted ml/big-1=22 --wanted ml/big-2=33 --answer-bytes "$answer_bytes" --port 0 \
  --port-file "$dir/port" >/dev/null || exit 1
PROM_URL="http://127.0.0.1:$_CMA_PORT"
start_fake_kube "$tmp/pods.json" >/dev/null || exit 1
size=$(sed -n 's/^big_backend: answer of \([0-9]*\) bytes.*/\1/p' "$dir/log")

kib() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$ADAPTER_PID/status"; }
path="/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/%2A/big_metric?labelSelector=app%3Dbig"
want=$'big-0 11\nbig-1 22\nbig-2 33'
# fetch OUT: one request; prints its time in seconds; fails unless the answer is right.
fetch() {
  local t
  t=$(curl -s --max-time 600 --cacert "$ADAPTER_CA" -o "$1" -w '%{time_total}' "$ADAPTER_URL$path")
  [ "$(item_values "$(cat "$1")")" = "$want" ] || {
    echo "big_answers.sh: wrong answer: $(head -c 300 "$1")" >&2
    return 1
  }
  echo "$t"
}
: >"$tmp/rows"
for run in $(seq "$runs"); do
  start_adapter "$tmp/config.yaml" --prometheus-timeout=600s >/dev/null || exit 1
  wait_discovery big_metric >/dev/null || exit 1
  rss0=$(kib VmRSS)
  echo 5 >"/proc/$ADAPTER_PID/clear_refs"
  t1=$(fetch "$tmp/one") || exit 1
  peak1=$(kib VmHWM)
  echo 5 >"/proc/$ADAPTER_PID/clear_refs"
  pids=()
  t8_start=$(date +%s.%N)
  for i in 1 2 3 4 5 6 7 8; do
    fetch "$tmp/eight.$i" >"$tmp/eight.$i.t" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || exit 1; done
  t8=$(awk -v a="$t8_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
  peak8=$(kib VmHWM)
  after=$(kib VmRSS)
  echo "$rss0 $peak1 $peak8 $after $t1 $t8" >>"$tmp/rows"
  echo "run $run: base $rss0 KiB, one $peak1 KiB (${t1}s), eight $peak8 KiB (${t8}s), after $after KiB" >&2
  stop_adapter >/dev/null
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
commit=$(git rev-parse --short HEAD 2>/dev/null)
dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)
python3 - "$tmp/rows" <<PY
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
cols = list(zip(*rows))
def mib(i, sub=None):
    v = [(r[i] - (r[sub] if sub is not None else 0)) / 1024 for r in rows]
    return "%.1f (%.1f–%.1f)" % (statistics.median(v), min(v), max(v))
def sec(i):
    v = [r[i] for r in rows]
    return "%.2f (%.2f–%.2f)" % (statistics.median(v), min(v), max(v))
print("Measured $started by \`bench/big_answers.sh $runs\` with \`${bin#"$CMA_ROOT"/}\` (working tree at commit $commit, $dirty modified tracked files), $runs runs; answer $size bytes; load average $load_start before, $load_end after.")
print()
print("| figure (MiB, median (min–max) over the runs) | value |")
print("| --- | --- |")
print("| adapter after discovery, before any query: VmRSS | %s |" % mib(0))
print("| one answer: peak VmHWM | %s |" % mib(1))
print("| one answer: growth of the peak over the base | %s |" % mib(1, 0))
print("| eight concurrent answers: peak VmHWM | %s |" % mib(2))
print("| eight concurrent answers: growth of the peak over the base | %s |" % mib(2, 0))
print("| after the eight: VmRSS | %s |" % mib(3))
print("| one answer: request time (s) | %s |" % sec(4))
print("| eight concurrent answers: time until all answered (s) | %s |" % sec(5))
PY
