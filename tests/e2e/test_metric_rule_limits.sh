#!/usr/bin/env bash
# test_metric_rule_limits.sh: MetricRule status and limits as the adapter applies them itself
# (issue 23 parts 4 and 5): the adapter with --enable-metric-rules against the fake kube-apiserver
# serving the MetricRule CRD and a real Prometheus holding queue_depth in shop, web and billing,
# behind a proxy that logs every query and holds the ones naming pod "slowpoke" for 6 s.
# Checks, from what the fake kube-apiserver received (/__fake/metricrules/status-log) and the
# stored objects:
#   - an accepted MetricRule's status: observedGeneration, Accepted True, metrics [team_queue];
#     a new generation moves observedGeneration;
#   - a broken one: InvalidSpec naming spec.rules[0].metricsQuery and line:column;
#   - a conflict with the config file's rule: Conflict naming the config file:line:column; one
#     between two MetricRules of a namespace: Conflict naming the older MetricRule;
#   - no write when nothing changed: the number of writes across a forced relist (410) stays;
#   - --metric-rules-namespace-selector over the Namespaces' labels: billing (its label does not
#     match) is NamespaceNotAllowed and its metric is not served, web's and shop's are. The fake
#     kube-apiserver cannot change a Namespace's labels, so the selector is tested with namespaces
#     whose labels differ (a label change is covered by metricrule_ctl_test);
#   - --metric-rules-max-per-namespace 2: the newest of three is TooManyRules, not served;
#   - --metric-rules-max-concurrent-queries 1: while one of shop's queries is held by the backend,
#     another of shop's gets a 429 Status with Retry-After, and web's is answered;
#   - --metric-rules-max-query-timeout: the held query, answered 200 under the default 30 s, ends
#     with a 504 Status once the adapter runs with a 2 s limit.
# asan: yes
# shellcheck disable=SC2119 # stop_adapter is called without its optional timeout
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

OM="$CMA_TMP/namespaces.om"
python3 - "$OM" <<'EOF'
import sys, time
now = int(time.time())
series = [("queue_depth", {"namespace": "shop", "pod": "orders-0"}, 3),
          ("queue_depth", {"namespace": "shop", "pod": "slowpoke"}, 4),
          ("queue_depth", {"namespace": "web", "pod": "front-0"}, 7),
          ("queue_depth", {"namespace": "billing", "pod": "invoices-0"}, 977),
          ("jobs_waiting", {"namespace": "shop", "pod": "orders-0"}, 2)]
with open(sys.argv[1], "w") as out:
    for name in ("queue_depth", "jobs_waiting"):
        out.write("# TYPE %s gauge\n" % name)
        for n, labels, value in series:
            if n != name:
                continue
            text = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
            for ts in range(now - 120, now + 3600, 60):
                out.write("%s{%s} %d %d\n" % (name, text, value, ts))
    out.write("# EOF\n")
EOF
PODS="$CMA_TMP/pods.json"
cat >"$PODS" <<'EOF'
[{"namespace": "shop", "name": "orders-0", "labels": {"app": "orders"}, "phase": "Running"},
 {"namespace": "shop", "name": "slowpoke", "labels": {"app": "orders"}, "phase": "Running"},
 {"namespace": "web", "name": "front-0", "labels": {"app": "front"}, "phase": "Running"},
 {"namespace": "billing", "name": "invoices-0", "labels": {"app": "invoices"}, "phase": "Running"}]
EOF
CONFIG="$CMA_TMP/config.yaml"
cat >"$CONFIG" <<'EOF'
rules:
- seriesQuery: 'jobs_waiting{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
EOF

if ! start_prometheus "$OM" || ! start_fake_kube "$PODS" --metric-rules deploy/components/metric-rules/crd.yaml; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
QLOG="$CMA_TMP/backend-queries.jsonl"
# every query and series request the adapter sends, logged by a proxy in front of Prometheus
# (tests/lib/query_log_proxy.py); it holds the queries naming slowpoke for 6 s
if ! start_query_log_proxy "$PROM_URL" "$QLOG" --hold slowpoke 6; then
  t_fail "start the query-logging proxy"
  t_summary
  exit 1
fi
PROM_URL=$QUERY_PROXY_URL

BASE="$KUBE_URL/apis/metrics.custom-metrics-adapter.dev/v1alpha1"
object() { kube_control "$BASE/namespaces/$1/metricrules/$2"; }
status_log() { kube_control "$KUBE_URL/__fake/metricrules/status-log"; }
writes() { status_log | jq length; }
# wait_reason NS NAME REASON: until the stored object's Accepted condition has REASON
wait_reason() {
  local deadline=$((SECONDS + 60))
  until [ "$(object "$1" "$2" | jq -r '.status.conditions[0].reason // ""' 2>/dev/null)" = "$3" ]; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.3
  done
}
# wait_gen NS NAME GEN: until status.observedGeneration is GEN
wait_gen() {
  local deadline=$((SECONDS + 60))
  until [ "$(object "$1" "$2" | jq -r '.status.observedGeneration // 0' 2>/dev/null)" = "$3" ]; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.3
  done
}

POD_RES='{"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}'
# spec_queue AS QUERY_TAIL: AS from queue_depth, metricsQuery sum(...) by (...) QUERY_TAIL
spec_queue() {
  jq -n --argjson res "$POD_RES" --arg to "$1" --arg tail "$2" '{rules: [{seriesQuery: "queue_depth{pod!=\"\"}",
    resources: $res, name: {matches: "^queue_depth$", as: $to},
    metricsQuery: ("sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)" + $tail)}]}'
}
G=/apis/custom.metrics.k8s.io/v1beta2

start_adapter "$CONFIG" --enable-metric-rules \
  '--metric-rules-namespace-selector=kubernetes.io/metadata.name in (shop,web)' \
  --metric-rules-max-per-namespace=2 --metric-rules-max-concurrent-queries=1 || {
  t_fail "start the adapter"
  t_summary
  exit 1
}
wait_discovery jobs_waiting custom.metrics.k8s.io/v1beta2 || t_fail "the config's metric is listed"

# ---- accepted: the status written by the adapter ----------------------------------------------
mr_apply shop queue "$(spec_queue team_queue "")"
t_ok "shop/queue: Accepted written" wait_reason shop queue Accepted
t_json "shop/queue: observedGeneration, condition, metrics" "$(object shop queue)" \
  '.status | "\(.observedGeneration) \(.conditions[0].type)=\(.conditions[0].status) \(.conditions[0].observedGeneration) \(.metrics | join(","))"' \
  "1 Accepted=True 1 team_queue"
t_json "the write was a merge patch of the status subresource, accepted" "$(status_log)" \
  '[.[] | select(.path | endswith("/shop/metricrules/queue/status"))][0] | "\(.method) \(.contentType) \(.code)"' \
  "PATCH application/merge-patch+json 200"
t_ok "shop's team_queue served" wait_metric_values "$G/namespaces/shop/pods/orders-0/team_queue" "orders-0 3"

# ---- a new generation ------------------------------------------------------------------------
mr_apply shop queue "$(spec_queue team_queue " * 2")"
t_ok "shop/queue generation 2: observedGeneration follows" wait_gen shop queue 2
t_json "shop/queue generation 2: still Accepted, condition of generation 2" "$(object shop queue)" \
  '.status | "\(.conditions[0].reason) \(.conditions[0].observedGeneration) \(.metrics | join(","))"' \
  "Accepted 2 team_queue"

# ---- broken: the field and line:column --------------------------------------------------------
mr_apply shop broken "$(jq -n --argjson res "$POD_RES" '{rules: [{seriesQuery: "queue_depth{pod!=\"\"}",
  resources: $res, name: {matches: "^queue_depth$", as: "broken_queue"},
  metricsQuery: "sum(rate(<<.Series>>{<<.LabelMatchers>>})) by (<<.GroupBy>>)"}]}')"
t_ok "shop/broken: InvalidSpec written" wait_reason shop broken InvalidSpec
t_json "shop/broken: False, the field and line:column, no metrics" "$(object shop broken)" \
  '.status | "\(.conditions[0].status) \(.metrics | length) \(.conditions[0].message | test("^spec\\.rules\\[0\\]\\.metricsQuery: .*1:[0-9]+: expected type range vector"))"' \
  "False 0 true"

# ---- a conflict with the config file's rule ---------------------------------------------------
mr_apply shop jobs "$(jq -n --argjson res "$POD_RES" '{rules: [{seriesQuery: "jobs_waiting{pod!=\"\"}",
  resources: $res, metricsQuery: "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>) * 1000"}]}')"
t_ok "shop/jobs: Conflict written" wait_reason shop jobs Conflict
# (the config's rule serves jobs_waiting for namespaces and pods; the first lost is named)
t_json "shop/jobs: the winner is the config file's rule, file:line:column" "$(object shop jobs)" \
  '.status.conditions[0].message' "namespaces/jobs_waiting is served by the config file's rule $CONFIG:2:3"
t_eq "the config's jobs_waiting is still served" "orders-0 2" \
  "$(metric_values "$G/namespaces/shop/pods/orders-0/jobs_waiting")"

# ---- the namespace selector -------------------------------------------------------------------
mr_apply billing queue "$(spec_queue team_queue "")"
t_ok "billing/queue: NamespaceNotAllowed written" wait_reason billing queue NamespaceNotAllowed
t_eq "billing's team_queue not served" "HTTP 404" "$(metric_values "$G/namespaces/billing/pods/*/team_queue")"

# ---- the number of MetricRules per namespace: web holds 2 ------------------------------------
mr_apply web a "$(spec_queue web_a "")"
mr_apply web b "$(spec_queue web_b "")"
mr_apply web c "$(spec_queue web_c "")"
t_ok "web/a: Accepted" wait_reason web a Accepted
t_ok "web/b: Accepted" wait_reason web b Accepted
t_ok "web/c (the newest of three): TooManyRules" wait_reason web c TooManyRules
t_ok "web's web_a served" wait_metric_values "$G/namespaces/web/pods/front-0/web_a" "front-0 7"
t_eq "web's web_c not served" "HTTP 404" "$(metric_values "$G/namespaces/web/pods/front-0/web_c")"

# ---- a conflict between two MetricRules: the older (a; same second: by name) wins -------------
mr_apply web b "$(spec_queue web_a " * 100")"
t_ok "web/b now also defines web_a: Conflict written" wait_reason web b Conflict
t_json "web/b: the winner is MetricRule web/a" "$(object web b)" \
  '.status | "\(.conditions[0].message)|\(.metrics | length)"' "namespaces/web_a is served by MetricRule web/a|0"
t_eq "web_a keeps web/a's values" "front-0 7" "$(metric_values "$G/namespaces/web/pods/front-0/web_a")"

# ---- no write when nothing changed, across a relist -------------------------------------------
wait_reason shop queue Accepted
before=$(writes)
lists_before=$(grep '"/apis/metrics.custom-metrics-adapter.dev/v1alpha1/metricrules"' "$KUBE_REQUEST_LOG" | grep -vc 'watch')
kube_control "$KUBE_URL/__fake/metricrules/gone" >/dev/null
relisted() {
  [ "$(grep '"/apis/metrics.custom-metrics-adapter.dev/v1alpha1/metricrules"' "$KUBE_REQUEST_LOG" | grep -vc 'watch')" -gt "$lists_before" ]
}
deadline=$((SECONDS + 60))
until relisted || [ "$SECONDS" -ge "$deadline" ]; do sleep 0.3; done
t_ok "the adapter re-listed MetricRules after the 410" relisted
sleep 3 # three passes of the status thread
t_eq "no status written across the relist (nothing changed)" "$before" "$(writes)"

# ---- concurrency: one slot per namespace and backend ------------------------------------------
# shop/jobs (Conflict) takes one of shop's two MetricRule places: delete it for shop/slow
kube_control "$KUBE_URL/__fake/metricrules/delete?namespace=shop&name=jobs" >/dev/null
mr_apply shop slow "$(jq -n --argjson res "$POD_RES" '{rules: [{seriesQuery: "queue_depth{pod!=\"\"}",
  resources: $res, name: {matches: "^queue_depth$", as: "slow_queue"},
  metricsQuery: "sum(<<.Series>>{<<.LabelMatchers>>,pod!=\"slowpoke\"}) by (<<.GroupBy>>)"}]}')"
t_ok "shop/slow: Accepted" wait_reason shop slow Accepted
held_before=$(grep -c slowpoke "$QLOG")
curl -s --max-time 30 --cacert "$ADAPTER_CA" -o /dev/null -w '%{http_code}' \
  "$ADAPTER_URL$G/namespaces/shop/pods/orders-0/slow_queue" >"$CMA_TMP/held.status" &
held_pid=$!
deadline=$((SECONDS + 30))
until [ "$(grep -c slowpoke "$QLOG")" -gt "$held_before" ] || [ "$SECONDS" -ge "$deadline" ]; do sleep 0.1; done
curl -s --max-time 30 --cacert "$ADAPTER_CA" -D "$CMA_TMP/429.headers" -o "$CMA_TMP/429.body" \
  "$ADAPTER_URL$G/namespaces/shop/pods/orders-0/team_queue" >/dev/null
t_json "shop's second query while its slot is held: a 429 Status" "$(cat "$CMA_TMP/429.body")" \
  '"\(.kind) \(.code) \(.reason)"' "Status 429 TooManyRequests"
t_eq "the 429 carries Retry-After" "1" \
  "$(tr -d '\r' <"$CMA_TMP/429.headers" | awk -F': ' 'tolower($1)=="retry-after" {print $2}')"
t_eq "web's query meanwhile: answered" "front-0 7" "$(metric_values "$G/namespaces/web/pods/front-0/web_a")"
wait "$held_pid"
t_eq "the held query was answered" "200" "$(cat "$CMA_TMP/held.status")"
t_ok "shop's slot is free again" wait_metric_values "$G/namespaces/shop/pods/orders-0/team_queue" "orders-0 6"

# ---- the query time a MetricRule may use: --metric-rules-max-query-timeout ------------------------
# Above, the held query (6 s at the backend) was answered 200 within the default 30 s. The same
# adapter restarted with a 2 s limit: the same request ends before the backend answers.
stop_adapter >/dev/null 2>&1
start_adapter "$CONFIG" --enable-metric-rules \
  '--metric-rules-namespace-selector=kubernetes.io/metadata.name in (shop,web)' \
  --metric-rules-max-per-namespace=2 --metric-rules-max-concurrent-queries=1 \
  --metric-rules-max-query-timeout=2s || {
  t_fail "restart the adapter with --metric-rules-max-query-timeout=2s"
  t_summary
  exit 1
}
t_ok "web's MetricRule is served again after the restart" wait_metric_values "$G/namespaces/web/pods/front-0/web_a" "front-0 7"
code=$(curl -s --max-time 30 --cacert "$ADAPTER_CA" -o "$CMA_TMP/clamp.body" -w '%{http_code}' \
  "$ADAPTER_URL$G/namespaces/shop/pods/orders-0/slow_queue")
t_eq "shop's query held 6 s by the backend, with a 2 s limit: 504" "504" "$code"
t_json "... a Status naming the timeout" "$(cat "$CMA_TMP/clamp.body")" '"\(.kind) \(.code)"' "Status 504"

# the status thread stops with the adapter (under ASan: no leak, no error at exit)
stop_adapter
t_eq "the adapter stops cleanly" 0 "$?"
t_eq "no sanitizer report in the adapter's log" "0" \
  "$(grep -c 'Sanitizer\|runtime error' "$ADAPTER_LOG")"

t_summary
