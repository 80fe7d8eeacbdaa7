#!/usr/bin/env bash
# test_infra.sh: checks the end-to-end infrastructure itself: the synthetic DCGM data as Prometheus (backfilled, plus seed 004's recording rule) and VictoriaMetrics serve it, the fake kube-apiserver through kubectl (selectors, pagination, metadata lists, errors, recorded bytes, keep-alive, request log), the sample configs, and the adapter start/discovery/stop helpers.
# asan: no
# Set CMA_INFRA_NO_ADAPTER=1 to leave out the last part while the adapter binary does not exist yet.
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

# --- synthetic data ---------------------------------------------------------------------------
gen_dcgm || exit 1
EXP="$DCGM_DIR/expected.json"
t_eq "gen_dcgm: OpenMetrics ends with # EOF" "# EOF" "$(tail -n 1 "$DCGM_DIR/dcgm.om")"
t_json "gen_dcgm: every pod of the brief is generated" "$(cat "$DCGM_DIR/pods.json")" \
  '[.[] | .namespace + "/" + .name] | sort | join(" ")' \
  "default/cuda-test-0 ml/bert-0 ml/bert-1 ml/bert-2 ml/other-0 vision/resnet-0 vision/resnet-1"
t_json "gen_dcgm: samples span now-120s .. now+3480s" "$(cat "$EXP")" \
  '[.start - .now, .end - .now, .samples_per_series] | join(" ")' "-120 3480 61"
t_eq "gen_dcgm: a NaN series exists" "NaN" \
  "$(expected_value DCGM_FI_PROF_GR_ENGINE_ACTIVE '.labels.pod == "other-0"')"
t_eq "gen_dcgm: a fractional value exists" "12.5" \
  "$(expected_value DCGM_FI_DEV_GPU_UTIL '.labels.pod == "bert-0"')"

# --- Prometheus ---------------------------------------------------------------------------------
if start_prometheus "$DCGM_DIR/dcgm.om" tests/lib/rules-seed004.yaml; then
  t_pass "start_prometheus"
  r=$(prom_query 'DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod="bert-0"}')
  t_json "prometheus: bert-0 GPU_UTIL at now equals expected.json" "$r" '.data.result[0].value[1]' \
    "$(expected_value DCGM_FI_DEV_GPU_UTIL '.labels.pod == "bert-0"')"
  t_json "prometheus: every GPU_UTIL series is visible" "$(prom_query 'count(DCGM_FI_DEV_GPU_UTIL)')" \
    '.data.result[0].value[1]' "$(jq '[.series[] | select(.name == "DCGM_FI_DEV_GPU_UTIL")] | length' "$EXP")"
  t_json "prometheus: all generated series are visible" \
    "$(prom_query 'count({__name__=~"DCGM_.*|dcgm_.*|kube_pod_labels"})')" '.data.result[0].value[1]' \
    "$(jq '.series | length' "$EXP")"
  t_json "prometheus: the NaN sample reads back as NaN" \
    "$(prom_query 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod="other-0"}')" '.data.result[0].value[1]' "NaN"
  want=$(jq '[.series[] | select(.name == "DCGM_FI_DEV_GPU_UTIL" and .labels.pod == "bert-2") | .value] | add / length' "$EXP")
  t_json "prometheus: avg by (pod) over bert-2's two GPUs" \
    "$(prom_query 'avg(DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod="bert-2"}) by (pod)')" \
    '.data.result[0].value[1]' "$want"
  later=$(($(jq .now "$EXP") + 1800))
  t_json "prometheus: data is still there 30 minutes from now" \
    "$(curl -s -G "$PROM_URL/api/v1/query" --data-urlencode 'query=DCGM_FI_DEV_FB_USED{pod="resnet-1"}' -d "time=$later")" \
    '.data.result[0].value[1]' "$(expected_value DCGM_FI_DEV_FB_USED '.labels.pod == "resnet-1"')"
  t_json "prometheus: /api/v1/series finds the pod-level series" \
    "$(curl -s -G "$PROM_URL/api/v1/series" --data-urlencode 'match[]=DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}' -d "start=$(($(date +%s) - 60))")" \
    '.data | length' "$(jq '[.series[] | select(.name == "DCGM_FI_DEV_GPU_UTIL" and .labels.pod != null)] | length' "$EXP")"
  # The recording rule is evaluated every second; poll for its first sample.
  deadline=$((SECONDS + 60))
  until r=$(prom_query cuda_test_gpu_avg) && [ "$(printf '%s' "$r" | jq '.data.result | length')" = 1 ]; do
    [ "$SECONDS" -ge "$deadline" ] && break
    sleep 0.5
  done
  t_json "prometheus: seed-004 recording rule value and static labels" "$r" \
    '.data.result[0] | "\(.metric.namespace) \(.metric.deployment) \(.value[1])"' \
    "default cuda-test $(jq '.recording_rules.cuda_test_gpu_avg.value' "$EXP")"
else
  t_fail "start_prometheus"
fi

# --- VictoriaMetrics --------------------------------------------------------------------------
if start_victoria_metrics "$DCGM_DIR/dcgm.prom"; then
  t_pass "start_victoria_metrics"
  t_json "victoria-metrics: bert-0 GPU_UTIL equals expected.json" \
    "$(vm_query 'DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod="bert-0"}')" '.data.result[0].value[1]' \
    "$(expected_value DCGM_FI_DEV_GPU_UTIL '.labels.pod == "bert-0"')"
  t_json "victoria-metrics: same label set as Prometheus for that series" \
    "$(vm_query 'DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod="bert-0"}')" '.data.result[0].metric | to_entries | map(.key) | sort | join(",")' \
    "$(jq -r '[.series[] | select(.name == "DCGM_FI_DEV_GPU_UTIL" and .labels.pod == "bert-0") | .labels | keys[]] + ["__name__"] | sort | join(",")' "$EXP")"
  t_json "victoria-metrics: series count (NaN samples are not stored)" \
    "$(curl -s -G "$VM_URL/api/v1/series" --data-urlencode 'match[]={__name__=~"DCGM_.*|dcgm_.*|kube_pod_labels"}')" \
    '.data | length' "$(jq '[.series[] | select(.in_victoria_metrics)] | length' "$EXP")"
else
  t_fail "start_victoria_metrics"
fi

# --- fake kube-apiserver ------------------------------------------------------------------------
K() { kubectl --kubeconfig "$KUBE_KUBECONFIG" get --raw "$1"; }
KC() { curl -s --cacert "$KUBE_CA" -H "Authorization: Bearer fake-admin" "$@"; }
if start_fake_kube "$DCGM_DIR/pods.json"; then
  t_pass "start_fake_kube"
  r=$(K '/api/v1/namespaces/ml/pods?labelSelector=app%3Dbert')
  t_json "fake-kube: kubectl lists ml pods by label" "$r" '[.kind, (.items[].metadata.name)] | join(" ")' \
    "PodList bert-0 bert-1 bert-2"
  t_json "fake-kube: recorded pods were moved onto the GPU nodes of pods.json" "$r" \
    '[.items[].spec.nodeName] | join(" ")' "gpu-node-1 gpu-node-1 gpu-node-2"
  p1=$(K '/api/v1/namespaces/ml/pods?labelSelector=app%3Dbert&limit=2')
  t_json "fake-kube: limit=2 gives 2 items and a continue token" "$p1" \
    '"\([.items[].metadata.name] | join(" ")) \(.metadata.continue | length > 0)"' "bert-0 bert-1 true"
  tok=$(printf '%s' "$p1" | jq -r .metadata.continue)
  p2=$(K "/api/v1/namespaces/ml/pods?labelSelector=app%3Dbert&limit=2&continue=$tok")
  t_json "fake-kube: continue gives the rest and no further token" "$p2" \
    '"\([.items[].metadata.name] | join(" ")) \(.metadata.continue // "none")"' "bert-2 none"
  t_json "fake-kube: cluster-wide selector with in/notin/!key" \
    "$(K '/api/v1/pods?labelSelector=app%20in%20(bert,resnet),tier%20notin%20(batch),!gpu')" \
    '[.items[] | .metadata.namespace + "/" + .metadata.name] | join(" ")' \
    "ml/bert-0 ml/bert-1 ml/bert-2 vision/resnet-0 vision/resnet-1"
  t_json "fake-kube: fieldSelector spec.nodeName and metadata.namespace!=" \
    "$(K '/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-2,metadata.namespace!%3Dml')" \
    '[.items[].metadata.name] | join(" ")' "resnet-1"
  t_json "fake-kube: PartialObjectMetadataList on request" \
    "$(KC -H 'Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1' "$KUBE_URL/api/v1/namespaces/vision/pods")" \
    '[.kind, .items[0].kind, (.items[0] | keys | join(",")), .items[0].metadata.name] | join(" ")' \
    "PartialObjectMetadataList PartialObjectMetadata apiVersion,kind,metadata resnet-0"
  t_json "fake-kube: nodes are the GPU nodes of the data" "$(K /api/v1/nodes)" \
    '[.kind, (.items[].metadata.name)] | join(" ")' "NodeList $(jq -r '.nodes | join(" ")' "$EXP")"
  out=$(kubectl --kubeconfig "$KUBE_KUBECONFIG" get --raw '/api/v1/pods?labelSelector=app%3D%3D%3Dx' 2>&1)
  t_eq "fake-kube: malformed selector gives the recorded 400" \
    "Error from server (BadRequest): unable to parse requirement: found '=', expected: identifier" "$out"
  t_eq "fake-kube: wrong token gets 401" 401 \
    "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$KUBE_CA" -H 'Authorization: Bearer nope' "$KUBE_URL/api/v1/pods")"
  t_json "fake-kube: group listed in /apis but not recorded is a 404 Status" \
    "$(KC "$KUBE_URL/apis/policy/v1")" '"\(.kind) \(.code) \(.reason)"' "Status 404 NotFound"
  t_json "fake-kube: recorded custom.metrics discovery" "$(K /apis/custom.metrics.k8s.io/v1beta1)" \
    '.resources[0].name' "pods/test_metric"
  t_json "fake-kube: missing pod is the recorded-style 404" "$(KC "$KUBE_URL/api/v1/namespaces/ml/pods/bert-9")" \
    '.message' 'pods "bert-9" not found'
  conns=$(curl -s -o /dev/null -o /dev/null -w '%{num_connects} ' --cacert "$KUBE_CA" -H 'Authorization: Bearer fake-admin' \
    "$KUBE_URL/version" "$KUBE_URL/api")
  t_eq "fake-kube: HTTP/1.1 keep-alive (second request reuses the connection)" "1 0" "${conns% }"
  t_ok "fake-kube: large lists are chunked like the real server" \
    bash -c "curl -s -D - -o /dev/null --cacert '$KUBE_CA' -H 'Authorization: Bearer fake-admin' '$KUBE_URL/api/v1/pods' | grep -qi '^Transfer-Encoding: chunked'"
  logged=$(jq -c 'select(.path == "/api/v1/namespaces/ml/pods" and .params.labelSelector == ["app=bert"])' "$KUBE_REQUEST_LOG")
  t_eq "fake-kube: request log has the 3 kubectl LISTs" 3 "$(printf '%s\n' "$logged" | grep -c .)"
  t_json "fake-kube: request log records limit, continue, token and user agent" \
    "$(printf '%s\n' "$logged" | tail -n 1)" \
    '"\(.params.limit[0]) \(.params.continue[0] | length > 0) \(.headers.Authorization) \(.headers["User-Agent"] | startswith("kubectl")) \(.status)"' \
    "2 true Bearer fake-admin true 200"

  # Without extra pods the fake serves the recorded bodies byte for byte.
  saved=("$KUBE_URL" "$KUBE_KUBECONFIG" "$KUBE_REQUEST_LOG" "$KUBE_CA")
  if start_fake_kube; then
    for pair in "/api/v1/pods?labelSelector=app%3Dbert pods-all-bert-running.json" \
      "/api/v1/namespaces/ml/pods?labelSelector=app%3Dbert&limit=2 pods-ml-bert-limit2-page1.json" \
      "/api/v1/pods?labelSelector=app%3Dbert&limit=2&continue=$(jq -r .metadata.continue "$CMA_FIXTURES/pods-all-bert-limit2-page1.json") pods-all-bert-limit2-page2.json"; do
      t_ok "fake-kube (no extra pods): ${pair#* } byte for byte" cmp <(K "${pair%% *}") "$CMA_FIXTURES/${pair#* }"
    done
    t_ok "fake-kube (no extra pods): pods-all-bert-metadata.json byte for byte" cmp \
      <(KC -H 'Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1' "$KUBE_URL/api/v1/pods?labelSelector=app%3Dbert") \
      "$CMA_FIXTURES/pods-all-bert-metadata.json"
  else
    t_fail "start_fake_kube without extra pods"
  fi
  KUBE_URL=${saved[0]} KUBE_KUBECONFIG=${saved[1]} KUBE_REQUEST_LOG=${saved[2]} KUBE_CA=${saved[3]}
else
  t_fail "start_fake_kube"
fi

# --- the adapter helpers ----------------------------------------------------------------------
if [ "${CMA_INFRA_NO_ADAPTER:-0}" != 1 ]; then
  bin=$(cma_adapter_bin)
  for cfg in config/*.yaml; do
    t_ok "adapter --check-config $cfg" "$bin" "--config=$cfg" --check-config
  done
  if [ -n "${PROM_URL:-}" ] && [ -n "${KUBE_KUBECONFIG:-}" ] && start_adapter config/gpu-dcgm.yaml; then
    t_pass "start_adapter (healthz over TLS with the adapter's own certificate)"
    t_ok "wait_discovery DCGM_FI_DEV_GPU_UTIL" wait_discovery DCGM_FI_DEV_GPU_UTIL
    t_json "kubectl with ADAPTER_KUBECONFIG reads discovery" "$(adapter_get /apis/custom.metrics.k8s.io/v1beta1)" \
      '"\(.kind) \(.groupVersion)"' "APIResourceList custom.metrics.k8s.io/v1beta1"
    t_ok "the adapter talked to the fake kube-apiserver with the kubeconfig's token" \
      jq -e -s 'any(.[]; .headers.Authorization == "Bearer fake-admin" and (.headers["User-Agent"] // "" | startswith("kubectl") | not))' "$KUBE_REQUEST_LOG"
    stop_adapter
    t_eq "stop_adapter: SIGTERM gives exit status 0" 0 "$?"
  else
    t_fail "start_adapter"
  fi
fi

t_summary
