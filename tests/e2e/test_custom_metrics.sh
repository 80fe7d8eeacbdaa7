#!/usr/bin/env bash
# test_custom_metrics.sh: custom.metrics.k8s.io end to end with config/gpu-dcgm.yaml over a real Prometheus holding the synthetic DCGM data and the fake kube-apiserver (recorded fixtures): discovery in both versions, by-selector (plain and aggregator-encoded, and the LIST it makes), metricLabelSelector, by-name, root-scoped and namespace metrics, NaN logging, verbose health, version and index endpoints; clients are curl and the real `kubectl get --raw`. One-request checks of the same setup (every error answer, empty and NaN results, nodes/*, openapi, methods, content negotiation) are cases in tests/cases/ (run by tests/e2e/test_cases.sh).
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json" ||
  ! start_adapter config/gpu-dcgm.yaml; then
  t_fail "start Prometheus, fake kube-apiserver and adapter"
  t_summary
  exit 1
fi
t_ok "discovery lists DCGM_FI_DEV_GPU_UTIL" wait_discovery DCGM_FI_DEV_GPU_UTIL

G=/apis/custom.metrics.k8s.io
ML_BERT='.labels.namespace == "ml" and .labels.pod != null and (.labels.pod | startswith("bert-"))'

# json_answer NAME STATUS: the last adapter_fetch answered STATUS with Content-Type application/json
# and a JSON body.
json_answer() {
  t_eq "$1: HTTP status" "$2" "$R_STATUS"
  t_eq "$1: Content-Type" "application/json" "$R_CTYPE"
  t_ok "$1: body is JSON" jq -e . <<<"$R_BODY"
}

# --- discovery ---------------------------------------------------------------------------------
want_names=$(for r in namespaces nodes pods; do
  for m in DCGM_FI_DEV_FB_USED DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_MEM_COPY_UTIL DCGM_FI_PROF_GR_ENGINE_ACTIVE; do
    echo "$r/$m"
  done
done | sort | paste -sd' ')
for v in v1beta1 v1beta2; do
  doc=$(adapter_get "$G/$v")
  t_json "kubectl discovery $v: APIResourceList of custom.metrics.k8s.io/$v" "$doc" \
    '"\(.kind) \(.apiVersion) \(.groupVersion)"' "APIResourceList v1 custom.metrics.k8s.io/$v"
  t_json "kubectl discovery $v: every rule x resource, nothing else" "$doc" \
    '[.resources[].name] | sort | join(" ")' "$want_names"
  t_json "kubectl discovery $v: one namespaced flag per resource prefix (pods true; nodes, namespaces false)" \
    "$doc" '[.resources[] | {p: (.name | split("/")[0]), n: .namespaced}] | group_by(.p)
      | map("\(.[0].p)=\(map(.n) | unique | map(tostring) | join(","))") | join(" ")' \
    "namespaces=false nodes=false pods=true"
  t_json "kubectl discovery $v: entries are MetricValueList, verbs [get], singularName \"\"" "$doc" \
    '[.resources[] | "\(.kind) \(.verbs | join(",")) \(.singularName == "")"] | unique | join(";")' \
    "MetricValueList get true"
done

# --- by selector ---------------------------------------------------------------------------------
want_bert=$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod "$ML_BERT")
t_eq "oracle: bert pods' average GPU util (expected.json) is 12500m/40/50" \
  "bert-0 12500m|bert-1 40|bert-2 50" "$(paste -sd'|' <<<"$want_bert")"

r=$(adapter_get "$G/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert")
t_eq "kubectl v1beta1 by-selector app=bert: exactly bert-0..2 with the average over each pod's GPUs" \
  "$want_bert" "$(item_values "$r")"
t_json "v1beta1 list: kind, apiVersion, metadata {}" "$r" \
  '"\(.kind) \(.apiVersion) \(.metadata | tojson)"' "MetricValueList custom.metrics.k8s.io/v1beta1 {}"
t_json "v1beta1 item: fields in Go order" "$r" '.items[0] | keys_unsorted | join(",")' \
  "describedObject,metricName,timestamp,value,selector"
t_json "v1beta1 items: describedObject Pod/v1 in ml, metricName, selector null" "$r" \
  '[.items[] | "\(.describedObject.kind) \(.describedObject.apiVersion) \(.describedObject.namespace) \(.metricName) \(.selector)"] | unique | join(";")' \
  "Pod v1 ml DCGM_FI_DEV_GPU_UTIL null"
t_json "v1beta1 items: RFC 3339 timestamps in seconds, UTC" "$r" \
  '[.items[].timestamp | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")] | all' true
t_json "v1beta1 items: values are strings, never numbers" "$r" '[.items[].value | type] | unique | join(",")' string

r=$(adapter_get "$G/v1beta2/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert")
t_eq "kubectl v1beta2 by-selector app=bert: same values" "$want_bert" "$(item_values "$r")"
t_json "v1beta2 list: kind, apiVersion" "$r" '"\(.kind) \(.apiVersion)"' \
  "MetricValueList custom.metrics.k8s.io/v1beta2"
t_json "v1beta2 item: fields in Go order (metric replaces metricName and selector)" "$r" \
  '.items[0] | keys_unsorted | join(",")' "describedObject,metric,timestamp,value"
t_json "v1beta2 items: metric {name, selector: null}" "$r" '[.items[].metric | tojson] | unique | join(";")' \
  '{"name":"DCGM_FI_DEV_GPU_UTIL","selector":null}'

# As kube-aggregator forwards it: '*' percent-encoded in the path, '+' for spaces in the query.
# (Its answer is the case tests/cases/custom-by-selector-aggregator-encoded; here: the LIST it makes.)
adapter_fetch "$G/v1beta2/namespaces/ml/pods/%2A/DCGM_FI_DEV_GPU_UTIL?labelSelector=app+in+%28bert%29"
t_ok "the adapter LISTed ml pods with the decoded selector 'app in (bert)'" \
  jq -e -s 'any(.[]; .path == "/api/v1/namespaces/ml/pods" and (.params.labelSelector // [] | .[0] | gsub(" "; "") == "appin(bert)"))' \
  "$KUBE_REQUEST_LOG"

# metricLabelSelector narrows the series (the HPA's metric.selector) and fills `selector`.
want_gpu0=$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod "$ML_BERT and .labels.gpu == \"0\"")
t_eq "oracle: gpu=0 changes bert-2's value" "bert-0 12500m|bert-2 75" "$(paste -sd'|' <<<"$want_gpu0")"
r=$(adapter_get "$G/v1beta2/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert&metricLabelSelector=gpu%3D0")
t_json "metricLabelSelector gpu=0: v1beta2 metric.selector.matchLabels" "$r" \
  '[.items[].metric.selector | tojson] | unique | join(";")' '{"matchLabels":{"gpu":"0"}}'

# --- by name -------------------------------------------------------------------------------------
r=$(adapter_get "$G/v1beta1/namespaces/ml/pods/bert-2/DCGM_FI_DEV_GPU_UTIL")
t_json "kubectl by-name bert-2: a list with exactly one item" "$r" '.items | length' 1
t_eq "kubectl by-name bert-2: the average over its two GPUs" \
  "$(grep '^bert-2 ' <<<"$want_bert")" "$(item_values "$r")"
t_json "by-name: describedObject names the pod" "$r" \
  '.items[0].describedObject | "\(.kind) \(.namespace) \(.name)"' "Pod ml bert-2"

out=$(adapter_get "$G/v1beta1/namespaces/ml/pods/bert-9/DCGM_FI_DEV_GPU_UTIL" 2>&1)
t_eq "kubectl by-name for a pod without data: NotFound" \
  "Error from server (NotFound): the server could not find the metric DCGM_FI_DEV_GPU_UTIL for pods bert-9" "$out"

# --- errors: each request and its Status answer is a case in tests/cases (custom-*, README) -----

# --- NaN -----------------------------------------------------------------------------------------
adapter_fetch "$G/v1beta1/namespaces/ml/pods/*/DCGM_FI_PROF_GR_ENGINE_ACTIVE?labelSelector=tier%3Dinference"
t_ok "NaN: the adapter logged the left-out sample" wait_adapter_log 'DCGM_FI_PROF_GR_ENGINE_ACTIVE.*other-0' 10

# --- root-scoped and namespace metrics -------------------------------------------------------------
r=$(adapter_get "$G/v1beta1/nodes/gpu-node-1/DCGM_FI_DEV_GPU_UTIL")
t_eq "kubectl nodes/gpu-node-1: average over all the node's GPUs" \
  "$(expected_agg DCGM_FI_DEV_GPU_UTIL avg Hostname '.labels.Hostname == "gpu-node-1"')" "$(item_values "$r")"
t_json "nodes/gpu-node-1: describedObject Node v1 without a namespace" "$r" \
  '.items[0].describedObject | "\(.kind) \(.apiVersion) \(has("namespace"))"' "Node v1 false"

r=$(adapter_get "$G/v1beta1/namespaces/ml/metrics/DCGM_FI_DEV_GPU_UTIL")
t_eq "kubectl namespaces/ml/metrics/DCGM_FI_DEV_GPU_UTIL: the namespace's average" \
  "$(expected_agg DCGM_FI_DEV_GPU_UTIL avg namespace '.labels.namespace == "ml"')" "$(item_values "$r")"
t_json "namespace metric: describedObject Namespace ml" "$r" \
  '.items[0].describedObject | "\(.kind) \(.name) \(has("namespace"))"' "Namespace ml false"

# --- health, version, openapi, index ---------------------------------------------------------------
# (The plain /healthz, /livez, /readyz answers are the cases tests/cases/health-*.)
for p in healthz livez readyz; do
  adapter_fetch "/$p?verbose"
  t_ok "/$p?verbose: lists [+]ping ok and '$p check passed'" \
    bash -c 'grep -qx "\[+\]ping ok" <<<"$1" && grep -qx "$2 check passed" <<<"$1"' _ "$R_BODY" "$p"
done
t_ok "/readyz?verbose: lists the discovery check" grep -q '^\[+\]metrics-discovery ok$' <<<"$R_BODY"
t_eq "kubectl /readyz" ok "$(adapter_get /readyz)"

adapter_fetch /version
json_answer "/version" 200
t_json "/version: version.Info fields" "$R_BODY" \
  '[has("major"), has("minor"), (.gitVersion | startswith("v")), has("platform")] | all' true
# (/openapi/v2, /openapi/v3, an unrouted path and /apis/custom.metrics.k8s.io are cases.)

r=$(adapter_get /apis)
t_json "kubectl /apis: APIGroupList with custom.metrics.k8s.io v1beta1 and v1beta2" "$r" \
  '"\(.kind) \([.groups[] | select(.name == "custom.metrics.k8s.io") | .versions[].version] | sort | join(","))"' \
  "APIGroupList v1beta1,v1beta2"

# --- methods and content negotiation: cases (custom-post-405, discovery-delete-405,
# custom-accept-*, discovery-accept-*) ---------------------------------------------------------

t_ok "the adapter is still running" kill -0 "$ADAPTER_PID"
stop_adapter
t_eq "SIGTERM: exit status 0" 0 "$?"
t_summary
