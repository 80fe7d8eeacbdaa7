#!/usr/bin/env bash
# test_external_metrics.sh: external.metrics.k8s.io v1beta1 end to end over a real Prometheus (synthetic DCGM data plus a my-gpu-app workload) and the fake kube-apiserver: seed 003's External gpu_util (recording rule, matchLabels selector, namespaced rule: namespace matcher present) next to a custom metric in the same adapter; seed 000's two KEDA GPU queries as external metrics requested lower-cased as client-go does (namespaced: false: no namespace matcher); discovery and /apis; every error answer (404, 400 bad selector and gt/lt, 500 matrix); empty result 200 []; NaN samples left out; a scalar result; a namespaced rule that cannot name the namespace loads with a warning (fatal under --strict-config). Clients: curl and the real `kubectl get --raw`.
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

gen_dcgm || exit 1
EXP="$DCGM_DIR/expected.json"

# Seed 003's workload: two my-gpu-app pods in `default` on a third GPU node (70 % and 95 %), with
# kube-state-metrics' kube_pod_labels for them. Their series are added to expected.json and the
# pods to pods.json, so every oracle below (and the fake kube-apiserver) sees them like the rest.
python3 - "$EXP" "$DCGM_DIR/extra.om" "$DCGM_DIR/pods.json" <<'EOF'
import json, sys
exp_path, om_path, pods_path = sys.argv[1:4]
exp = json.load(open(exp_path))
stamps = range(exp["start"], exp["end"] + 1, exp["step"])
node, model = "gpu-node-3", "NVIDIA L4"
workload = [("my-gpu-app-5d8c7b9f4-k2xqp", 0, 70), ("my-gpu-app-5d8c7b9f4-w7mzn", 1, 95)]
series = []
for pod, gpu, util in workload:
    labels = {"gpu": str(gpu), "UUID": "GPU-3c0ffee0-0000-4000-8000-00000000000%d" % gpu,
              "pci_bus_id": "00000000:%02X:00.0" % (0x30 + gpu), "device": "nvidia%d" % gpu,
              "modelName": model, "Hostname": node, "DCGM_FI_DRIVER_VERSION": "535.129.03",
              "container": "my-gpu-container", "namespace": "default", "pod": pod}
    series.append(("DCGM_FI_DEV_GPU_UTIL", labels, util))
    series.append(("DCGM_FI_DEV_MEM_COPY_UTIL", dict(labels), util / 2))
    series.append(("kube_pod_labels", {"namespace": "default", "pod": pod, "label_app": "my-gpu-app"}, 1))
with open(om_path, "w") as out:
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "kube_pod_labels"):
        out.write("# TYPE %s gauge\n" % name)
        for n, labels, value in series:
            if n != name:
                continue
            text = ",".join('%s="%s"' % kv for kv in labels.items())
            out.writelines("%s{%s} %r %d\n" % (n, text, float(value), t) for t in stamps)
    out.write("# EOF\n")
exp["series"] += [{"name": n, "labels": l, "value": v, "in_victoria_metrics": True} for n, l, v in series]
pods = json.load(open(pods_path))
for pod, _, _ in workload:
    pods.append({"namespace": "default", "name": pod, "labels": {"app": "my-gpu-app"},
                 "phase": "Running", "nodeName": node})
exp["pods"] = pods
json.dump(exp, open(exp_path, "w"), indent=1)
json.dump(pods, open(pods_path, "w"), indent=1)
EOF
om_merge "$DCGM_DIR/all.om" "$DCGM_DIR/dcgm.om" "$DCGM_DIR/extra.om"

if ! start_prometheus "$DCGM_DIR/all.om" tests/lib/rules-seed003.yaml ||
  ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
E=/apis/external.metrics.k8s.io/v1beta1

# json_answer NAME STATUS: the last adapter_fetch answered STATUS, Content-Type application/json,
# with a JSON body.
json_answer() {
  t_eq "$1: HTTP status" "$2" "$R_STATUS"
  t_eq "$1: Content-Type" "application/json" "$R_CTYPE"
  t_ok "$1: body is JSON" jq -e . <<<"$R_BODY"
}

# status_answer NAME CODE REASON MESSAGE: the last adapter_fetch is a metav1.Status with CODE,
# REASON and exactly MESSAGE.
status_answer() {
  json_answer "$1" "$2"
  t_json "$1: Status kind/apiVersion/status/code/reason" "$R_BODY" \
    '"\(.kind) \(.apiVersion) \(.status) \(.code) \(.reason)"' "Status v1 Failure $2 $3"
  t_json "$1: message" "$R_BODY" .message "$4"
}

# list_shape NAME JSON: an ExternalMetricValueList whose items have exactly the upstream keys.
list_shape() {
  t_json "$1: kind/apiVersion/metadata" "$2" '"\(.kind) \(.apiVersion) \(.metadata | tojson)"' \
    "ExternalMetricValueList external.metrics.k8s.io/v1beta1 {}"
  t_json "$1: item keys in order (no window, no selector)" "$2" \
    '[.items[] | keys_unsorted | join(",")] | unique | join(";")' "metricName,metricLabels,timestamp,value"
  t_json "$1: values are quantity strings, timestamps RFC 3339 UTC seconds" "$2" \
    'all(.items[]; (.value | type) == "string" and (.timestamp | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")))' \
    true
}

# gpu_util_oracle NS APP: seed 003's gpu_util for a workload from expected.json: the average of
# DCGM_FI_DEV_GPU_UTIL over the GPUs of the pods of NS labelled app=APP, divided by 100, as served.
gpu_util_oracle() {
  jq -r --arg ns "$1" --arg app "$2" "$CMA_JQ_QUANTITY"'
    [.pods[] | select(.namespace == $ns and .labels.app == $app) | .name] as $pods
    | [.series[] | select(.name == "DCGM_FI_DEV_GPU_UTIL" and .labels.namespace == $ns
        and (.labels.pod as $p | $pods | index($p)))] | map(.value)
    | if length == 0 then "none" else (add / length / 100 | quantity) end' "$EXP"
}

# --- seed 003: External gpu_util with matchLabels, next to a custom metric ----------------------
t_eq "oracle: my-gpu-app's GPU utilisation (70 %, 95 %) as a ratio" 825m "$(gpu_util_oracle default my-gpu-app)"
t_eq "oracle: bert's GPU utilisation in ml (12.5, 40, 75, 25 %)" 381m "$(gpu_util_oracle ml bert)"
if V=5 start_adapter config/seed-003.yaml; then
  t_ok "seed 003: discovery lists gpu_util" wait_discovery gpu_util external.metrics.k8s.io/v1beta1
  t_ok "seed 003: discovery lists the custom metric too" wait_discovery DCGM_FI_DEV_GPU_UTIL
  doc=$(adapter_get "$E")
  t_json "seed 003: kubectl discovery: APIResourceList of external.metrics.k8s.io/v1beta1" "$doc" \
    '"\(.kind) \(.apiVersion) \(.groupVersion)"' "APIResourceList v1 external.metrics.k8s.io/v1beta1"
  t_json "seed 003: discovery entry: namespaced ExternalMetricValueList, verbs [get]" "$doc" \
    '.resources | tojson' \
    '[{"name":"gpu_util","singularName":"","namespaced":true,"kind":"ExternalMetricValueList","verbs":["get"]}]'
  adapter_fetch /apis
  t_json "seed 003: /apis lists custom.metrics.k8s.io and external.metrics.k8s.io" "$R_BODY" \
    '[.groups[].name] | join(" ")' "custom.metrics.k8s.io external.metrics.k8s.io"
  adapter_fetch /apis/external.metrics.k8s.io
  t_json "seed 003: APIGroup external.metrics.k8s.io prefers v1beta1" "$R_BODY" \
    '"\(.kind) \(.name) \(.preferredVersion.groupVersion) \([.versions[].version] | join(","))"' \
    "APIGroup external.metrics.k8s.io external.metrics.k8s.io/v1beta1 v1beta1"

  path="$E/namespaces/default/gpu_util?labelSelector=app%3Dmy-gpu-app"
  r=$(adapter_get "$path")
  list_shape "seed 003 (kubectl)" "$r"
  t_json "seed 003 (kubectl): one item" "$r" '.items | length' 1
  t_json "seed 003 (kubectl): metricName" "$r" '.items[0].metricName' gpu_util
  t_json "seed 003 (kubectl): metricLabels are the sample's labels" "$r" '.items[0].metricLabels | tojson' \
    '{"app":"my-gpu-app","namespace":"default"}'
  t_json "seed 003 (kubectl): value 82.5 % / 100 (above the seed's 0.8 target)" "$r" '.items[0].value' 825m
  t_json "seed 003 (kubectl): timestamp is the query's evaluation time (now, within 2 min)" "$r" \
    "(.items[0].timestamp | fromdateiso8601) - $(date +%s) | fabs < 120" true
  adapter_fetch "$path"
  json_answer "seed 003 (curl)" 200
  t_eq "seed 003 (curl): same items as kubectl" "$(jq -c '[.items[] | del(.timestamp)]' <<<"$r")" \
    "$(jq -c '[.items[] | del(.timestamp)]' <<<"$R_BODY")"
  t_ok "seed 003: the PromQL has the selector and the namespace matcher (--v=5)" wait_adapter_log \
    'external metric gpu_util in namespace default: gpu_util\{app="my-gpu-app",namespace="default"\} / 100$' 10
  adapter_fetch "$E/namespaces/default/gpu_util?labelSelector=app+in+%28my-gpu-app%29"
  t_eq "seed 003: the HPA's matchExpressions form (app in (my-gpu-app), aggregator-encoded)" \
    "my-gpu-app 825m" "$(ext_items "$R_BODY" app)"
  adapter_fetch "$E/namespaces/ml/gpu_util?labelSelector=app%3Dbert"
  t_eq "seed 003: another workload in another namespace" "bert $(gpu_util_oracle ml bert)" "$(ext_items "$R_BODY" app)"
  adapter_fetch "$E/namespaces/default/gpu_util?labelSelector=app%3Dbert"
  json_answer "namespaced rule: bert asked from default" 200
  t_json "namespaced rule: the namespace matcher keeps ml's bert out of default: items []" "$R_BODY" \
    '.items | tojson' "[]"
  adapter_fetch "$E/namespaces/default/gpu_util"
  t_eq "seed 003: no labelSelector: every workload of the namespace" \
    "cuda-test $(gpu_util_oracle default cuda-test)|my-gpu-app 825m" "$(ext_items "$R_BODY" app | paste -sd'|')"
  adapter_fetch "$E/namespaces/default/GPU_Util?labelSelector=app%3Dmy-gpu-app"
  t_eq "seed 003: names match case-insensitively (GPU_Util)" "my-gpu-app 825m" "$(ext_items "$R_BODY" app)"
  t_json "seed 003: metricName is the name as discovered" "$R_BODY" '.items[0].metricName' gpu_util

  # Errors.
  adapter_fetch "$E/namespaces/default/gpu_utilisation?labelSelector=app%3Dmy-gpu-app"
  status_answer "unknown metric" 404 NotFound "the server could not find the metric gpu_utilisation for namespace default"
  adapter_fetch "$E/namespaces/default/gpu_util?labelSelector=app%3D%28"
  json_answer "malformed labelSelector" 400
  t_json "malformed labelSelector: BadRequest, says which parameter" "$R_BODY" \
    '"\(.reason) \(.message | startswith("invalid labelSelector \"app=(\": "))"' "BadRequest true"
  adapter_fetch "$E/namespaces/default/gpu_util?labelSelector=a%3E1"
  json_answer "gt in labelSelector (Prometheus cannot express it)" 400
  t_json "gt in labelSelector: BadRequest naming the cause" "$R_BODY" \
    '"\(.reason) \(.message | test("operator not supported by prometheus"))"' "BadRequest true"
  adapter_fetch "$E/namespaces/default/gpu_util?labelSelector=app%3Dnothing-runs-here"
  json_answer "selector matching nothing" 200
  t_ok "selector matching nothing: \"items\":[] (never a made-up 0)" grep -qF '"items":[]' <<<"$R_BODY"
  t_ok "client errors are not logged as warnings" \
    bash -c '! grep -E " W .*(gpu_utilisation|a>1|app=\()" <<<"$1"' _ "$(adapter_log_since_start)"

  # The custom group keeps working in the same adapter.
  r=$(adapter_get "/apis/custom.metrics.k8s.io/v1beta1/namespaces/default/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dmy-gpu-app")
  t_eq "seed 003: the custom metric per my-gpu-app pod (same adapter)" \
    "$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod '.labels.namespace == "default" and (.labels.pod | startswith("my-gpu-app-"))')" \
    "$(item_values "$r")"
  stop_adapter
  t_eq "seed 003: adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "seed 003: start_adapter config/seed-003.yaml"
fi

# --- seed 000: the KEDA triggers' queries as external metrics ----------------------------------
if V=5 start_adapter config/seed-000-external.yaml; then
  t_ok "seed 000: discovery lists DCGM_FI_DEV_MEM_COPY_UTIL" wait_discovery DCGM_FI_DEV_MEM_COPY_UTIL \
    external.metrics.k8s.io/v1beta1
  doc=$(adapter_get "$E")
  t_json "seed 000: discovery lists both triggers' metrics as discovered (upper case)" "$doc" \
    '[.resources[] | "\(.name) \(.namespaced) \(.kind)"] | sort | join(";")' \
    "DCGM_FI_DEV_GPU_UTIL true ExternalMetricValueList;DCGM_FI_DEV_MEM_COPY_UTIL true ExternalMetricValueList"
  adapter_fetch /apis
  t_json "seed 000: /apis lists only external.metrics.k8s.io (no rules, no resourceRules)" "$R_BODY" \
    '[.groups[].name] | join(" ")' "external.metrics.k8s.io"
  for m in DCGM_FI_DEV_GPU_UTIL:70 DCGM_FI_DEV_MEM_COPY_UTIL:80; do
    name=${m%:*}
    lower=$(tr '[:upper:]' '[:lower:]' <<<"$name")
    want=$(expected_agg "$name" avg pod '.labels.namespace != null')
    t_eq "oracle: $name per pod, 9 pods in 3 namespaces" 9 "$(wc -l <<<"$want")"
    # The seed's ScaledObject lives in ml-workloads: the HPA asks from there, name lower-cased.
    r=$(adapter_get "$E/namespaces/ml-workloads/$lower")
    list_shape "seed 000 $name (kubectl, $lower)" "$r"
    t_eq "seed 000 $name (threshold ${m#*:}): one item per pod, avg by (pod) from expected.json" \
      "$want" "$(ext_items "$r")"
    t_json "seed 000 $name: metricName as discovered, metricLabels {pod}" "$r" \
      '[.items[] | "\(.metricName) \(.metricLabels | keys | join(","))"] | unique | join(";")' "$name pod"
    t_ok "seed 000 $name: the trigger's query verbatim, no namespace matcher (--v=5)" wait_adapter_log \
      "external metric $name in namespace ml-workloads: avg\\($name\\{namespace!=\"\",pod!=\"\",\\}\\) by \\(pod\\)\$" 10
    adapter_fetch "$E/namespaces/default/$lower"
    t_eq "seed 000 $name: namespaced: false: the same pods whatever the HPA's namespace" \
      "$want" "$(ext_items "$R_BODY")"
  done
  t_ok "seed 000: no query carried a namespace matcher" \
    bash -c '! grep -E "external metric .*namespace=\"" <<<"$1"' _ "$(adapter_log_since_start)"
  adapter_fetch "$E/namespaces/ml-workloads/dcgm_fi_dev_gpu_util?labelSelector=pod%3Dbert-2"
  t_eq "seed 000: an HPA metric selector narrows the series (bert-2's two GPUs: 75, 25)" "bert-2 50" \
    "$(ext_items "$R_BODY")"
  t_ok "seed 000: ... as a matcher after the trigger's own" wait_adapter_log \
    'avg\(DCGM_FI_DEV_GPU_UTIL\{namespace!="",pod!="",pod="bert-2"\}\) by \(pod\)$' 10
  adapter_fetch "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL"
  t_eq "seed 000: custom.metrics.k8s.io is not served without rules" 404 "$R_STATUS"
  stop_adapter
else
  t_fail "seed 000: start_adapter config/seed-000-external.yaml"
fi

# --- result shapes: raw series (NaN), scalar, matrix -------------------------------------------
CFG="$CMA_TMP/external-shapes.yaml"
cat >"$CFG" <<'EOF'
externalRules:
# A bare selector: every series with all its labels, __name__ included; other-0's is NaN.
- seriesQuery: 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace:
        resource: namespace
  metricsQuery: <<.Series>>{<<.LabelMatchers>>}
- seriesQuery: 'DCGM_FI_DEV_FB_USED{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace:
        resource: namespace
  name:
    matches: ^DCGM_FI_DEV_FB_USED$
    as: fb_used_scalar
  metricsQuery: scalar(sum(<<.Series>>{<<.LabelMatchers>>}))
- seriesQuery: 'DCGM_FI_DEV_FB_FREE{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace:
        resource: namespace
  name:
    matches: ^DCGM_FI_DEV_FB_FREE$
    as: fb_free_range
  metricsQuery: <<.Series>>{<<.LabelMatchers>>}[5m]
EOF
if start_adapter "$CFG"; then
  t_ok "shapes: discovery lists fb_free_range" wait_discovery fb_free_range external.metrics.k8s.io/v1beta1
  GR=DCGM_FI_PROF_GR_ENGINE_ACTIVE
  want=$(jq -r --arg m $GR "$CMA_JQ_QUANTITY"'[.series[] | select(.name == $m and .labels.namespace == "ml"
    and .value != "NaN")][] | "\(.labels.pod) \(.value | quantity)"' "$EXP" | LC_ALL=C sort)
  t_eq "oracle: ml's GR_ENGINE_ACTIVE series without the NaN one" "bert-0 125m|bert-1 400m|bert-2 250m|bert-2 750m" \
    "$(paste -sd'|' <<<"$want")"
  t_before=$(date +%s)
  adapter_fetch "$E/namespaces/ml/dcgm_fi_prof_gr_engine_active"
  t_after=$(date +%s)
  # (Status, Content-Type and the items themselves: the case external-bare-selector-nan-left-out.)
  list_shape "bare selector" "$R_BODY"
  t_json "bare selector: metricLabels are all the sample's labels, __name__ included" "$R_BODY" \
    '.items[] | select(.metricLabels.pod == "bert-0") | .metricLabels | to_entries | sort_by(.key) | from_entries | tojson' \
    "$(jq -c --arg m $GR '.series[] | select(.name == $m and .labels.pod == "bert-0") | .labels + {__name__: $m}
      | to_entries | sort_by(.key) | from_entries' "$EXP")"
  # An instant query's samples carry the evaluation time, which the adapter sets to "now": the
  # item's timestamp lies between the moments before and after the request.
  t_json "bare selector: timestamps are the query's evaluation time" "$R_BODY" \
    "all(.items[]; (.timestamp | fromdateiso8601) as \$t | \$t >= $t_before and \$t <= $t_after)" true
  t_ok "bare selector: the NaN sample is logged as a warning" wait_adapter_log \
    " W external metric $GR in namespace ml: sample value nan .*leaving it out$" 10
  # (Only a NaN series → items []: the case external-only-nan-series.)

  want=$(jq -r "$CMA_JQ_QUANTITY"'[.series[] | select(.name == "DCGM_FI_DEV_FB_USED" and .labels.namespace == "ml")
    | .value] | add | quantity' "$EXP")
  r=$(adapter_get "$E/namespaces/ml/fb_used_scalar")
  list_shape "scalar metricsQuery" "$r"
  t_json "scalar metricsQuery: one item, metricLabels {}, the sum over ml ($want)" "$r" \
    '[.items[] | "\(.metricName) \(.metricLabels | tojson) \(.value)"] | join(";")' "fb_used_scalar {} $want"
  t_ok "scalar metricsQuery: metricLabels is {} on the wire (not null)" grep -qF '"metricLabels":{}' <<<"$r"

  # (A matrix metricsQuery → 500 with the reason: the case external-matrix-result.)

  # Backend failures keep their cause: Prometheus gone → 503, not a blanket 500.
  stop_prometheus
  sleep 6 # answers from before the outage may be served until --metrics-cache-ttl (5s) has passed
  adapter_fetch "$E/namespaces/ml/fb_used_scalar"
  json_answer "Prometheus down" 503
  t_json "Prometheus down: ServiceUnavailable, unable to fetch metrics from prometheus: <cause>" "$R_BODY" \
    '"\(.reason) \(.message | startswith("unable to fetch metrics from prometheus: "))"' "ServiceUnavailable true"
  stop_adapter
  t_eq "shapes: adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "shapes: start_adapter $CFG"
fi

# --- before the first successful discovery: 503 (Prometheus is still down) ---------------------
if start_adapter "$CFG"; then
  adapter_fetch "$E/namespaces/ml/fb_used_scalar"
  json_answer "no catalog yet" 503
  t_json "no catalog yet: ServiceUnavailable, says discovery has not succeeded" "$R_BODY" \
    '"\(.reason) \(.message | startswith("metric discovery has not"))"' "ServiceUnavailable true"
  stop_adapter
else
  t_fail "no catalog yet: start_adapter $CFG"
fi

# --- load-time check: a namespaced external rule that cannot name the namespace loads, as in
# prometheus-adapter, with a warning (its requests fail: tests/e2e/test_rule_corpus.sh); fatal
# under --strict-config ---------------------------------------------------------------------------
BAD="$CMA_TMP/external-no-namespace.yaml"
printf '%s\n' 'externalRules:' '- seriesQuery: gpu_util' '  metricsQuery: <<.Series>>{<<.LabelMatchers>>}' >"$BAD"
out=$("$(cma_adapter_bin)" --config="$BAD" --check-config 2>&1)
rc=$?
t_eq "namespaced rule without a namespace label: loads with a warning" 0 "$rc"
t_ok "... the warning has the rule's position and the fix" grep -qE \
  "W .*external-no-namespace.yaml:2:3: externalRules\\[0\\]: resources.namespaced is true .*namespaced: false" <<<"$out"
"$(cma_adapter_bin)" --config="$BAD" --check-config --strict-config >/dev/null 2>&1
t_eq "... and --strict-config refuses it" 1 "$?"

t_summary
