#!/usr/bin/env bash
# test_packs.sh: the rule packs (config/packs: dcgm.yaml, inference.yaml) against every fixture
# cost: high (about a minute alone: scripts/test.sh starts it early)
# of ../shared/fixtures/exporters (real dcgm-exporter, vLLM, TGI-style and Triton output), scraped
# by a real Prometheus with honor_labels: true and with honor_labels: false (what stands in for
# the cluster: tests/lib/fixture_scrape.py), read through the real kubectl. Expected values come
# from the raw fixture files (tests/lib/exporters_oracle.py), never from PromQL. Checks: every
# pod, namespace, node and model value; the exporter's own pod never gets a value (with
# honor_labels: false Prometheus itself attributes idle GPUs to it: checked that it does); the
# packs load as a directory and as two --config flags; a third-party rule file merges with a pack;
# the kubernetes/examples recording rule and adapter config fixtures.
# Next to the real fixtures: SYNTHETIC exporter output (tests/lib/gen_dcgm.py --exposition, files
# synthetic_*.prom, label sets copied from the real fixtures), because no real sample has data
# for every label variant: one dcgm-exporter per variant (pod/namespace with Hostname, with
# hostname, pod_name/pod_namespace, ACK's PodName/NamespaceName/NodeName; exported_* from the
# honor_labels: false scrape), each with FB_USED and FB_FREE, whole GPUs, MIG instances and idle
# GPUs; and two vLLM pods with non-zero queues served as model_name=qwen-coder.
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh
# shellcheck source=tests/lib/exporters.sh
source tests/lib/exporters.sh

C=/apis/custom.metrics.k8s.io/v1beta1
E=/apis/external.metrics.k8s.io/v1beta1
GPU_METRICS="gpu_utilization_percent gpu_engine_active_percent gpu_mem_copy_utilization_percent gpu_memory_used_bytes gpu_memory_used_percent"

gen_dcgm --exposition --span 0 || exit 1 # only exporters/ is used here
SYN="$DCGM_DIR/exporters"
prepare_fixtures "$SYN" || exit 1
ORACLE="$CMA_TMP/oracle.json"
python3 tests/lib/exporters_oracle.py "$CMA_EXPORTER_FIXTURES" "$FIX_DIR" "$SYN" >"$ORACLE" || exit 1
# SYNTHETIC variants: namespace, node, and the exporter's Hostname when it is not the node (ACK).
SYN_VARIANTS="syn-k8s:syn-node-k8s syn-hostname:syn-node-hostname syn-oldns:syn-node-oldns syn-ack:syn-node-ack"
ACK_EXPORTER_HOST=$(jq -r '.[] | select(.fixture == "synthetic_dcgm-exporter_ack.prom") | .host' "$FIX_DIR/targets.json")
# o JQ: jq -r over the oracle.
o() { jq -r "$1" "$ORACLE"; }
# want GROUP METRIC: "KEY QUANTITY" lines of the oracle, sorted.
want() {
  jq -r --arg g "$1" --arg m "$2" "$CMA_JQ_QUANTITY"'.[$g][$m] // {} | to_entries[] | "\(.key) \(.value | quantity)"' "$ORACLE" | LC_ALL=C sort
}
t_ok "oracle: the MIG fixture's pod averages two GR_ENGINE_ACTIVE readings" \
  test "$(want pods gpu_utilization_percent | grep testest)" = "gi-user1-giops-ai/testest-9sxmd 53834m"
t_ok "oracle: Triton's queue time is the fixture's totals' ratio (11110 us / 161 requests)" \
  test "$(want pods inference_queue_time_us_per_request)" = "llm/triton-0 69006m"
# The per-variant checks below compare the oracle's keys with the adapter's: make sure every
# variant has non-zero values there to compare (two pods, the namespace, the node).
counts=$(jq -r --arg v "$SYN_VARIANTS" --arg ms "$GPU_METRICS" '. as $o | ($v | split(" ")[] | split(":")) as [$ns, $node]
  | ($ms | split(" ")[]) as $m
  | [($o.pods[$m] // {} | to_entries[] | select(.key | startswith($ns + "/")) | .value),
     $o.namespaces[$m][$ns], $o.nodes[$m][$node]]
  | "\($ns) \($m) \(map(select(. != null and . > 0)) | length)"' "$ORACLE")
for v in $SYN_VARIANTS; do
  for m in $GPU_METRICS; do
    t_eq "oracle: variant ${v%%:*}: $m has 2 non-zero pod values, a namespace and a node value" 4 \
      "$(awk -v ns="${v%%:*}" -v m="$m" '$1 == ns && $2 == m { print $3 }' <<<"$counts")"
  done
done
t_ok "oracle: the ACK exporter's Hostname is its pod's name, not the node" test "$ACK_EXPORTER_HOST" != syn-node-ack -a -n "$ACK_EXPORTER_HOST"
t_ok "oracle: the synthetic vLLM pods give model_name=qwen-coder a non-zero queue" \
  test "$(want external inference_requests_waiting | grep '^qwen-coder ')" = "qwen-coder 19"

# Every name a pack serves is a row of docs/gpu.md's tables: | `name` | unit | meaning | ...
for m in $(sed -n 's/^ *name: {as: \([a-z_]*\)}.*/\1/p' config/packs/*.yaml | sort -u); do
  t_ok "docs/gpu.md lists $m with its unit and meaning" grep -Eq "^\| \`$m\` \| [^|]+ \| [^|]+ \|" docs/gpu.md
done
t_eq "the packs serve 9 names (docs/gpu.md's tables)" 9 "$(sed -n 's/^ *name: {as: \([a-z_]*\)}.*/\1/p' config/packs/*.yaml | sort -u | wc -l)"

# The kubernetes/examples PrometheusRule (relabels exported_pod into pod), as a rule file.
python3 - "$CMA_EXPORTER_FIXTURES/prometheus-rule_kubernetes-examples_dcgm-exported-pod-relabel.yaml" \
  "$CMA_TMP/k8s-examples-rules.yaml" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
yaml.safe_dump({"groups": doc["spec"]["groups"]}, open(sys.argv[2], "w"))
EOF

if ! start_fixture_server || ! start_fake_kube "$FIX_DIR/pods.json"; then
  t_fail "start the fixture server and the fake kube-apiserver"
  t_summary
  exit 1
fi
# Both Prometheus scrape Triton's just-started (all zero) counters before they become the
# fixture's, so a rate window covers the fixture's totals.
start_fixture_prometheus true || exit 1
PROM_TRUE=$PROM_URL
start_fixture_prometheus false "$CMA_TMP/k8s-examples-rules.yaml" || exit 1
PROM_FALSE=$PROM_URL
# prom_wait_nonzero EXPR [zero]: until both Prometheus servers answer EXPR with a non-zero value
# (with "zero": with 0) (60 s).
prom_wait_nonzero() {
  local url deadline v
  for url in "$PROM_TRUE" "$PROM_FALSE"; do
    deadline=$((SECONDS + 60))
    while :; do
      v=$(PROM_URL=$url prom_query "$1" | jq -r '.data.result[0].value[1] // 0')
      if [ "${2:-}" = zero ]; then [ "$v" = 0 ] && break; elif [ "$v" != 0 ]; then break; fi
      [ "$SECONDS" -ge "$deadline" ] && break
      sleep 0.5
    done
  done
}
# Both servers must hold a sample of the Triton counters at 0 before they move, or rate() has no
# earlier point (on a loaded machine the first scrape can come after "started").
prom_wait_nonzero 'count(nv_inference_request_success)'
python3 tests/lib/fixture_scrape.py started "$FIX_DIR" || exit 1
prom_wait_nonzero 'sum(nv_inference_request_success)'
# triton_step: Triton's counters back to 0 and to the fixture's totals again, each state seen by
# both Prometheus, so the queue-time rule's 2-minute rate window holds a step however long the
# checks before took (on a loaded machine they can take longer than the window).
triton_step() {
  python3 tests/lib/fixture_scrape.py zero "$FIX_DIR" &&
    prom_wait_nonzero 'sum(nv_inference_request_success)' zero &&
    python3 tests/lib/fixture_scrape.py started "$FIX_DIR" &&
    prom_wait_nonzero 'sum(nv_inference_request_success)'
}

# list_values GROUP METRIC: what the adapter serves for every key the oracle has, "KEY VALUE".
list_values() {
  local group=$1 m=$2 ns
  case $group in
    pods)
      for ns in $(o ".pods[\"$m\"] // {} | keys[] | split(\"/\")[0]" | sort -u); do
        adapter_get "$C/namespaces/$ns/pods/*/$m" | jq -r --arg ns "$ns" '.items[] | "\($ns)/\(.describedObject.name) \(.value)"'
      done
      ;;
    namespaces)
      for ns in $(o ".namespaces[\"$m\"] // {} | keys[]"); do
        adapter_get "$C/namespaces/$ns/metrics/$m" | jq -r '.items[] | "\(.describedObject.name) \(.value)"'
      done
      ;;
    nodes)
      for n in $(o ".nodes[\"$m\"] // {} | keys[]"); do
        adapter_get "$C/nodes/$n/$m" | jq -r '.items[] | "\(.describedObject.name) \(.value)"'
      done
      ;;
    external)
      adapter_get "$E/namespaces/llm/$m" | jq -r '.items[] | "\(.metricLabels.model_name // .metricLabels.model // "") \(.value)"'
      ;;
  esac 2>&1 | LC_ALL=C sort
}

# check_packs LABEL: every value of the oracle, the exporter pods, discovery.
check_packs() {
  local label=$1 group m doc p
  t_ok "$label: discovery lists the GPU metrics" wait_discovery gpu_utilization_percent
  t_ok "$label: discovery lists the inference metrics" wait_discovery inference_requests_waiting
  t_ok "$label: external discovery lists the inference metrics" wait_discovery inference_requests_running external.metrics.k8s.io/v1beta1
  doc=$(adapter_get "$C")
  for group in pods namespaces nodes; do
    for m in $(o ".$group | keys[]"); do
      t_ok "$label: $group/$m is listed" jq -e --arg n "$group/$m" 'any(.resources[]; .name == $n)' <<<"$doc"
    done
  done
  t_json "$label: only pack names, only pods/namespaces/nodes" "$doc" \
    '[.resources[].name | select(test("^(pods|namespaces|nodes)/(gpu_|inference_)") | not)] | length' 0
  for group in pods namespaces nodes external; do
    for m in $(o ".$group | keys[]"); do
      [ "$m" = inference_queue_time_us_per_request ] && triton_step
      t_eq "$label: $group $m equals the fixtures' values" "$(want "$group" "$m")" "$(list_values "$group" "$m")"
    done
  done
  # The exporter's own pods: never a value, by name or by selector, and no namespace value.
  for m in $GPU_METRICS; do
    r=$(adapter_get "$C/namespaces/gpu-operator/pods/*/$m" 2>&1)
    t_eq "$label: no exporter pod in pods/*/$m (gpu-operator)" "" "$(item_values "$r" 2>/dev/null)"
  done
  for p in $(o '.exporter_pods[]'); do
    adapter_fetch "$C/namespaces/${p%%/*}/pods/${p#*/}/gpu_utilization_percent"
    t_eq "$label: exporter pod ${p#*/} has no GPU utilisation (404)" 404 "$R_STATUS"
    adapter_fetch "$C/namespaces/${p%%/*}/pods/${p#*/}/gpu_memory_used_bytes"
    t_eq "$label: exporter pod ${p#*/} has no GPU memory (404)" 404 "$R_STATUS"
  done
  adapter_fetch "$C/namespaces/gpu-operator/metrics/gpu_utilization_percent"
  t_eq "$label: the exporters' namespace has no GPU utilisation (404)" 404 "$R_STATUS"
  # A Host label holding an exporter pod's name is no node of ours.
  adapter_fetch "$C/nodes/nvidia-dcgm-exporter-57pvc/gpu_utilization_percent"
  t_eq "$label: node label first: no value under the exporter's Hostname (404)" 404 "$R_STATUS"
  adapter_fetch "$C/nodes/$ACK_EXPORTER_HOST/gpu_utilization_percent"
  t_eq "$label: NodeName first (ACK): no value under the exporter's Hostname (404)" 404 "$R_STATUS"
  r=$(adapter_get "$C/nodes/syn-node-ack/gpu_memory_used_percent")
  t_eq "$label: ACK node from NodeName alone: gpu_memory_used_percent" \
    "syn-node-ack $(jq -r "$CMA_JQ_QUANTITY"'.nodes.gpu_memory_used_percent["syn-node-ack"] | quantity' "$ORACLE")" "$(item_values "$r")"
  # Per model, selected like an HPA's metric selector (a valid label value).
  triton_step
  r=$(adapter_get "$E/namespaces/llm/inference_queue_time_us_per_request?labelSelector=model%3Dmy_model")
  t_eq "$label: Triton queue time for model=my_model" "$(want external inference_queue_time_us_per_request)" \
    "$(jq -r '.items[] | "\(.metricLabels.model) \(.value)"' <<<"$r")"
  r=$(adapter_get "$E/namespaces/llm/inference_requests_running?labelSelector=model_name%3Dnone")
  t_json "$label: a model without data has no item" "$r" '.items | length' 0
  for m in inference_requests_waiting inference_requests_running inference_kv_cache_usage_percent; do
    r=$(adapter_get "$E/namespaces/llm/$m?labelSelector=model_name%3Dqwen-coder")
    t_eq "$label: $m for model_name=qwen-coder (selected, non-zero)" \
      "$(want external "$m" | grep '^qwen-coder ')" "$(jq -r '.items[] | "\(.metricLabels.model_name) \(.value)"' <<<"$r")"
  done
}

# --- honor_labels: true, the packs as two --config flags ------------------------------------------
export PROM_URL=$PROM_TRUE
t_json "honor_labels true: idle GPUs carry no pod (the exporter wrote pod=\"\")" \
  "$(prom_query 'count(DCGM_FI_DEV_SM_CLOCK{Hostname="dcgm-exporter-lcxpl",pod=""})')" '.data.result[0].value[1]' 5
t_json "honor_labels true: a series without pod labels gets the exporter's pod" \
  "$(prom_query 'count(DCGM_FI_DEV_FB_USED{Hostname="k8s-gpu1",namespace="gpu-operator"})')" '.data.result[0].value[1]' 1
t_json "honor_labels true: the synthetic pod/namespace variants keep the workload's labels" \
  "$(prom_query 'count(DCGM_FI_DEV_GPU_UTIL{namespace=~"syn-k8s|syn-hostname",exported_pod=""})')" '.data.result[0].value[1]' 6
if start_adapter config/packs/dcgm.yaml --config=config/packs/inference.yaml; then
  check_packs "honor_labels true"
  stop_adapter
  t_eq "honor_labels true: adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "honor_labels true: start_adapter with the two pack files"
fi

# --- honor_labels: false, the packs as a directory -------------------------------------------------
export PROM_URL=$PROM_FALSE
t_json "honor_labels false: workload labels became exported_*" \
  "$(prom_query 'count(DCGM_FI_PROF_GR_ENGINE_ACTIVE{exported_pod="testest-9sxmd",pod=~"dcgm-exporter-.*"})')" \
  '.data.result[0].value[1]' 2
t_json "honor_labels false: Prometheus puts the exporter's pod on idle GPUs (the trap)" \
  "$(prom_query 'count(DCGM_FI_DEV_SM_CLOCK{pod="dcgm-exporter-lcxpl",exported_pod=""})')" '.data.result[0].value[1]' 5
t_json "honor_labels false: the synthetic pod/namespace variants' workloads are in exported_*" \
  "$(prom_query 'count(DCGM_FI_DEV_GPU_UTIL{exported_namespace=~"syn-k8s|syn-hostname",namespace="gpu-operator"})')" '.data.result[0].value[1]' 6
t_json "honor_labels false: ACK and pod_name series keep their labels and get the exporter's pod" \
  "$(prom_query 'count({__name__=~"DCGM_FI_DEV_GPU_UTIL|dcgm_fi_dev_gpu_util",namespace="gpu-operator",exported_pod="",NamespaceName="syn-ack"} or {__name__=~"DCGM_FI_DEV_GPU_UTIL|dcgm_fi_dev_gpu_util",namespace="gpu-operator",exported_pod="",pod_namespace="syn-oldns"})')" '.data.result[0].value[1]' 6
t_json "honor_labels false: kubernetes/examples' recording rule falls into it" \
  "$(prom_query 'count(dcgm_fi_dev_gpu_util_relabelled{namespace="gpu-operator",Hostname!~"syn-.*|ack-prometheus-.*",hostname!~"syn-.*"})')" '.data.result[0].value[1]' 2
if start_adapter config/packs; then
  check_packs "honor_labels false"
  r=$(prom_query 'avg by (pod) (dcgm_fi_dev_gpu_util_relabelled{pod="gpu-test"})' | jq -r "$CMA_JQ_QUANTITY"'.data.result[] | "default/\(.metric.pod) \(.value[1] | tonumber | quantity)"')
  t_eq "honor_labels false: the pack agrees with the recording rule where it attributes correctly" \
    "$r" "$(list_values pods gpu_utilization_percent | grep gpu-test)"
  stop_adapter
  t_eq "honor_labels false: adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "honor_labels false: start_adapter config/packs"
fi

# --- third-party rules next to a pack ------------------------------------------------------------
# vllm-project/production-stack's adapter rules (rules.custom of its Helm values) in their own file.
python3 - "$CMA_EXPORTER_FIXTURES/prometheus-adapter_vllm-production-stack.yaml" "$CMA_TMP/prodstack.yaml" <<'EOF'
import sys, yaml
yaml.safe_dump({"rules": yaml.safe_load(open(sys.argv[1]))["rules"]["custom"]}, open(sys.argv[2], "w"))
EOF
out=$("$(cma_adapter_bin)" --config=config/packs/inference.yaml --config="$CMA_TMP/prodstack.yaml" --check-config 2>&1)
t_eq "production-stack rules merge with the inference pack" \
  "config/packs/inference.yaml, $CMA_TMP/prodstack.yaml: OK: 6 rules, 4 externalRules, resourceRules absent" "$out"
export PROM_URL=$PROM_TRUE
if start_adapter config/packs/inference.yaml --config="$CMA_TMP/prodstack.yaml"; then
  t_ok "merged: production-stack's vllm_num_requests_waiting is listed" wait_discovery vllm_num_requests_waiting
  want_llm=$(prom_query 'sum(vllm:num_requests_waiting{namespace="llm"})' | jq -r "$CMA_JQ_QUANTITY"'.data.result[0].value[1] | tonumber | quantity')
  r=$(adapter_get "$C/namespaces/llm/metrics/vllm_num_requests_waiting")
  t_eq "merged: production-stack's rule answers from its file" "llm $want_llm" "$(item_values "$r")"
  r=$(adapter_get "$C/namespaces/llm/metrics/inference_requests_running")
  t_eq "merged: the pack's rule answers from its file" "$(want namespaces inference_requests_running)" "$(item_values "$r")"
  stop_adapter
  t_eq "merged: adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "merged: start_adapter inference.yaml + production-stack rules"
fi

# kubernetes/examples' adapter config does not parse (its second rule is mis-indented): the error
# names the line.
python3 - "$CMA_EXPORTER_FIXTURES/prometheus-adapter_kubernetes-examples_vllm-hpa.yaml" "$CMA_TMP/k8s-examples-adapter.yaml" <<'EOF'
import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("kind") == "ConfigMap":
        open(sys.argv[2], "w").write(doc["data"]["config.yaml"])
EOF
out=$("$(cma_adapter_bin)" --config="$CMA_TMP/k8s-examples-adapter.yaml" --check-config 2>&1)
t_eq "kubernetes/examples adapter config: refused" 1 "$?"
t_ok "kubernetes/examples adapter config: the error is file:line:column at the mis-indented rule" \
  grep -Eq "k8s-examples-adapter.yaml:1[0-9]:[0-9]+: " <<<"$out"

t_summary
