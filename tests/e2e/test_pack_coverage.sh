#!/usr/bin/env bash
# test_pack_coverage.sh: the rule packs (config/packs) count every GPU and every engine once,
# with the same GPUs on both sides of a ratio, in the situations of issue 22 (generated data,
# tests/lib/gen_pack_coverage.py, whose docstring describes each):
#   - several dcgm-exporter installs in one Prometheus (3.x default collectors with honor_labels
#     true, 4.x trimmed collectors without FB_FREE/DCP scraped with honor_labels false, Alibaba
#     ACK), one namespace with pods on all three: gpu_memory_used_percent divides over the GPUs
#     that report FB_USED and FB_FREE, per pod, per namespace and per node (one node has a card
#     without FB_FREE and DCP beside one with them, and a NaN GR_ENGINE_ACTIVE);
#   - MIG beside whole GPUs: a card in MIG mode counts through its instances, its card-level
#     series (GPU_UTIL, GR_ENGINE_ACTIVE, FB_*) left out of the node's values;
#   - a time-sliced card (one copy of its series per pod): one unit in a namespace and a node;
#   - a rolling vLLM upgrade (0.8 with the old KV-cache name, 0.10 with both, 0.11 with two
#     data-parallel engines), a TGIS-style server printing vllm: and tgi_ names for one queue, a
#     plain TGI server; Triton with a model whose latency counters are off.
# Expected values: tests/lib/pack_coverage_oracle.py, in Python from the generated samples, never
# from PromQL. The series are written as Prometheus stores them after a scrape (target labels,
# exported_* for honor_labels: false, `up`); the same data is backfilled into a real Prometheus
# and imported into VictoriaMetrics, and the
# adapter with --config=config/packs must serve exactly the oracle's values from both (so the
# rendered queries are checked by both engines). The oracle also computes what the packs served
# before issue 22 for a few keys: the test checks those differ, so the data can tell them apart.
# cost: high (two backends, two adapter runs)
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

C=/apis/custom.metrics.k8s.io/v1beta1
E=/apis/external.metrics.k8s.io/v1beta1
# PACKS_DIR: the packs under test (default config/packs; e.g. an older copy, to see it fail).
PACKS_DIR=${PACKS_DIR:-config/packs}
OUT="$CMA_TMP/coverage"
python3 tests/lib/gen_pack_coverage.py "$OUT" || exit 1
ORACLE="$OUT/expected.json"
python3 tests/lib/pack_coverage_oracle.py "$OUT/data.om" >"$ORACLE" || exit 1

o() { jq -r "$1" "$ORACLE"; }
# want GROUP METRIC: "KEY QUANTITY" lines of the oracle, sorted.
want() {
  jq -r --arg g "$1" --arg m "$2" "$CMA_JQ_QUANTITY"'.[$g][$m] // {} | to_entries[] | "\(.key) \(.value | quantity)"' "$ORACLE" | LC_ALL=C sort
}
# naive GROUP METRIC KEY: what the packs served before issue 22 (oracle), as a quantity.
naive() { jq -r --arg g "$1" --arg m "$2" --arg k "$3" "$CMA_JQ_QUANTITY"'.naive[$g][$m][$k] | quantity' "$ORACLE"; }
# expect GROUP METRIC KEY: the oracle's value, as a quantity.
expect() { jq -r --arg g "$1" --arg m "$2" --arg k "$3" "$CMA_JQ_QUANTITY"'.[$g][$m][$k] // "none" | if . == "none" then . else quantity end' "$ORACLE"; }

# --- the data can tell right from wrong ----------------------------------------------------------
t_ok "data: namespace mixed's used memory over every GPU / capacity of those with FB_FREE exceeds 100 % (the issue's case)" \
  jq -e '.naive.namespaces.gpu_memory_used_percent.mixed > 100' "$ORACLE"
t_ok "data: namespace mixed's memory percent, same GPUs on both sides, is below 100 %" \
  jq -e '.namespaces.gpu_memory_used_percent.mixed < 100' "$ORACLE"
for k in "namespaces gpu_memory_used_percent mixed" "nodes gpu_utilization_percent cov-node-mig" \
  "nodes gpu_memory_used_bytes cov-node-full" \
  "external inference_kv_cache_usage_percent chat" "namespaces inference_requests_waiting serve" \
  "pods inference_queue_time_us_per_request serve/triton-0"; do
  # shellcheck disable=SC2086 # three words on purpose
  t_ok "data: the old packs' $k ($(naive $k)) differs from the right one ($(expect $k))" \
    test "$(naive $k)" != "$(expect $k)"
done
t_eq "data: a pod whose GPUs all lack FB_FREE has no memory percent" none "$(expect pods gpu_memory_used_percent mixed/infer-0)"
t_eq "data: a node whose exporter has no FB_FREE has no memory percent" none "$(expect nodes gpu_memory_used_percent cov-node-trim)"
t_eq "data: a model without queue-duration counters has no queue time" none "$(expect external inference_queue_time_us_per_request bert)"
t_eq "data: the 0.10 replica's KV cache is its engine's reading, once" 25 "$(expect pods inference_kv_cache_usage_percent serve/chat-mid-0)"

if ! start_prometheus "$OUT/data.om" || ! start_victoria_metrics "$OUT/data.prom" 'vllm:kv_cache_usage_perc' ||
  ! start_fake_kube "$OUT/pods.json"; then
  t_fail "start Prometheus, VictoriaMetrics and the fake kube-apiserver"
  t_summary
  exit 1
fi
PROM_BACKEND=$PROM_URL

# list_values GROUP METRIC: what the adapter serves for every key the oracle has, "KEY VALUE";
# pods: every pod of each namespace the oracle names (so a pod that must have no value fails if it
# has one); external: every item of namespace serve.
list_values() {
  local group=$1 m=$2 ns n
  case $group in
    pods)
      for ns in $(o ".pods[\"$m\"] | keys[] | split(\"/\")[0]" | sort -u); do
        adapter_get "$C/namespaces/$ns/pods/*/$m" | jq -r --arg ns "$ns" '.items[] | "\($ns)/\(.describedObject.name) \(.value)"'
      done
      ;;
    namespaces)
      for ns in $(o ".namespaces[\"$m\"] | keys[]"); do
        adapter_get "$C/namespaces/$ns/metrics/$m" | jq -r '.items[] | "\(.describedObject.name) \(.value)"'
      done
      ;;
    nodes)
      for n in cov-node-full cov-node-trim cov-node-ack cov-node-mig; do
        adapter_get "$C/nodes/$n/$m" 2>/dev/null | jq -r '.items[] | "\(.describedObject.name) \(.value)"'
      done
      ;;
    external)
      adapter_get "$E/namespaces/serve/$m" | jq -r '.items[] | "\(.metricLabels.model_name // .metricLabels.model // "") \(.value)"'
      ;;
  esac 2>&1 | LC_ALL=C sort
}

check_backend() {
  local label=$1 group m r
  t_ok "$label: discovery lists the GPU metrics" wait_discovery gpu_memory_used_percent
  t_ok "$label: discovery lists the inference metrics" wait_discovery inference_kv_cache_usage_percent
  t_ok "$label: external discovery lists the inference metrics" wait_discovery inference_queue_time_us_per_request external.metrics.k8s.io/v1beta1
  # Node metrics need the nodes resource mapped and its objects read (a first request may answer 503
  # on a loaded machine while that happens): wait for one to answer before comparing.
  t_ok "$label: node metrics answer" wait_status "$C/nodes/cov-node-full/gpu_utilization_percent" 200 120
  for group in pods namespaces nodes external; do
    for m in $(o ".$group | keys[]"); do
      t_eq "$label: $group $m equals the oracle's values" "$(want "$group" "$m")" "$(list_values "$group" "$m")"
    done
  done
  # Selected like an HPA's metric selector.
  r=$(adapter_get "$E/namespaces/serve/inference_kv_cache_usage_percent?labelSelector=model_name%3Dchat")
  t_eq "$label: KV cache of model_name=chat during the rolling upgrade (each engine once)" \
    "chat $(expect external inference_kv_cache_usage_percent chat)" "$(jq -r '.items[] | "\(.metricLabels.model_name) \(.value)"' <<<"$r")"
  r=$(adapter_get "$E/namespaces/serve/inference_queue_time_us_per_request?labelSelector=model%3Dbert")
  t_json "$label: Triton model without latency counters: no item" "$r" '.items | length' 0
  adapter_fetch "$C/namespaces/mixed/pods/infer-0/gpu_memory_used_percent"
  t_eq "$label: pod whose GPUs lack FB_FREE: no memory percent (404)" 404 "$R_STATUS"
  adapter_fetch "$C/nodes/cov-node-trim/gpu_memory_used_percent"
  t_eq "$label: node without FB_FREE: no memory percent (404)" 404 "$R_STATUS"
  adapter_fetch "$C/namespaces/gpu-operator/metrics/gpu_utilization_percent"
  t_eq "$label: the exporters' namespace has no value (404)" 404 "$R_STATUS"
}

for backend in prometheus victoria-metrics; do
  if [ $backend = prometheus ]; then PROM_URL=$PROM_BACKEND; else PROM_URL=$VM_URL; fi
  export PROM_URL
  if start_adapter "$PACKS_DIR"; then
    check_backend "$backend"
    stop_adapter
    t_eq "$backend: adapter exits 0 on SIGTERM" 0 "$?"
  else
    t_fail "$backend: start_adapter $PACKS_DIR"
  fi
done

t_summary
