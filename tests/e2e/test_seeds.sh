#!/usr/bin/env bash
# test_seeds.sh: the users' scenarios against one real Prometheus: seed 001's five adapter rules verbatim (config/seed-001.yaml, ACK-labelled DCGM data: discovery and per-pod values of the SM_UTIL average and the memory-ratio rule), seed 004's recording-rule metric through the Helm chart's generic rule (config/seed-004.yaml: the Deployment object metric and the namespace metric), and the Helm chart's six default rules (config/prometheus-adapter-default.yaml) on container_* and generic series.
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

gen_dcgm --ack-labels || exit 1
EXP="$DCGM_DIR/expected.json"

# Extra series for the Helm default rules, written next to the DCGM data into one OpenMetrics file:
# cAdvisor-style container_* series (a gauge and a CPU counter) and an application counter with
# namespace/pod labels. Counters grow linearly and are sampled every 15 s from 15 minutes back, so
# rate(...[5m]) at any moment of the run is the slope exactly (the 5m window is fully covered and
# extrapolation adds nothing); slopes sit half a milli-unit off a boundary so truncation is stable.
python3 - "$EXP" "$DCGM_DIR/extra.om" <<'EOF'
import json, sys
now = json.load(open(sys.argv[1]))["now"]
stamps = range(now - 900, now + 3480 + 1, 15)
memory = [("ml", "bert-0", "server", 1073741824), ("ml", "bert-1", "server", 805306368),
          ("ml", "bert-2", "server", 536870912), ("ml", "bert-2", "log-shipper", 104857600),
          ("ml", "bert-2", "POD", 999)]  # the pause container: the rules drop container="POD"
cpu = [("ml", "bert-0", "server", 0.2505), ("ml", "bert-1", "server", 0.5005),
       ("ml", "bert-2", "server", 1.2345), ("ml", "bert-2", "log-shipper", 0.011)]
requests = [("ml", "bert-0", 10.0005), ("ml", "bert-1", 2.5005), ("ml", "bert-2", 0.0415)]
with open(sys.argv[2], "w") as out:
    out.write("# TYPE container_memory_working_set_bytes gauge\n")
    for ns, pod, ctr, value in memory:
        for t in stamps:
            out.write('container_memory_working_set_bytes{namespace="%s",pod="%s",container="%s"} %d %d\n'
                      % (ns, pod, ctr, value, t))
    out.write("# TYPE container_cpu_usage_seconds counter\n")
    for ns, pod, ctr, slope in cpu:
        for i, t in enumerate(stamps):
            out.write('container_cpu_usage_seconds_total{namespace="%s",pod="%s",container="%s"} %r %d\n'
                      % (ns, pod, ctr, 5000 + slope * 15 * i, t))
    out.write("# TYPE http_requests counter\n")
    for ns, pod, slope in requests:
        for i, t in enumerate(stamps):
            out.write('http_requests_total{namespace="%s",pod="%s"} %r %d\n' % (ns, pod, 100000 + slope * 15 * i, t))
EOF
{ grep -v '^# EOF$' "$DCGM_DIR/dcgm.om"; cat "$DCGM_DIR/extra.om"; echo "# EOF"; } >"$DCGM_DIR/all.om"

if ! start_prometheus "$DCGM_DIR/all.om" tests/lib/rules-seed004.yaml || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
G=/apis/custom.metrics.k8s.io

# resources_of DOC METRIC: the resource prefixes under which DOC lists METRIC, sorted.
resources_of() {
  printf '%s' "$1" | jq -r --arg m "$2" \
    '[.resources[] | select(.name | endswith("/" + $m)) | .name | split("/")[0]] | sort | join(" ")'
}

# --- seed 001 (Alibaba Cloud ACK) ----------------------------------------------------------------
if start_adapter config/seed-001.yaml; then
  t_ok "seed 001: discovery lists the ratio metric" wait_discovery DCGM_CUSTOM_PROCESS_GPU_MEM_USED_RATIO
  doc=$(adapter_get "$G/v1beta1")
  t_eq "seed 001: DCGM_FI_DEV_GPU_UTIL (rule 1: NodeName only)" "nodes" "$(resources_of "$doc" DCGM_FI_DEV_GPU_UTIL)"
  t_eq "seed 001: DCGM_CUSTOM_PROCESS_SM_UTIL (rule 2)" "namespaces nodes pods" \
    "$(resources_of "$doc" DCGM_CUSTOM_PROCESS_SM_UTIL)"
  t_eq "seed 001: DCGM_FI_DEV_FB_USED (rule 3)" "nodes" "$(resources_of "$doc" DCGM_FI_DEV_FB_USED)"
  t_eq "seed 001: DCGM_CUSTOM_PROCESS_MEM_USED (rule 4)" "namespaces nodes pods" \
    "$(resources_of "$doc" DCGM_CUSTOM_PROCESS_MEM_USED)"
  t_eq "seed 001: DCGM_CUSTOM_PROCESS_GPU_MEM_USED_RATIO (rule 5, \${1}_GPU_MEM_USED_RATIO)" "namespaces pods" \
    "$(resources_of "$doc" DCGM_CUSTOM_PROCESS_GPU_MEM_USED_RATIO)"
  t_json "seed 001: nothing else is listed" "$doc" '.resources | length' 10
  t_json "seed 001: one namespaced flag per prefix" "$doc" \
    '[.resources[] | {p: (.name | split("/")[0]), n: .namespaced}] | group_by(.p)
      | map("\(.[0].p)=\(map(.n) | unique | map(tostring) | join(","))") | join(" ")' \
    "namespaces=false nodes=false pods=true"

  want=$(expected_agg DCGM_CUSTOM_PROCESS_SM_UTIL avg PodName '.labels.NamespaceName == "ml" and (.labels.PodName | startswith("bert-"))')
  t_eq "oracle: bert-2's SM_UTIL average over two GPUs is 30250m" "bert-2 30250m" "$(grep '^bert-2 ' <<<"$want")"
  r=$(adapter_get "$G/v1beta1/namespaces/ml/pods/*/DCGM_CUSTOM_PROCESS_SM_UTIL?labelSelector=app%3Dbert")
  t_eq "seed 001: per-pod SM_UTIL (avg by PodName) equals expected.json" "$want" "$(item_values "$r")"
  r=$(adapter_get "$G/v1beta2/namespaces/ml/pods/bert-2/DCGM_CUSTOM_PROCESS_SM_UTIL")
  t_eq "seed 001: by-name SM_UTIL for bert-2 (v1beta2)" "bert-2 30250m" "$(item_values "$r")"

  # The ratio rule: sum(MEM_USED) by (PodName) / sum(CONTAINER_MEM_ALLOCATED) by (PodName).
  ratio_jq="$CMA_JQ_QUANTITY"'
    [.series[] | select(.labels.NamespaceName == $ns)] as $s
    | [$s[] | select(.name == "DCGM_CUSTOM_PROCESS_MEM_USED") | .labels.PodName] | unique[]
    | . as $p
    | ([$s[] | select(.name == "DCGM_CUSTOM_PROCESS_MEM_USED" and .labels.PodName == $p) | .value] | add)
      / ([$s[] | select(.name == "DCGM_CUSTOM_CONTAINER_MEM_ALLOCATED" and .labels.PodName == $p) | .value] | add)
    | "\($p) \(quantity)"'
  want=$(jq -r --arg ns ml "$ratio_jq" "$EXP" | sort)
  t_eq "oracle: ml ratios" "bert-0 500m|bert-1 250m|bert-2 500m|other-0 125m" "$(paste -sd'|' <<<"$want")"
  r=$(adapter_get "$G/v1beta1/namespaces/ml/pods/*/DCGM_CUSTOM_PROCESS_GPU_MEM_USED_RATIO?labelSelector=tier%3Dinference")
  t_eq "seed 001: per-pod memory ratio equals expected.json" "$want" "$(item_values "$r")"
  want=$(jq -r --arg ns default "$ratio_jq" "$EXP" | sort)
  adapter_fetch "$G/v1beta1/namespaces/default/pods/%2A/DCGM_CUSTOM_PROCESS_GPU_MEM_USED_RATIO?labelSelector=app%3Dcuda-test"
  t_eq "seed 001: 1024/16384 = 0.0625 is served truncated as 62m" "cuda-test-0 62m" "$(item_values "$R_BODY")"
  t_eq "seed 001: ... which is the oracle's value too" "$want" "$(item_values "$R_BODY")"
  r=$(adapter_get "$G/v1beta1/nodes/gpu-node-2/DCGM_FI_DEV_FB_USED")
  t_eq "seed 001: node memory used (sum by NodeName)" \
    "$(expected_agg DCGM_FI_DEV_FB_USED sum NodeName '.labels.NodeName == "gpu-node-2"')" "$(item_values "$r")"
  stop_adapter
  t_eq "seed 001: adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "seed 001: start_adapter config/seed-001.yaml"
fi

# --- seed 004 (recording rule, Helm chart generic rule) ------------------------------------------
want004=$(jq -r '.recording_rules.cuda_test_gpu_avg.value' "$EXP" | jq -r "$CMA_JQ_QUANTITY quantity")
t_eq "oracle: seed 004's recording rule value" 6 "$want004"
if start_adapter config/seed-004.yaml; then
  t_ok "seed 004: discovery lists cuda_test_gpu_avg" wait_discovery cuda_test_gpu_avg
  doc=$(adapter_get "$G/v1beta1")
  t_eq "seed 004: cuda_test_gpu_avg is listed for deployments.apps and namespaces" \
    "deployments.apps namespaces" "$(resources_of "$doc" cuda_test_gpu_avg)"
  t_json "seed 004: deployments.apps is namespaced, namespaces is not (kube discovery)" "$doc" \
    '[.resources[] | select(.name | endswith("/cuda_test_gpu_avg")) | "\(.name)=\(.namespaced)"] | sort | join(" ")' \
    "deployments.apps/cuda_test_gpu_avg=true namespaces/cuda_test_gpu_avg=false"
  r=$(adapter_get "$G/v1beta1/namespaces/default/deployments.apps/cuda-test/cuda_test_gpu_avg")
  t_eq "seed 004: the HPA's Object metric answers the recording rule's value" "cuda-test $want004" "$(item_values "$r")"
  t_json "seed 004: describedObject Deployment apps/v1" "$r" \
    '.items[0].describedObject | "\(.kind) \(.apiVersion) \(.namespace)"' "Deployment apps/v1 default"
  r=$(adapter_get "$G/v1beta1/namespaces/default/metrics/cuda_test_gpu_avg")
  t_eq "seed 004: the namespace metric answers it too" "default $want004" "$(item_values "$r")"
  adapter_fetch "$G/v1beta1/namespaces/default/deployments.apps/other/cuda_test_gpu_avg"
  t_eq "seed 004: another deployment has no data: 404" 404 "$R_STATUS"
  stop_adapter
else
  t_fail "seed 004: start_adapter config/seed-004.yaml"
fi

# --- Helm chart default rules ------------------------------------------------------------------
if start_adapter config/prometheus-adapter-default.yaml; then
  t_ok "helm defaults: discovery lists cpu_usage" wait_discovery cpu_usage
  doc=$(adapter_get "$G/v1beta1")
  for m in cpu_usage memory_working_set_bytes http_requests DCGM_FI_DEV_FB_USED; do
    t_ok "helm defaults: pods/$m is listed" jq -e --arg n "pods/$m" 'any(.resources[]; .name == $n and .namespaced)' <<<"$doc"
  done
  t_json "helm defaults: no container_* or *_total name leaks into the API" "$doc" \
    '[.resources[].name | select(test("/container_|_total$"))] | length' 0

  sel="labelSelector=app%3Dbert"
  r=$(adapter_get "$G/v1beta1/namespaces/ml/pods/*/memory_working_set_bytes?$sel")
  t_eq "helm defaults (container rule 3): sum of the pod's containers without POD" \
    "bert-0 1073741824|bert-1 805306368|bert-2 641728512" "$(item_values "$r" | paste -sd'|')"
  r=$(adapter_get "$G/v1beta1/namespaces/ml/pods/*/cpu_usage?$sel")
  t_eq "helm defaults (container rule 1): sum(rate(container_cpu_usage_seconds_total[5m]))" \
    "bert-0 250m|bert-1 500m|bert-2 1245m" "$(item_values "$r" | paste -sd'|')"
  r=$(adapter_get "$G/v1beta1/namespaces/ml/pods/*/http_requests?$sel")
  t_eq "helm defaults (generic rule 5): sum(rate(http_requests_total[5m]))" \
    "bert-0 10|bert-1 2500m|bert-2 41m" "$(item_values "$r" | paste -sd'|')"
  r=$(adapter_get "$G/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_FB_USED?$sel")
  t_eq "helm defaults (generic rule 4): DCGM_FI_DEV_FB_USED summed per pod" \
    "$(expected_agg DCGM_FI_DEV_FB_USED sum pod '.labels.namespace == "ml" and (.labels.pod | startswith("bert-"))')" \
    "$(item_values "$r")"
  stop_adapter
else
  t_fail "helm defaults: start_adapter config/prometheus-adapter-default.yaml"
fi

t_summary
