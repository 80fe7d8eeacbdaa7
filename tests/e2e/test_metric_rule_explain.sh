#!/usr/bin/env bash
# test_metric_rule_explain.sh: self-service explain through the Kubernetes API (issue 23 part 6):
# `kubectl get --raw '<metrics path>?explain=true'` by a user who may read metrics in one namespace
# only. A real Prometheus holds the same metrics in two namespaces (shop and billing); the fake
# kube-apiserver stands in for kube-apiserver's pods, its SubjectAccessReview (jane may read
# metrics in shop only: "jane@shop", as a RoleBinding of `view` there grants) and the
# extension-apiserver-authentication ConfigMap (the client CA jane's certificate is signed by);
# the pinned kubectl talks to the adapter with jane's client certificate. Checks: jane's report
# for shop names the config rule (file:line:column) and shows the PromQL that was sent, with
# namespace="shop", the backend and the answer (HTTP 200 and the values Prometheus holds for
# shop); the SubjectAccessReview was the request's own (custom.metrics.k8s.io, namespace shop,
# the metric); the same request for billing is refused (kubectl: Forbidden; the body a 403 Status
# naming billing) and answers no report; a metric nothing serves is explained with the rule's
# seriesQuery listed with namespace="shop" added and counted against Prometheus' own count of
# shop's series; no report for shop contains billing's series, pods or values; explain=false
# and the parameter without a feature flag answer the usual JSON; a value that is not a boolean
# is a 400 Status. Then with --enable-metric-rules and MetricRules in both namespaces (shop: one
# serving pods/queue_depth, one with a broken metricsQuery, one serving the external metric
# queue_total; billing: its own, under other names, and the same external metric): jane's report
# names `MetricRule shop/queue (spec.rules[0])` and shows the enforced PromQL, which answers
# shop's values in Prometheus itself; a missing metric's why lists the MetricRule's enforced
# seriesQuery, the broken one as not accepted with the compiler's message and the serving one;
# the external metric's report names `MetricRule shop/ext (spec.externalRules[0])` and answers
# shop's sum as Prometheus computes it; billing's metrics are 403 for jane; no report names
# billing's MetricRules or shows its series.
# asan: yes
# shellcheck disable=SC2119 # stop_adapter is called without its optional timeout
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

PKI="$CMA_TMP/pki"
mkdir -p "$PKI"
# The client CA and jane's certificate (CN=jane, O=team-shop), as kube-apiserver's client CA
# would sign them.
if ! { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj "/CN=client-ca" -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign" -keyout "$PKI/client-ca.key" -out "$PKI/client-ca.crt" &&
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/O=team-shop/CN=jane" -keyout "$PKI/jane.key" -out "$PKI/jane.csr" &&
  printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n' >"$PKI/jane.ext" &&
  openssl x509 -req -in "$PKI/jane.csr" -CA "$PKI/client-ca.crt" -CAkey "$PKI/client-ca.key" \
    -CAcreateserial -days 2 -extfile "$PKI/jane.ext" -out "$PKI/jane.crt"; } >"$PKI/openssl.log" 2>&1; then
  t_fail "openssl: the client CA and jane's certificate" "$(tail -n 20 "$PKI/openssl.log")"
  t_summary
  exit 1
fi

# The data: app_inflight (a gauge) for two pods of shop and one of billing, constant values
# from 2 minutes ago to an hour ahead, so every query at "now" finds them.
OM="$CMA_TMP/two-namespaces.om"
python3 - "$OM" <<'EOF'
import sys, time
now = int(time.time())
series = {"app_inflight": [("shop", "orders-0", 3), ("shop", "orders-1", 5), ("billing", "invoices-0", 977)],
          "app_queue_messages": [("shop", "orders-0", 12), ("shop", "orders-1", 30), ("billing", "invoices-0", 4242)]}
with open(sys.argv[1], "w") as out:
    for name, points in series.items():
        out.write("# TYPE %s gauge\n" % name)
        for ns, pod, value in points:
            for ts in range(now - 120, now + 3600, 60):
                out.write('%s{namespace="%s",pod="%s"} %d %d\n' % (name, ns, pod, value, ts))
    out.write("# EOF\n")
EOF
PODS="$CMA_TMP/pods.json"
cat >"$PODS" <<'EOF'
[{"namespace": "shop", "name": "orders-0", "labels": {"app": "orders"}, "phase": "Running"},
 {"namespace": "shop", "name": "orders-1", "labels": {"app": "orders"}, "phase": "Running"},
 {"namespace": "billing", "name": "invoices-0", "labels": {"app": "invoices"}, "phase": "Running"}]
EOF
CONFIG="$CMA_TMP/config.yaml"
cat >"$CONFIG" <<'EOF'
rules:
- seriesQuery: 'app_inflight{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  name: {matches: "^app_(.*)$", as: "requests_${1}"}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
EOF
rule_line=$(grep -n "^- seriesQuery: 'app_inflight" "$CONFIG" | cut -d: -f1)

if ! start_prometheus "$OM" || ! start_fake_kube "$PODS" --metric-rules deploy/components/metric-rules/crd.yaml; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
jq -n --rawfile ca "$PKI/client-ca.crt" '{"client-ca-file": $ca}' |
  kube_control -X POST --data-binary @- "$KUBE_URL/__fake/auth-configmap" >/dev/null
# sar_allow USERS: the fake's SubjectAccessReview allow list.
sar_allow() { kube_control "$KUBE_URL/__fake/sar-allow?users=$1" >/dev/null; }
# wait_listed: discovery (read anonymously while everyone is allowed) lists the metric; then only
# jane, in shop.
wait_listed() {
  sar_allow "*"
  wait_discovery requests_inflight custom.metrics.k8s.io/v1beta2
  local rc=$?
  sar_allow "jane@shop"
  return "$rc"
}

# jane's kubeconfig: the adapter as the server (as the aggregator would forward her request),
# her client certificate as the credential.
JANE="$CMA_TMP/jane.kubeconfig"
# as_jane PATH: kubectl get --raw PATH as jane; sets J_OUT, J_ERR and J_RC.
as_jane() {
  J_OUT=$(kubectl --kubeconfig "$JANE" get --raw "$1" 2>"$CMA_TMP/jane.err")
  J_RC=$?
  J_ERR=$(cat "$CMA_TMP/jane.err")
}
# jane_curl PATH: the same with curl (status and body); sets C_STATUS and C_BODY.
jane_curl() {
  C_BODY=$(curl -s --max-time 30 --cacert "$ADAPTER_CA" --cert "$PKI/jane.crt" --key "$PKI/jane.key" \
    -o - -w '\n%{http_code}' "$ADAPTER_URL$1")
  C_STATUS=${C_BODY##*$'\n'}
  C_BODY=${C_BODY%$'\n'*}
}
# section NAME TEXT: the lines of section NAME of a report (without the heading).
section() { awk -v h="$1:" '$0 == h {on = 1; next} /^[a-z]/ {on = 0} on' <<<"$2"; }
# no_billing WHAT TEXT: the text names nothing of billing.
no_billing() { t_eq "$1: nothing of billing (namespace, pod, value)" "" "$(grep -Eo 'billing|invoices-0|977' <<<"$2")"; }

# write_jane_kubeconfig: after the adapter started (its URL and CA).
write_jane_kubeconfig() {
  cat >"$JANE" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: adapter
  cluster:
    server: $ADAPTER_URL
    certificate-authority: $ADAPTER_CA
users:
- name: jane
  user:
    client-certificate: $PKI/jane.crt
    client-key: $PKI/jane.key
contexts:
- name: adapter
  context: {cluster: adapter, user: jane}
current-context: adapter
EOF
}

G=/apis/custom.metrics.k8s.io/v1beta2
P_SHOP="$G/namespaces/shop/pods/*/requests_inflight"
P_BILLING="$G/namespaces/billing/pods/*/requests_inflight"

# --- without a feature flag: the parameter is ignored (a prometheus-adapter drop-in) ----------
if ! start_adapter "$CONFIG"; then
  t_fail "start the adapter"
  t_summary
  exit 1
fi
write_jane_kubeconfig
t_ok "discovery lists requests_inflight" wait_listed
as_jane "$P_SHOP?explain=true"
t_eq "no flag: kubectl exit 0" 0 "$J_RC"
t_eq "no flag: explain=true is ignored, the answer is the MetricValueList" "MetricValueList" \
  "$(jq -r .kind <<<"$J_OUT" 2>/dev/null)"
stop_adapter

# --- --enable-explain: the report through the request's own path ---------------------------------
if ! start_adapter "$CONFIG" --enable-explain; then
  t_fail "start the adapter with --enable-explain"
  t_summary
  exit 1
fi
write_jane_kubeconfig
t_ok "discovery lists requests_inflight (--enable-explain)" wait_listed
sar_before=$(kube_control "$KUBE_URL/__fake/sar-log" | jq length)
as_jane "$P_SHOP?explain=true"
REPORT=$J_OUT
t_eq "shop: kubectl exit 0" 0 "$J_RC"
t_eq "shop: the report starts with the request (explain left out)" "explain: GET ${P_SHOP//\*/%2A}" \
  "$(head -n 1 <<<"$REPORT")"
t_ok "shop: scoped to namespace shop" grep -q "^scope: namespace shop " <<<"$REPORT"
t_ok "shop: the rule is $CONFIG:$rule_line (rules[0])" \
  grep -qx "  $CONFIG:$rule_line:[0-9]* (rules\[0\])" <<<"$(section rule "$REPORT")"
promql=$(section query "$REPORT" | sed -n 's/^  promql: //p')
t_eq "shop: the PromQL sent" 'sum(app_inflight{namespace="shop",pod=~"orders-0|orders-1"}) by (pod)' "$promql"
t_ok "shop: the backend and its timing" \
  grep -Eq "^  backend: $PROM_URL, instant query at [0-9TZ:-]+: [0-9]+ ms, answered$" <<<"$(section query "$REPORT")"
answer=$(sed -n '/^answer: HTTP 200$/{n;p}' <<<"$REPORT")
t_eq "shop: the answer is HTTP 200 with Prometheus' values for shop" "orders-0 3
orders-1 5" "$(jq -r '.items[] | "\(.describedObject.name) \(.value)"' <<<"$answer" 2>/dev/null | sort)"
t_eq "oracle: Prometheus holds these values for shop" "orders-0 3
orders-1 5" "$(prom_query 'app_inflight{namespace="shop"}' | jq -r '.data.result[] | "\(.metric.pod) \(.value[1])"' | sort)"
no_billing "shop's report" "$REPORT"
sar=$(kube_control "$KUBE_URL/__fake/sar-log" | jq -c --argjson n "$sar_before" '.[$n:] | map(.spec) | map(select(.user == "jane"))[-1].resourceAttributes')
t_eq "shop: the SubjectAccessReview is the request's own" \
  '{"group":"custom.metrics.k8s.io","name":"*","namespace":"shop","resource":"pods","subresource":"requests_inflight","verb":"get","version":"v1beta2"}' \
  "$(jq -cS . <<<"$sar")"

as_jane "$P_BILLING?explain=true"
t_ok "billing: kubectl fails" test "$J_RC" -ne 0
t_ok "billing: Forbidden" grep -q "Forbidden" <<<"$J_ERR"
jane_curl "$P_BILLING?explain=true"
t_eq "billing: 403" 403 "$C_STATUS"
t_ok "billing: a Status with code 403 naming the namespace" \
  jq -e '.kind == "Status" and .code == 403 and (.message | contains("in the namespace \"billing\""))' <<<"$C_BODY"
t_eq "billing: no report" "" "$(grep -o 'explain: GET' <<<"$C_BODY")"

# A metric nothing serves: why, counted in shop only.
as_jane "$G/namespaces/shop/pods/*/no_such_metric?explain=true"
t_eq "missing: kubectl exit 0 (the report answers 200)" 0 "$J_RC"
t_ok "missing: the explained request's own status inside" grep -q '^answer: HTTP 404$' <<<"$J_OUT"
shop_series=$(curl -s -G "$PROM_URL/api/v1/series" --data-urlencode 'match[]=app_inflight{namespace="shop"}' | jq '.data | length')
t_eq "oracle: Prometheus has 2 series of shop" 2 "$shop_series"
t_ok "missing: the rule's seriesQuery listed with namespace=\"shop\", finding shop's $shop_series series" \
  grep -q "^  rules\[0\] ($CONFIG:$rule_line): seriesQuery app_inflight{namespace!=\"\",namespace=\"shop\",pod!=\"\"} finds $shop_series series, 0 named no_such_metric" <<<"$(section why "$J_OUT")"
no_billing "the missing metric's report" "$J_OUT"

# explain=false, and a value that is not a boolean.
as_jane "$P_SHOP?explain=false"
t_eq "explain=false: the usual MetricValueList" "MetricValueList" "$(jq -r .kind <<<"$J_OUT" 2>/dev/null)"
jane_curl "$P_SHOP?explain=maybe"
t_eq "explain=maybe: 400" 400 "$C_STATUS"
t_ok "explain=maybe: a Status saying what is expected" \
  jq -e '.kind == "Status" and .code == 400 and (.message | contains("true or false"))' <<<"$C_BODY"
stop_adapter

# --- --enable-metric-rules: MetricRules of shop and billing ------------------------------------
# apply_mr NAMESPACE NAME AS METRICS_QUERY: a MetricRule over app_queue_messages (as kubectl apply).
apply_mr() {
  jq -n --arg ns "$1" --arg name "$2" --arg metric "$3" --arg mq "$4" '{
    apiVersion: "metrics.custom-metrics-adapter.dev/v1alpha1", kind: "MetricRule",
    metadata: {name: $name, namespace: $ns},
    spec: {rules: [{seriesQuery: "app_queue_messages{namespace!=\"\",pod!=\"\"}",
      resources: {overrides: {namespace: {resource: "namespace"}, pod: {resource: "pod"}}},
      name: {matches: "^app_queue_messages$", "as": $metric}, metricsQuery: $mq}]}}' |
    kube_control -X POST -H "Content-Type: application/json" --data-binary @- "$KUBE_URL/__fake/metricrules/apply" | jq -r '.event // .message'
}
MQ='sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
t_eq "apply MetricRule shop/queue" ADDED "$(apply_mr shop queue queue_depth "$MQ")"
t_eq "apply MetricRule shop/broken (a metricsQuery missing its closing paren)" ADDED \
  "$(apply_mr shop broken broken_depth 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>')"
t_eq "apply MetricRule billing/billing-secret-rule" ADDED \
  "$(apply_mr billing billing-secret-rule billing_secret_depth "$MQ")"
# apply_ext NAMESPACE NAME: a MetricRule with one external rule, queue_total (sum over the namespace).
apply_ext() {
  jq -n --arg ns "$1" --arg name "$2" '{
    apiVersion: "metrics.custom-metrics-adapter.dev/v1alpha1", kind: "MetricRule",
    metadata: {name: $name, namespace: $ns},
    spec: {externalRules: [{seriesQuery: "app_queue_messages{namespace!=\"\"}",
      resources: {overrides: {namespace: {resource: "namespace"}}},
      name: {matches: "^app_queue_messages$", "as": "queue_total"},
      metricsQuery: "sum(<<.Series>>{<<.LabelMatchers>>})"}]}}' |
    kube_control -X POST -H "Content-Type: application/json" --data-binary @- "$KUBE_URL/__fake/metricrules/apply" | jq -r '.event // .message'
}
t_eq "apply MetricRule shop/ext (an external rule)" ADDED "$(apply_ext shop ext)"
t_eq "apply MetricRule billing/billing-ext (the same external metric)" ADDED "$(apply_ext billing billing-ext)"
if ! start_adapter "$CONFIG" --enable-metric-rules; then
  t_fail "start the adapter with --enable-metric-rules"
  t_summary
  exit 1
fi
write_jane_kubeconfig
P_QUEUE="$G/namespaces/shop/pods/*/queue_depth"
# wait_served PATH: jane's request answers 200 (60 s).
wait_served() {
  local deadline=$((SECONDS + 60))
  until jane_curl "$1" && [ "$C_STATUS" = 200 ]; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.5
  done
}
t_ok "shop's MetricRule serves queue_depth" wait_served "$P_QUEUE"
t_ok "shop's MetricRule serves the external queue_total" \
  wait_served /apis/external.metrics.k8s.io/v1beta1/namespaces/shop/queue_total
as_jane "$P_QUEUE?explain=true"
MR_REPORT=$J_OUT
printf '%s\n' "$MR_REPORT" >"$CMA_TMP/queue_depth.report" # for a failure's post-mortem (CMA_KEEP_TMP=1)
t_eq "MetricRule: kubectl exit 0" 0 "$J_RC"
t_eq "MetricRule: the rule is the MetricRule, by namespace/name and index" \
  '  MetricRule shop/queue (spec.rules[0]), every query enforced with namespace="shop"' \
  "$(section rule "$MR_REPORT" | head -n 1)"
mr_promql=$(section query "$MR_REPORT" | sed -n 's/^  promql: //p')
t_ok "MetricRule: the enforced PromQL ($mr_promql) reads app_queue_messages with namespace=\"shop\"" \
  grep -q 'app_queue_messages{.*namespace="shop"' <<<"$mr_promql"
t_eq "oracle: the enforced PromQL answers shop's values in Prometheus" "orders-0 12
orders-1 30" "$(prom_query "$mr_promql" | jq -r '.data.result[] | "\(.metric.pod) \(.value[1])"' | sort)"
t_eq "MetricRule: the answer has shop's values" "orders-0 12
orders-1 30" "$(sed -n '/^answer: HTTP 200$/{n;p}' <<<"$MR_REPORT" | jq -r '.items[] | "\(.describedObject.name) \(.value)"' | sort)"
t_eq "MetricRule: nothing of billing's MetricRule or series" "" \
  "$(grep -Eo 'billing|invoices-0|4242|977' <<<"$MR_REPORT")"

as_jane "$G/namespaces/shop/pods/*/no_such_metric?explain=true"
MISSING=$J_OUT
printf '%s\n' "$MISSING" >"$CMA_TMP/no_such_metric.report"
t_ok "missing (MetricRules): shop's MetricRule's enforced seriesQuery listed in shop" \
  grep -Eq '^  MetricRule shop/queue spec\.rules\[0\]: seriesQuery app_queue_messages\{.*namespace="shop".*\} finds 2 series, 0 named no_such_metric' <<<"$(section why "$MISSING")"
t_ok "missing (MetricRules): the broken MetricRule, not accepted, with the compiler's message" \
  grep -Eq '^  MetricRule shop/broken: not accepted \(InvalidSpec\): spec\.rules\[0\]\.metricsQuery: ' <<<"$(section why "$MISSING")"
t_ok "missing (MetricRules): the serving MetricRule, accepted and served" \
  grep -q '^  MetricRule shop/queue: accepted and served ' <<<"$(section why "$MISSING")"
t_eq "missing (MetricRules): nothing of billing" "" "$(grep -Eo 'billing|invoices-0|4242|977' <<<"$MISSING")"

# External metrics: the same through external.metrics.k8s.io.
E=/apis/external.metrics.k8s.io/v1beta1
as_jane "$E/namespaces/shop/queue_total?explain=true"
EXT=$J_OUT
printf '%s\n' "$EXT" >"$CMA_TMP/queue_total.report"
t_eq "external: kubectl exit 0" 0 "$J_RC"
t_eq "external: the rule is shop/ext's external rule" \
  '  MetricRule shop/ext (spec.externalRules[0]), every query enforced with namespace="shop"' \
  "$(section rule "$EXT" | head -n 1)"
ext_promql=$(section query "$EXT" | sed -n 's/^  promql: //p')
t_ok "external: the enforced PromQL ($ext_promql) has namespace=\"shop\"" grep -q 'namespace="shop"' <<<"$ext_promql"
t_eq "external: the answer is shop's sum (12 + 30), as Prometheus computes it" \
  "$(prom_query 'sum(app_queue_messages{namespace="shop"})' | jq -r '.data.result[0].value[1]')" \
  "$(sed -n '/^answer: HTTP 200$/{n;p}' <<<"$EXT" | jq -r '.items[0].value' 2>/dev/null)"
t_eq "external: 42 in shop" 42 "$(sed -n '/^answer: HTTP 200$/{n;p}' <<<"$EXT" | jq -r '.items[0].value' 2>/dev/null)"
t_eq "external: nothing of billing" "" "$(grep -Eo 'billing|invoices-0|4242|977' <<<"$EXT")"
jane_curl "$E/namespaces/billing/queue_total?explain=true"
t_eq "external: billing is 403 for jane" 403 "$C_STATUS"
t_ok "external: a Status with code 403 naming billing" \
  jq -e '.kind == "Status" and .code == 403 and (.message | contains("in the namespace \"billing\""))' <<<"$C_BODY"

jane_curl "$G/namespaces/billing/pods/*/billing_secret_depth?explain=true"
t_eq "billing's MetricRule metric: 403 for jane" 403 "$C_STATUS"
t_eq "billing's MetricRule metric: no report" "" "$(grep -o 'explain: GET' <<<"$C_BODY")"
stop_adapter
t_summary
