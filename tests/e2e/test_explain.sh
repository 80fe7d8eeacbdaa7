#!/usr/bin/env bash
# test_explain.sh: `custom-metrics-adapter explain PATH` and GET /debug/explain end to end, over a
# real Prometheus holding the synthetic DCGM data and the fake kube-apiserver (it stands in for
# kube-apiserver's discovery, pod LISTs, TokenReview and SubjectAccessReview with answers recorded
# from a real one). The CLI: a working by-selector request names the rule's file:line (found in
# config/gpu-dcgm.yaml here), its PromQL equals what a running adapter sends (its --v=5 log line),
# the objects are the bert pods the API answers for, and the final answer equals the API's
# (timestamps aside: each is its query's); a NaN sample is left out with "NaN"; a metric no rule
# finds, a resource no label maps to and a resource the cluster does not have each say why, and
# exit 3. The debug path: 404 without --enable-explain; with it, 403 Status for an anonymous user
# and the same report (text/plain) for a user the SubjectAccessReview allows.
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

token_of() { sed -n '/^{/{p;q}' "$CMA_FIXTURES/$1" | jq -r .spec.token; }
TOKEN=$(token_of tokenreview-valid.http)
SA_USER=$(sed -n '/^{"kind":"TokenReview"/p' "$CMA_FIXTURES/tokenreview-valid.http" | jq -r .status.user.username)
kube_control() { curl -s --max-time 10 --cacert "$KUBE_CA" -H "Authorization: Bearer fake-admin" "$@"; }
CONFIG=config/gpu-dcgm.yaml
G=/apis/custom.metrics.k8s.io

gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
kube_control "$KUBE_URL/__fake/sar-allow?users=$SA_USER" >/dev/null

# explain PATH: runs the CLI; sets X_OUT (stdout), X_RC and X_ERR (stderr).
explain() {
  # shellcheck disable=SC2086 # CMA_WRAPPER is a command line on purpose
  X_OUT=$(${CMA_WRAPPER:-} "$(cma_adapter_bin)" explain "--config=$CONFIG" "--prometheus-url=$PROM_URL" \
    "--lister-kubeconfig=$KUBE_KUBECONFIG" "$1" 2>"$CMA_TMP/explain.err")
  X_RC=$?
  X_ERR=$(cat "$CMA_TMP/explain.err")
}
# section NAME: the lines of section NAME of X_OUT (without the heading).
section() { awk -v h="$1:" '$0 == h {on = 1; next} /^[a-z]/ {on = 0} on' <<<"$X_OUT"; }

# --- the CLI: a working by-selector request -----------------------------------------------------
P="$G/v1beta2/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert"
explain "$P"
t_eq "by-selector: exit 0" 0 "$X_RC"
t_eq "by-selector: the report starts with the request" "explain: GET $P" "$(head -n 1 <<<"$X_OUT")"
line=$(grep -n "^- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL" "$CONFIG" | cut -d: -f1)
t_ok "oracle: the DCGM_FI_DEV_GPU_UTIL rule is on a line of $CONFIG" test -n "$line"
t_ok "by-selector: the rule is $CONFIG:$line (rules[0])" \
  grep -qx "  $CONFIG:$line:[0-9]* (rules\[0\])" <<<"$(section rule)"
t_ok "by-selector: the catalog entry" \
  grep -qx "  pods (namespaced) metric DCGM_FI_DEV_GPU_UTIL <- series DCGM_FI_DEV_GPU_UTIL" <<<"$(section "catalog entry")"
want_bert=$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod '.labels.namespace == "ml" and .labels.pod != null and (.labels.pod | startswith("bert-"))')
want_objects=$(cut -d' ' -f1 <<<"$want_bert" | paste -sd, | sed 's/,/, /g')
t_eq "by-selector: the objects are the bert pods" "  3 objects: $want_objects" "$(section objects | grep ' objects: ')"
t_ok "by-selector: resolved by a LIST with the selector" grep -q 'from a LIST of pods (labelSelector "app=bert")' <<<"$X_OUT"
promql=$(section query | sed -n 's/^  promql: //p')
t_ok "by-selector: a PromQL line" test -n "$promql"
t_ok "by-selector: the backend's URL and the timing" \
  grep -Eq "^  backend: $PROM_URL, instant query at [0-9TZ:-]+: [0-9]+ ms, answered$" <<<"$(section query)"
t_eq "by-selector: the raw samples, one per bert pod" 3 "$(section "backend answer (every series, before the request's filter)" | grep -c '^  {pod="bert-')"
answer=$(sed -n '/^answer: HTTP 200$/{n;p}' <<<"$X_OUT")
t_ok "by-selector: the final answer is JSON" jq -e . <<<"$answer"

# The same request to a running adapter: its PromQL (--v=5 log) and its answer.
if ! V=5 start_adapter "$CONFIG" --insecure-disable-auth; then
  t_fail "start the adapter"
  t_summary
  exit 1
fi
t_ok "discovery lists DCGM_FI_DEV_GPU_UTIL" wait_discovery DCGM_FI_DEV_GPU_UTIL
api=$(curl -s --max-time 20 --cacert "$ADAPTER_CA" "$ADAPTER_URL$P")
sent=$(sed -n 's/.*custom metric pods\/DCGM_FI_DEV_GPU_UTIL: //p' "$ADAPTER_LOG" | tail -n 1)
t_eq "by-selector: the PromQL is what the adapter sends (its --v=5 log)" "$sent" "$promql"
no_ts='del(.items[].timestamp)'
t_eq "by-selector: the final answer is the API's (timestamps aside)" \
  "$(jq -cS "$no_ts" <<<"$api")" "$(jq -cS "$no_ts" <<<"$answer")"
t_eq "by-selector: and it has the oracle's values" "$want_bert" \
  "$(jq -r '.items[] | "\(.describedObject.name) \(.value)"' <<<"$answer" | sort)"
adapter_curl "/debug/explain?path=%2Fmetrics" >/dev/null
t_eq "without --enable-explain: /debug/explain is 404" 404 "$(last_status)"
stop_adapter

# --- the CLI: NaN, and why nothing matches ------------------------------------------------------
explain "$G/v1beta1/namespaces/ml/pods/*/DCGM_FI_PROF_GR_ENGINE_ACTIVE?labelSelector=tier%3Dinference"
t_eq "NaN: exit 0 (the other pods answer)" 0 "$X_RC"
t_ok "NaN: other-0's sample is left out: NaN" \
  grep -Eq '^  \{pod="other-0"\} NaN @ [0-9TZ:-]+: NaN is not a value: left out$' <<<"$(section "left out of the answer")"
t_eq "NaN: and not in the answer" "" "$(sed -n '/^answer:/,$p' <<<"$X_OUT" | grep -o other-0)"

explain "$G/v1beta1/namespaces/ml/pods/*/no_such_metric"
t_eq "no rule finds it: exit 3" 3 "$X_RC"
t_ok "no rule finds it: says so" grep -qx "  no rule's seriesQuery finds a series that becomes metric no_such_metric (within --metrics-max-age)" <<<"$(section why)"
t_eq "no rule finds it: each rule's seriesQuery listed with its count" 4 "$(section why | grep -c "seriesQuery DCGM_.* finds [1-9][0-9]* series, 0 named no_such_metric")"
t_ok "no rule finds it: the answer is the API's 404" grep -q '^answer: HTTP 404$' <<<"$X_OUT"

explain "$G/v1beta1/namespaces/ml/deployments.apps/*/DCGM_FI_DEV_GPU_UTIL"
t_eq "no label maps: exit 3" 3 "$X_RC"
t_ok "no label maps: the series and its labels" \
  grep -q "^  series DCGM_FI_DEV_GPU_UTIL becomes DCGM_FI_DEV_GPU_UTIL, but the resource label does not map: none of its labels maps to deployments.apps .*pod -> pods" <<<"$(section why)"
t_ok "no label maps: the conclusion" grep -qx "  series become metric DCGM_FI_DEV_GPU_UTIL, but none has a label that maps to deployments.apps" <<<"$(section why)"

explain "$G/v1beta1/namespaces/ml/widgets/*/DCGM_FI_DEV_GPU_UTIL"
t_eq "unknown resource: exit 3" 3 "$X_RC"
t_ok "unknown resource: says so" grep -q "^  the resource widgets is unknown to the cluster" <<<"$(section why)"

explain "apis/no-leading-slash"
t_eq "not a path: usage error, exit 2" 2 "$X_RC"
t_ok "not a path: says what is expected" grep -q "explain needs the request path as its last argument" <<<"$X_ERR"

# --- the debug path: on, authorized --------------------------------------------------------------
if ! start_adapter "$CONFIG" --enable-explain; then
  t_fail "start the adapter with --enable-explain"
  t_summary
  exit 1
fi
# wait_listed: until discovery lists the metric for the token's user (60 s).
wait_listed() {
  local deadline=$((SECONDS + 60))
  until adapter_curl "$G/v1beta1" -H "Authorization: Bearer $TOKEN" |
    jq -e 'any(.resources[]?; .name == "pods/DCGM_FI_DEV_GPU_UTIL")' >/dev/null; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.5
  done
}
t_ok "discovery lists DCGM_FI_DEV_GPU_UTIL (--enable-explain)" wait_listed
body=$(adapter_curl "/debug/explain" -G --data-urlencode "path=$P")
t_eq "anonymous /debug/explain: 403" 403 "$(last_status)"
t_ok "anonymous /debug/explain: Status JSON naming the path" \
  jq -e '.kind == "Status" and .code == 403 and (.message | contains("cannot get path \"/debug/explain\""))' <<<"$body"
body=$(adapter_curl "/debug/explain" -G --data-urlencode "path=$P" -H "Authorization: Bearer $TOKEN")
t_eq "authorized /debug/explain: 200" 200 "$(last_status)"
X_OUT=$body
t_ok "debug path: the same rule" grep -qx "  $CONFIG:$line:[0-9]* (rules\[0\])" <<<"$(section rule)"
t_eq "debug path: the same PromQL" "$promql" "$(section query | sed -n 's/^  promql: //p')"
t_eq "debug path: the same objects" "  3 objects: $want_objects" "$(section objects | grep ' objects: ')"
t_eq "debug path: the same answer (timestamps aside)" "$(jq -cS "$no_ts" <<<"$answer")" \
  "$(sed -n '/^answer: HTTP 200$/{n;p}' <<<"$body" | jq -cS "$no_ts")"
sar_for_explain() {
  kube_control "$KUBE_URL/__fake/sar-log" |
    jq -e 'any(.[]; .spec.nonResourceAttributes.path == "/debug/explain" and .spec.nonResourceAttributes.verb == "get")' >/dev/null
}
t_ok "debug path: the SubjectAccessReview asked for the non-resource path /debug/explain" sar_for_explain
stop_adapter
t_summary
