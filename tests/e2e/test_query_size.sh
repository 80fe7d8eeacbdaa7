#!/usr/bin/env bash
# test_query_size.sh: bounded query size (issue 12, part 3): a by-selector request for 5,000 pods, whose name regex alone is about 125 KB, answers with exactly the 5,000 requested values (computed by the generator, not by the adapter; 1,000 other pods of the namespace have series too and must be left out) from VictoriaMetrics started with -search.maxQueryLen=16384 and from Prometheus; the query sent is under 16 KiB (the adapter's --v=5 log); without the limit the adapter sends the full regex, which Prometheus answers the same and VictoriaMetrics refuses.
# asan: no
# cost: high (about a minute alone: scripts/test.sh starts it early)
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

G=/apis/custom.metrics.k8s.io/v1beta1
DATA="$CMA_TMP/many-pods"
python3 tests/lib/gen_many_pods.py "$DATA" --pods 5000 --others 1000 || exit 1
cat >"$CMA_TMP/rules.yaml" <<'EOF'
rules:
- seriesQuery: 'big_gauge{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
EOF
if ! start_prometheus "$DATA/metric.om" ||
  ! VM_ARGS=-search.maxQueryLen=16384 start_victoria_metrics "$DATA/metric.prom" 'big_gauge' ||
  ! start_fake_kube "$DATA/pods.json"; then
  t_fail "start Prometheus, VictoriaMetrics and the fake kube-apiserver"
  t_summary
  exit 1
fi
t_eq "oracle: 5,000 requested pods" 5000 "$(wc -l <"$DATA/expected.txt")"
LIST="$G/namespaces/big/pods/*/big_gauge?labelSelector=app%3Dbig"
ONE=$(head -n 1 "$DATA/expected.txt")

# The uncapped query, built here from the generator's names: VictoriaMetrics refuses it.
regex=$(cut -d' ' -f1 "$DATA/expected.txt" | paste -sd'|')
full="sum(big_gauge{namespace=\"big\",pod=~\"$regex\"}) by (pod)"
t_ok "oracle: the query naming 5,000 pods is over 100,000 bytes" test "${#full}" -gt 100000
code=$(curl -s -o "$CMA_TMP/vm-full.out" -w '%{http_code}' --max-time 60 \
  --data-urlencode "query=$full" "$VM_URL/api/v1/query")
t_ok "oracle: VictoriaMetrics (-search.maxQueryLen=16384) refuses it (HTTP $code)" test "$code" != 200
t_ok "oracle: VictoriaMetrics says why (maxQueryLen)" grep -q maxQueryLen "$CMA_TMP/vm-full.out"

# answers NAME BACKEND_URL [FLAGS...]: the adapter against BACKEND_URL answers LIST and one named
# pod; the list's "pod value" lines go to $CMA_TMP/NAME.list, its status to NAME.status, and the
# PromQL it logged for the list to NAME.promql.
answers() {
  local name=$1 url=$2
  shift 2
  if ! PROM_URL=$url V=5 start_adapter "$CMA_TMP/rules.yaml" "$@" || ! wait_discovery big_gauge; then
    t_fail "$name: start the adapter"
    return 1
  fi
  adapter_fetch "$LIST"
  echo "$R_STATUS" >"$CMA_TMP/$name.status"
  item_values "$R_BODY" 2>/dev/null | LC_ALL=C sort >"$CMA_TMP/$name.list"
  adapter_log_since_start | sed -n 's/.*custom metric pods\/big_gauge: //p' | tail -n 1 >"$CMA_TMP/$name.promql"
  adapter_fetch "$G/namespaces/big/pods/${ONE%% *}/big_gauge"
  t_eq "$name: a named pod answers its value" "$ONE" "$(item_values "$R_BODY")"
  stop_adapter
}

answers victoria-metrics "$VM_URL"
t_eq "VictoriaMetrics: the list answers 200" 200 "$(cat "$CMA_TMP/victoria-metrics.status")"
t_eq "VictoriaMetrics: exactly the 5,000 requested pods with their generated values" \
  "$(cat "$DATA/expected.txt")" "$(cat "$CMA_TMP/victoria-metrics.list")"
t_eq "VictoriaMetrics: the query sent had no name matcher" \
  'sum(big_gauge{namespace="big",pod=~".+"}) by (pod)' "$(cat "$CMA_TMP/victoria-metrics.promql")"
t_ok "VictoriaMetrics: the query sent was under 16 KiB" \
  test "$(wc -c <"$CMA_TMP/victoria-metrics.promql")" -le 16384
t_ok "VictoriaMetrics: the adapter logged why it dropped the names (--v=4)" \
  grep -q '5000 object names would pass the query limit of 16384 bytes' "$ADAPTER_LOG"

answers prometheus "$PROM_URL"
t_eq "Prometheus, limited: the list answers 200" 200 "$(cat "$CMA_TMP/prometheus.status")"
t_eq "Prometheus, limited: exactly the 5,000 requested pods with their generated values" \
  "$(cat "$DATA/expected.txt")" "$(cat "$CMA_TMP/prometheus.list")"

answers uncapped "$PROM_URL" --prometheus-max-query-length=0
t_ok "Prometheus, no limit: the query sent named every pod (over 100,000 bytes)" \
  test "$(wc -c <"$CMA_TMP/uncapped.promql")" -gt 100000
t_eq "Prometheus: the limited answer equals the uncapped one" \
  "$(cat "$CMA_TMP/uncapped.list")" "$(cat "$CMA_TMP/prometheus.list")"

answers vm-uncapped "$VM_URL" --prometheus-max-query-length=0
t_ok "VictoriaMetrics, no limit: the full query is refused (not 200)" \
  test "$(cat "$CMA_TMP/vm-uncapped.status")" != 200

t_summary
