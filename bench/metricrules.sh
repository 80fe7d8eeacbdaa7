#!/usr/bin/env bash
# metricrules.sh: the MetricRule figures of docs/benchmarks.md ("MetricRules"): how long from the
# apply of a MetricRule to its first served value, and the adapter's memory with 1,000 MetricRules
# over 100 namespaces. A real Prometheus holds one series per (namespace, metric) (bench/
# gen_metricrules.py); the fake kube-apiserver (tests/lib/fake_kube_apiserver.py --metric-rules,
# standing in for kube-apiserver with the CRD installed: no real one runs here) serves the
# MetricRules, and its /__fake/metricrules/apply stands in for `kubectl apply`.
# Each run: a fresh fake kube-apiserver and adapter (--enable-metric-rules), then
#   1. baseline, no MetricRule: VmRSS once discovery settled; apply-to-first-value of SPARE rules
#   2. NAMESPACES x METRICS MetricRules applied at once: the time until the last one's value is
#      served, VmRSS and VmHWM, and apply-to-first-value of SPARE more rules with them in place
# and once, the same adapter with the feature off (VmRSS: what the feature costs when unused).
# Prints the medians over RUNS runs as Markdown and the machine's load.
#
# Usage: bench/metricrules.sh     (needs a built adapter: scripts/setup.sh, or CMA_BIN=...)
# Knobs: RUNS (3), NAMESPACES (100), METRICS (10 per namespace, one MetricRule each), SPARE (5),
#        RELIST (the --metrics-relist-interval, 10m: only MetricRule changes trigger discovery).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

RUNS=${RUNS:-3}
NAMESPACES=${NAMESPACES:-100}
METRICS=${METRICS:-10}
SPARE=${SPARE:-5}
export RELIST=${RELIST:-10m}
bin=$(cma_adapter_bin)
[ -x "$bin" ] || {
  echo "metricrules.sh: $bin is not built (scripts/setup.sh, or set CMA_BIN)" >&2
  exit 1
}
dir=$(cma_tmp)
client() { python3 bench/metricrules_client.py "$@"; }
rss_kib() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status"; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

python3 bench/gen_metricrules.py om "$NAMESPACES" "$METRICS" $((2 * SPARE)) "$dir/data.om" || exit 1
python3 bench/gen_metricrules.py rules "$NAMESPACES" "$METRICS" "$dir/rules.jsonl" || exit 1
for ((k = 0; k < 2 * SPARE; k++)); do
  python3 bench/gen_metricrules.py spare "$k" >"$dir/spare-$k.json" || exit 1
done
printf 'rules: []\n' >"$dir/config.yaml"
start_prometheus "$dir/data.om" || exit 1

ext=/apis/external.metrics.k8s.io/v1beta1/namespaces
last_ns=$(printf 'team-%03d' $((NAMESPACES - 1)))
last_value=$(quantity $(((NAMESPACES - 1) * 1000 + METRICS - 1)))

# settle: waits until the adapter's VmRSS stopped moving (3 readings 1 s apart within 1%).
settle() {
  local a b c
  a=$(rss_kib "$ADAPTER_PID" VmRSS)
  while :; do
    sleep 1
    b=$(rss_kib "$ADAPTER_PID" VmRSS)
    sleep 1
    c=$(rss_kib "$ADAPTER_PID" VmRSS)
    awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN { d = (a > c ? a - c : c - a); exit !(d * 100 <= a) }' && break
    a=$c
  done
  echo "$c"
}

# first_values FROM TO: apply-to-first-value seconds of spare rules FROM..TO-1, one a line.
first_values() {
  local k
  for ((k = $1; k < $2; k++)); do
    client first-value "$dir/spare-$k.json" "$ext/team-000/spare_depth_$k" \
      "$(quantity $((500000 + k)))" 60 || return 1
  done
}

for ((run = 1; run <= RUNS; run++)); do
  start_fake_kube "" --metric-rules deploy/components/metric-rules/crd.yaml || exit 1
  start_adapter "$dir/config.yaml" --enable-metric-rules >/dev/null || exit 1
  echo "$(settle)" >>"$dir/rss0"
  first_values 0 "$SPARE" >>"$dir/first0" || {
    echo "metricrules.sh: run $run: a spare rule was not served (no MetricRule around)" >&2
    exit 1
  }
  t0=$(date +%s.%N)
  client apply "$dir/rules.jsonl" >&2 || exit 1
  client wait-value "$ext/$last_ns/queue_depth_$((METRICS - 1))" "$last_value" 300 >/dev/null || {
    echo "metricrules.sh: run $run: the last MetricRule was not served within 300 s" >&2
    exit 1
  }
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f\n", b - a }' >>"$dir/all"
  settle >>"$dir/rss1"
  rss_kib "$ADAPTER_PID" VmHWM >>"$dir/hwm1"
  first_values "$SPARE" $((2 * SPARE)) >>"$dir/first1" || {
    echo "metricrules.sh: run $run: a spare rule was not served with $((NAMESPACES * METRICS)) MetricRules" >&2
    exit 1
  }
  stop_adapter >/dev/null 2>&1
  cma_stop "$KUBE_PID" 2>/dev/null
done
start_fake_kube "" --metric-rules deploy/components/metric-rules/crd.yaml || exit 1
start_adapter "$dir/config.yaml" >/dev/null || exit 1
off=$(settle)
stop_adapter >/dev/null 2>&1

mib() { awk '{ printf "%.1f MiB", $1 / 1024 }'; }
n=$((NAMESPACES * METRICS))
echo "| measure | no MetricRule | $n MetricRules in $NAMESPACES namespaces |"
echo "| --- | --- | --- |"
echo "| apply to first served value, median of $((RUNS * SPARE)) (s) | $(median <"$dir/first0") | $(median <"$dir/first1") |"
echo "| VmRSS once settled, median of $RUNS | $(median <"$dir/rss0" | mib) | $(median <"$dir/rss1" | mib) |"
echo "| VmHWM | | $(median <"$dir/hwm1" | mib) |"
echo "| all $n applied to the last one served, median of $RUNS (s) | | $(median <"$dir/all") |"
echo
echo "Feature off (no --enable-metric-rules), same config: VmRSS $(echo "$off" | mib)."
echo "Load: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) on $(nproc) cores; binary $bin."
