#!/usr/bin/env bash
# test_metric_rules.sh: MetricRules served (issue 23 parts 2 and 3): the adapter with
# --enable-metric-rules against the fake kube-apiserver serving the MetricRule CRD (LIST/WATCH,
# tests/lib/fake_metric_rules.py) and a real Prometheus holding the same metrics in three
# namespaces (shop, web, billing), reached through a small logging proxy that records every query
# the backend receives. Checks: a created MetricRule is served (discovery and values); shop and
# web each get their own values for the same metric name (from the generated data); billing,
# which has no MetricRule, gets nothing; a MetricRule's rule never answers for nodes (a
# cluster-scoped resource) nor for another namespace, and its external metric only under its own
# namespaces/N/; the config file's rule wins over a MetricRule for the same metric; a change and a
# delete are reflected; a client requesting web's metric and the config's all along sees no
# error while shop's MetricRules are created, changed, broken and deleted, and shop's values
# during a change are the old or the new ones, never anything else; a dropped watch and a 410
# are survived (later changes still arrive); the adversarial queries of
# tests/lib/promql_corpus.py written as externalRules metricsQuery return exactly what
# Prometheus returns for the same query restricted to shop by hand; every query the backend
# received for a MetricRule carries namespace="shop" or namespace="web"; a config reload re-merges
# (the new config rule served, the MetricRules still served, the config still winning).
# asan: yes
# shellcheck disable=SC2119 # stop_adapter is called without its optional timeout
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

# ---- the data: three namespaces, constant values from 2 minutes ago to an hour ahead ----------
OM="$CMA_TMP/namespaces.om"
python3 - "$OM" <<'EOF'
import sys, time
now = int(time.time())
families = {
    "queue_depth": [({"namespace": "shop", "pod": "orders-0"}, 3), ({"namespace": "shop", "pod": "orders-1"}, 5),
                    ({"namespace": "web", "pod": "front-0"}, 7), ({"namespace": "web", "pod": "front-1"}, 11),
                    ({"namespace": "billing", "pod": "invoices-0"}, 977)],
    "jobs_waiting": [({"namespace": "shop", "pod": "orders-0"}, 2), ({"namespace": "web", "pod": "front-0"}, 4)],
    "node_queue": [({"namespace": "shop", "node": "node-0"}, 42)],
}
with open(sys.argv[1], "w") as out:
    for name, series in families.items():
        out.write("# TYPE %s gauge\n" % name)
        for labels, value in series:
            text = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
            for ts in range(now - 120, now + 3600, 60):
                out.write("%s{%s} %d %d\n" % (name, text, value, ts))
    out.write("# EOF\n")
EOF
PODS="$CMA_TMP/pods.json"
cat >"$PODS" <<'EOF'
[{"namespace": "shop", "name": "orders-0", "labels": {"app": "orders"}, "phase": "Running"},
 {"namespace": "shop", "name": "orders-1", "labels": {"app": "orders"}, "phase": "Running"},
 {"namespace": "web", "name": "front-0", "labels": {"app": "front"}, "phase": "Running"},
 {"namespace": "web", "name": "front-1", "labels": {"app": "front"}, "phase": "Running"},
 {"namespace": "billing", "name": "invoices-0", "labels": {"app": "invoices"}, "phase": "Running"}]
EOF
# The config file's rule: jobs_waiting, as is.
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
# (tests/lib/query_log_proxy.py)
if ! start_query_log_proxy "$PROM_URL" "$QLOG"; then
  t_fail "start the query-logging proxy"
  t_summary
  exit 1
fi
REAL_PROM_URL=$PROM_URL
PROM_URL=$QUERY_PROXY_URL
# A named backend (the same proxy) that MetricRules of web may use, and no other namespace's.
cat >>"$CONFIG" <<EOF
backends:
- name: team-prom
  url: $PROM_URL
  metricRules: {allowed: true, namespaces: [web]}
EOF

delete() { kube_control "$KUBE_URL/__fake/metricrules/delete?namespace=$1&name=$2" >/dev/null; }

POD_RES='{"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}'
# spec_queue FACTOR: team_queue from queue_depth (times FACTOR).
spec_queue() {
  jq -n --argjson res "$POD_RES" --arg f "$1" '{rules: [{seriesQuery: "queue_depth{pod!=\"\"}",
    resources: $res, name: {matches: "^queue_depth$", as: "team_queue"},
    metricsQuery: ("sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>) * " + $f)}]}'
}

G=/apis/custom.metrics.k8s.io/v1beta2
E=/apis/external.metrics.k8s.io/v1beta1

start_adapter "$CONFIG" --enable-metric-rules || {
  t_fail "start the adapter"
  t_summary
  exit 1
}
wait_discovery jobs_waiting custom.metrics.k8s.io/v1beta2 || t_fail "the config's metric is listed"

# ---- created: served within seconds, each namespace its own values ----------------------------
mr_apply shop queue "$(spec_queue 1)"
mr_apply web queue "$(spec_queue 1)"
t_ok "shop's MetricRule: team_queue listed" wait_discovery team_queue custom.metrics.k8s.io/v1beta2
SHOP1=$'orders-0 3\norders-1 5'
WEB1=$'front-0 7\nfront-1 11'
t_ok "shop's team_queue: shop's values" wait_metric_values "$G/namespaces/shop/pods/*/team_queue" "$SHOP1"
t_ok "web's team_queue: web's values" wait_metric_values "$G/namespaces/web/pods/*/team_queue" "$WEB1"
t_eq "billing (no MetricRule) has no team_queue" "HTTP 404" \
  "$(metric_values "$G/namespaces/billing/pods/*/team_queue")"
t_eq "one pod by name in shop" "orders-1 5" "$(metric_values "$G/namespaces/shop/pods/orders-1/team_queue")"
t_eq "web's pod asked in shop: nothing of web" "HTTP 404" \
  "$(metric_values "$G/namespaces/shop/pods/front-0/team_queue" | grep -v '^$' || echo "HTTP 404")"
t_eq "team_queue listed once in discovery" "1" \
  "$(adapter_curl "$G" | jq '[.resources[] | select(.name == "pods/team_queue")] | length')"

# ---- config wins; nodes and other namespaces never use a MetricRule ---------------------------
mr_apply shop jobs "$(jq -n --argjson res "$POD_RES" '{rules: [{seriesQuery: "jobs_waiting{pod!=\"\"}",
  resources: $res, metricsQuery: "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>) * 1000"}]}')"
mr_apply shop nodes "$(jq -n '{rules: [{seriesQuery: "node_queue",
  resources: {overrides: {node: {resource: "node"}}}, name: {matches: "^node_queue$", as: "mr_node_queue"},
  metricsQuery: "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"}]}')"
mr_apply shop ext "$(jq -n '{externalRules: [{seriesQuery: "queue_depth",
  resources: {overrides: {namespace: {resource: "namespace"}}}, name: {matches: "^queue_depth$", as: "shop_queue_total"},
  metricsQuery: "sum(<<.Series>>{<<.LabelMatchers>>})"}]}')"
t_ok "shop's node rule listed (for nodes)" wait_discovery mr_node_queue custom.metrics.k8s.io/v1beta2
t_ok "shop's external metric listed" wait_discovery shop_queue_total external.metrics.k8s.io/v1beta1
t_eq "config rule wins over shop's MetricRule (jobs_waiting)" "orders-0 2" \
  "$(metric_values "$G/namespaces/shop/pods/*/jobs_waiting")"
t_eq "a MetricRule never answers for nodes" "HTTP 404" "$(metric_values "$G/nodes/*/mr_node_queue")"
t_eq "nor for one node by name" "HTTP 404" "$(metric_values "$G/nodes/node-0/mr_node_queue")"
body=$(adapter_curl "$E/namespaces/shop/shop_queue_total")
t_eq "shop's external metric under namespaces/shop" "200 8" "$(last_status) $(jq -r '.items[0].value' <<<"$body")"
adapter_curl "$E/namespaces/web/shop_queue_total" >/dev/null
t_eq "shop's external metric not under namespaces/web" "404" "$(last_status)"

# ---- backends: a named one only where the config allows it ------------------------------------
# named_spec NAME: an external rule on the backend team-prom serving NAME.
named_spec() {
  jq -n --arg n "$1" '{externalRules: [{seriesQuery: "queue_depth", backend: "team-prom",
    resources: {overrides: {namespace: {resource: "namespace"}}}, name: {matches: "^queue_depth$", as: $n},
    metricsQuery: "sum(<<.Series>>{<<.LabelMatchers>>})"}]}'
}
mr_apply web named "$(named_spec web_named_total)"
mr_apply shop named "$(named_spec shop_named_total)"
t_ok "web's MetricRule on the named backend is served" wait_discovery web_named_total external.metrics.k8s.io/v1beta1
body=$(adapter_curl "$E/namespaces/web/web_named_total")
t_eq "web's named-backend metric: web's sum" "200 18" "$(last_status) $(jq -r '.items[0].value' <<<"$body")"
t_ok "shop's MetricRule on it is refused: BackendNotAllowed, naming the field" grep -q \
  'MetricRule shop/named generation 1 not accepted (BackendNotAllowed): spec.externalRules\[0\].backend: backend "team-prom" is not allowed for MetricRules in namespace shop' "$ADAPTER_LOG"
t_eq "shop's named-backend metric is not listed" "false" \
  "$(adapter_curl "$E" | jq '[.resources[].name] | index("shop_named_total") != null')"

# ---- a client requesting all along while shop's MetricRules change ----------------------------
# bg_values PATH: values, with files of its own (the foreground's adapter_curl uses the shared ones)
bg_values() {
  local status
  status=$(curl -s --max-time 30 --cacert "$ADAPTER_CA" -o "$CMA_TMP/bg_body" -w '%{http_code}' \
    "$ADAPTER_URL$1")
  if [ "$status" = 200 ]; then item_values "$(cat "$CMA_TMP/bg_body")"; else echo "HTTP $status"; fi
}
BG="$CMA_TMP/background.log"
: >"$BG"
(
  while [ ! -e "$CMA_TMP/stop-bg" ]; do
    w=$(bg_values "$G/namespaces/web/pods/*/team_queue" | tr '\n' ' ')
    c=$(bg_values "$G/namespaces/web/pods/*/jobs_waiting" | tr '\n' ' ')
    s=$(bg_values "$G/namespaces/shop/pods/*/team_queue" | tr '\n' ' ')
    echo "web=[$w] cfg=[$c] shop=[$s]" >>"$BG"
  done
) &
BG_PID=$!
cma_on_exit "kill $BG_PID 2>/dev/null"
SHOP10=$'orders-0 30\norders-1 50'
mr_apply shop queue "$(spec_queue 10)"
t_ok "changed: shop's values times 10" wait_metric_values "$G/namespaces/shop/pods/*/team_queue" "$SHOP10"
# broken: a new generation whose metricsQuery does not parse is not accepted (not served)
mr_apply shop queue "$(jq -n --argjson res "$POD_RES" '{rules: [{seriesQuery: "queue_depth{pod!=\"\"}",
  resources: $res, name: {matches: "^queue_depth$", as: "team_queue"},
  metricsQuery: "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>"}]}')"
t_ok "broken: shop's team_queue no longer served" wait_metric_values "$G/namespaces/shop/pods/*/team_queue" "HTTP 404"
t_ok "the adapter logs why (the field and position)" grep -q "MetricRule shop/queue generation .* not accepted (InvalidSpec): spec.rules\[0\].metricsQuery" "$ADAPTER_LOG"
mr_apply shop queue "$(spec_queue 1)"
t_ok "fixed: served again" wait_metric_values "$G/namespaces/shop/pods/*/team_queue" "$SHOP1"
# a dropped watch, then a change
kube_control "$KUBE_URL/__fake/metricrules/drop-watches?mode=abort" >/dev/null
mr_apply shop queue "$(spec_queue 10)"
t_ok "after a dropped watch a change still arrives" wait_metric_values "$G/namespaces/shop/pods/*/team_queue" "$SHOP10"
# 410 Gone (compaction), then a change
kube_control "$KUBE_URL/__fake/metricrules/gone" >/dev/null
mr_apply shop queue "$(spec_queue 1)"
t_ok "after a 410 a change still arrives" wait_metric_values "$G/namespaces/shop/pods/*/team_queue" "$SHOP1"
delete shop queue
t_ok "deleted: shop's team_queue gone" wait_metric_values "$G/namespaces/shop/pods/*/team_queue" "HTTP 404"
t_eq "web's team_queue unchanged by shop's delete" "$WEB1" "$(metric_values "$G/namespaces/web/pods/*/team_queue")"
touch "$CMA_TMP/stop-bg"
wait "$BG_PID" 2>/dev/null
n_bg=$(wc -l <"$BG")
t_ok "the background client made requests ($n_bg rounds)" test "$n_bg" -ge 3
t_eq "web's metric: never an error nor another value" "" \
  "$(grep -v '^web=\[front-0 7 front-1 11 \] cfg=\[front-0 4 \]' "$BG" | head -3)"
t_eq "shop's metric: the old values, the new ones or not served, nothing else" "" \
  "$(grep -Ev 'shop=\[(orders-0 3 orders-1 5 |orders-0 30 orders-1 50 |HTTP 404 )\]$' "$BG" | head -3)"

# ---- adversarial queries: only shop's series, as Prometheus answers them restricted by hand ----
# NAME|METRICSQUERY|THE SAME RESTRICTED TO SHOP BY HAND
ADV="$CMA_TMP/adversarial.txt"
cat >"$ADV" <<'EOF'
adv_all|{__name__=~".+"}|{__name__=~".+",namespace="shop"}
adv_or_vector|sum(<<.Series>>{<<.LabelMatchers>>}) or on() vector(1)|sum(queue_depth{namespace="shop"}) or on() vector(1)
adv_label_replace|label_replace(queue_depth{namespace="web"}, "namespace", "shop", "", "")|label_replace(queue_depth{namespace="web",namespace="shop"}, "namespace", "shop", "", "")
adv_absent|absent(queue_depth{namespace="billing"})|absent(queue_depth{namespace="billing",namespace="shop"})
adv_group_left|queue_depth * on(pod) group_left() jobs_waiting|queue_depth{namespace="shop"} * on(pod) group_left() jobs_waiting{namespace="shop"}
adv_subquery|max_over_time(queue_depth{namespace="billing"}[5m:1m])|max_over_time(queue_depth{namespace="billing",namespace="shop"}[5m:1m])
adv_other|sum(queue_depth{namespace="other"}) or sum(jobs_waiting)|sum(queue_depth{namespace="other",namespace="shop"}) or sum(jobs_waiting{namespace="shop"})
adv_comment|sum(queue_depth # {namespace="billing"} hides nothing
)|sum(queue_depth{namespace="shop"})
EOF
# one externalRules entry per line (comments span a line: the two-line entry is joined back)
SPEC=$(python3 - "$ADV" <<'EOF'
import json, sys
text = open(sys.argv[1]).read().replace("hides nothing\n)", "hides nothing\x00)")
rules = []
for line in text.strip().split("\n"):
    name, q, _ = line.replace("\x00", "\n").split("|")
    rules.append({"seriesQuery": "queue_depth",
                  "resources": {"overrides": {"namespace": {"resource": "namespace"}}},
                  "name": {"matches": "^queue_depth$", "as": name}, "metricsQuery": q})
print(json.dumps({"externalRules": rules}))
EOF
)
mr_apply shop adversarial "$SPEC"
t_ok "the adversarial MetricRule is served" wait_discovery adv_comment external.metrics.k8s.io/v1beta1
python3 - "$ADV" <<'EOF' >"$CMA_TMP/adv.lines"
import sys
text = open(sys.argv[1]).read().replace("hides nothing\n)", "hides nothing\x00)")
for line in text.strip().split("\n"):
    name, _, hand = line.replace("\x00", " ").split("|")
    print(name + "\t" + hand)
EOF
while IFS=$'\t' read -r name hand; do
  got=$(adapter_curl "$E/namespaces/shop/$name")
  got_vals=$(jq -r '.items[]?.value' <<<"$got" | LC_ALL=C sort | tr '\n' ' ')
  want_vals=$(curl -s -G "$REAL_PROM_URL/api/v1/query" --data-urlencode "query=$hand" |
    jq -r '.data.result[] | .value[1]' | while read -r v; do quantity "$v"; done | LC_ALL=C sort | tr '\n' ' ')
  t_eq "adversarial $name: the values Prometheus gives for it restricted to shop (HTTP $(last_status))" \
    "$want_vals" "$got_vals"
  t_eq "adversarial $name: no other namespace in the answer" "" \
    "$(jq -r '.items[]?.metricLabels.namespace // empty' <<<"$got" | grep -v '^shop$' | head -1)"
done <"$CMA_TMP/adv.lines"

# ---- what the backend received: every MetricRule query restricted ------------------------------
# The config's own series query is the only one sent without a namespace of the test (its
# per-request queries carry the request's namespace); every other query and series listing came
# from a MetricRule and carries namespace="shop" or namespace="web".
unrestricted=$(jq -r '(.query + .match)[]' "$QLOG" |
  grep -v -F 'jobs_waiting{namespace!="",pod!=""}' | grep -v -E 'namespace="(shop|web)"' | head -3)
t_ok "the backend received queries (proxy log)" test "$(wc -l <"$QLOG")" -ge 10
t_eq "every MetricRule query the backend received carries namespace=\"shop\" or \"web\"" "" "$unrestricted"
t_ok "the enforced adversarial query reached the backend" \
  grep -q -E 'label_replace\(queue_depth\{namespace=\\"(web|shop)\\", ?namespace=\\"(web|shop)\\"\}' "$QLOG"

# ---- a config reload re-merges: the new config rule and the MetricRules both served -----------
python3 - "$CONFIG" <<'PYEOF2'
import sys
path = sys.argv[1]
text = open(path).read()
rule = """- seriesQuery: 'queue_depth{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  name: {matches: "^queue_depth$", as: "cfg_queue"}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
"""
open(path + ".new", "w").write(text.replace("rules:\n", "rules:\n" + rule, 1))
PYEOF2
mv "$CONFIG.new" "$CONFIG"
kill -HUP "$ADAPTER_PID"
t_ok "reloaded: the new config rule is served (billing too)" wait_metric_values "$G/namespaces/billing/pods/*/cfg_queue" "invoices-0 977"
t_eq "reloaded: web's MetricRule still served" "$WEB1" "$(metric_values "$G/namespaces/web/pods/*/team_queue")"
t_eq "reloaded: the config rule still wins over shop's MetricRule" "orders-0 2" \
  "$(metric_values "$G/namespaces/shop/pods/*/jobs_waiting")"

stop_adapter
t_eq "the adapter stops cleanly" 0 "$?"
t_summary
