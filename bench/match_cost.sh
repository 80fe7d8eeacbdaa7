#!/usr/bin/env bash
# match_cost.sh: the CPU cost of one by-selector request for 1,000 pods, in instructions, for the
# "Sample matching" subsection of docs/benchmarks.md (issue 12). A real Prometheus holds one gauge
# for 1,000 pods of one namespace (tests/lib/gen_many_pods.py), the fake kube-apiserver serves
# them with watch (so the adapter's pod watch cache resolves the selector, as in a cluster), and
# the adapter runs under valgrind's callgrind, collecting only inside cma_api_custom (the custom
# metrics recipe and everything it calls: query building, the backend call, decoding, matching,
# encoding). After a warm-up request, ROUNDS requests are sent one at a time; the script prints
# the instructions per request and the share spent in strcmp, from callgrind_annotate.
#
# DESIGN: instruction counts, not wall time: they do not depend on the machine's load (2 shared
# cores here) and compare two builds exactly. The answer is checked (1,000 items) so that a
# broken build cannot look cheap.
#
#   CMA_BIN=build-h12/custom-metrics-adapter bench/match_cost.sh [ROUNDS]   (about 2 minutes)
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

ROUNDS=${1:-5}
PODS=1000
G=/apis/custom.metrics.k8s.io/v1beta1
DATA="$CMA_TMP/many-pods"
python3 tests/lib/gen_many_pods.py "$DATA" --pods "$PODS" --others 0 >/dev/null || exit 1
cat >"$CMA_TMP/rules.yaml" <<'EOF'
rules:
- seriesQuery: 'big_gauge{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
EOF
start_prometheus "$DATA/metric.om" || exit 1
start_fake_kube "$DATA/pods.json" --watch || exit 1
OUT="$CMA_TMP/callgrind.out"
export CMA_WRAPPER="valgrind --tool=callgrind --callgrind-out-file=$OUT --toggle-collect=cma_api_custom"
start_adapter "$CMA_TMP/rules.yaml" --metrics-cache-ttl=0 || exit 1
wait_discovery big_gauge custom.metrics.k8s.io/v1beta1 120 || exit 1
LIST="$G/namespaces/big/pods/*/big_gauge?labelSelector=app%3Dbig"
n=0
# Warm-up: under callgrind the pod watch cache's first sync can take seconds, and until it has
# synced a by-selector request is a 503 (never a partial answer); wait for the whole answer.
for _ in $(seq 1 240); do
  adapter_fetch "$LIST"
  [ "$R_STATUS" = 200 ] && [ "$(jq '.items | length' <<<"$R_BODY")" = "$PODS" ] && break
  sleep 0.5
done
for _ in $(seq 1 "$ROUNDS"); do # every warm request must be whole
  adapter_fetch "$LIST"
  n=$(jq '.items | length' <<<"$R_BODY")
  if [ "$R_STATUS" != 200 ] || [ "$n" != "$PODS" ]; then
    cma_log "match_cost: status $R_STATUS, $n items (want 200, $PODS)"
    exit 1
  fi
done
callgrind_control -z "$ADAPTER_PID" >/dev/null 2>&1 # forget the warm-up and the start
for _ in $(seq 1 "$ROUNDS"); do
  adapter_fetch "$LIST"
done
stop_adapter 30 >/dev/null
total=$(callgrind_annotate --auto=no "$OUT" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
cmp=$(callgrind_annotate --inclusive=no --threshold=100 --auto=no "$OUT" 2>/dev/null |
  awk '/strcmp/ { gsub(",", "", $1); s += $1 } END { print s + 0 }')
if [ -z "$total" ] || [ "$total" -le 0 ]; then
  cma_log "match_cost: no callgrind totals in $OUT"
  exit 1
fi
echo "match_cost: $PODS pods, $ROUNDS requests: $((total / ROUNDS)) instructions per request" \
  "in cma_api_custom, strcmp $((cmp / ROUNDS)) ($((cmp * 100 / total))%);" \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
