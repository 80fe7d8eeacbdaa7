#!/usr/bin/env bash
# test_freshness.sh: maxSampleAge (issue 12, part 2) against a real Prometheus: a pod whose newest raw sample is 3 minutes old is served by a rule without maxSampleAge and treated as missing by the same rule with `maxSampleAge: 2m` (a named GET answers 404 saying how old the data is, a by-selector list leaves it out), although Prometheus stamps the aggregated answer with the evaluation time; a fresh pod is served with its value; an external rule leaves its stale item out. The data is backfilled with old timestamps (OpenMetrics through promtool).
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

G=/apis/custom.metrics.k8s.io/v1beta1
E=/apis/external.metrics.k8s.io/v1beta1
now=$(date +%s)
om="$CMA_TMP/fresh.om"
# series NAME LABELS VALUE FROM TO: one sample every 15 s from now+FROM to now+TO (seconds).
series() {
  local t
  for ((t = now + $4; t <= now + $5; t += 15)); do
    printf '%s{%s} %s %s\n' "$1" "$2" "$3" "$t"
  done
}
{
  echo "# TYPE fresh_gauge gauge"
  # p-new reaches into the future (fresh during the whole run); p-old stopped 3 minutes ago (within
  # Prometheus' 5 m lookback, older than 2m); p-gone stopped 12 minutes ago (outside the lookback).
  series fresh_gauge 'namespace="fresh",pod="p-new"' 7 -600 900
  series fresh_gauge 'namespace="fresh",pod="p-old"' 5 -600 -180
  series fresh_gauge 'namespace="fresh",pod="p-gone"' 3 -1200 -720
  echo "# TYPE queue_depth gauge"
  series queue_depth 'queue="a"' 11 -600 -180
  series queue_depth 'queue="b"' 13 -600 900
  echo "# EOF"
} >"$om"
cat >"$CMA_TMP/pods.json" <<'EOF'
[{"namespace": "fresh", "name": "p-new", "labels": {"app": "fresh"}, "phase": "Running"},
 {"namespace": "fresh", "name": "p-old", "labels": {"app": "fresh"}, "phase": "Running"},
 {"namespace": "fresh", "name": "p-gone", "labels": {"app": "fresh"}, "phase": "Running"}]
EOF
cat >"$CMA_TMP/rules.yaml" <<'EOF'
rules:
- seriesQuery: 'fresh_gauge{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {matches: '^fresh_gauge$', as: 'fresh_gauge'}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
  maxSampleAge: 2m
- seriesQuery: 'fresh_gauge{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {matches: '^fresh_gauge$', as: 'fresh_gauge_unchecked'}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
externalRules:
- seriesQuery: 'queue_depth{queue!=""}'
  resources: {namespaced: false}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (queue)'
  maxSampleAge: 2m
EOF

if ! start_prometheus "$om" || ! start_fake_kube "$CMA_TMP/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi

# The premise, on Prometheus itself: the aggregated answer carries the evaluation time, so its
# timestamp cannot tell that p-old's data is 3 minutes old; timestamp() of the raw series can.
eval_ts=$(prom_query 'sum(fresh_gauge{pod="p-old"}) by (pod)' | jq -r '.data.result[0].value[0] | floor')
raw_ts=$(prom_query 'timestamp(fresh_gauge{pod="p-old"})' | jq -r '.data.result[0].value[1] | tonumber | floor')
t_ok "Prometheus: sum() of p-old is stamped with the evaluation time (within 60 s of now)" \
  test $((eval_ts - $(date +%s))) -gt -60
t_ok "Prometheus: timestamp() of p-old's raw series is at least 170 s old" \
  test $(($(date +%s) - raw_ts)) -ge 170

if ! V=5 start_adapter "$CMA_TMP/rules.yaml" || ! wait_discovery fresh_gauge_unchecked ||
  ! wait_discovery queue_depth external.metrics.k8s.io/v1beta1; then
  t_fail "start the adapter"
  t_summary
  exit 1
fi

# Without maxSampleAge the 3-minute-old value is served (the control).
adapter_fetch "$G/namespaces/fresh/pods/p-old/fresh_gauge_unchecked"
t_eq "no maxSampleAge: p-old answers 200" 200 "$R_STATUS"
t_json "no maxSampleAge: p-old's value is served" "$R_BODY" '.items[0].value' 5

# With maxSampleAge: 2m the same data is treated as missing, with the reason.
adapter_fetch "$G/namespaces/fresh/pods/p-old/fresh_gauge"
t_eq "maxSampleAge 2m: p-old answers 404" 404 "$R_STATUS"
t_json "maxSampleAge 2m: the 404 is a Status whose code is 404" "$R_BODY" '.code' 404
t_ok "maxSampleAge 2m: the 404 says how old the data is, the limit and where it is set" \
  grep -Eq 'its newest sample is 3m[0-9.]+s old, older than maxSampleAge 2m0s \(.*rules.yaml:6:17\)' \
  <<<"$(jq -r .message <<<"$R_BODY")"
adapter_fetch "$G/namespaces/fresh/pods/p-new/fresh_gauge"
t_eq "maxSampleAge 2m: p-new answers 200" 200 "$R_STATUS"
t_json "maxSampleAge 2m: p-new's value is served" "$R_BODY" '.items[0].value' 7
served=$(jq -r '.items[0].timestamp' <<<"$R_BODY")
t_ok "maxSampleAge 2m: p-new's timestamp is the answer's (an RFC 3339 time within 60 s of now)" \
  test $(($(date +%s) - $(date -d "$served" +%s))) -lt 60
adapter_fetch "$G/namespaces/fresh/pods/p-gone/fresh_gauge"
t_eq "maxSampleAge 2m: p-gone (no sample within the lookback) answers 404" 404 "$R_STATUS"

# A list leaves the stale object out; the rule without maxSampleAge lists it.
adapter_fetch "$G/namespaces/fresh/pods/*/fresh_gauge?labelSelector=app%3Dfresh"
t_eq "maxSampleAge 2m: the by-selector list answers 200" 200 "$R_STATUS"
t_eq "maxSampleAge 2m: the list holds p-new only" "p-new 7" "$(item_values "$R_BODY" | paste -sd,)"
adapter_fetch "$G/namespaces/fresh/pods/*/fresh_gauge_unchecked?labelSelector=app%3Dfresh"
t_eq "no maxSampleAge: the list holds p-new and p-old" "p-new 7,p-old 5" \
  "$(item_values "$R_BODY" | paste -sd,)"

# External: the stale queue is left out, the fresh one served.
adapter_fetch "$E/namespaces/default/queue_depth"
t_eq "external, maxSampleAge 2m: answers 200" 200 "$R_STATUS"
t_json "external, maxSampleAge 2m: only queue b (queue a stopped 3 minutes ago)" "$R_BODY" \
  '[.items[] | "\(.metricLabels.queue)=\(.value)"] | join(",")' "b=13"

# What the adapter sent to learn the data's age (--v=5).
t_ok "the age query of the custom rule: max by (pod) of timestamp() of the rule's series" \
  grep -Fq 'fresh_gauge ages: max by (pod) (timestamp(fresh_gauge{namespace="fresh",pod="p-old"}))' \
  <<<"$(adapter_log_since_start)"
t_ok "the age query of the external rule groups by the items' labels" \
  grep -Fq 'external metric ages: max by (queue) (timestamp(queue_depth{}))' \
  <<<"$(adapter_log_since_start)"

stop_adapter
t_summary
