#!/usr/bin/env bash
# test_gpu_walkthroughs.sh: every walkthrough of docs/gpu.md, run as written there (same rule
# files, flags and `kubectl get --raw` paths), each against a real Prometheus:
#   1. seed 001 (Alibaba ACK): the five rules (config/seed-001.yaml) and the HPA's read of
#      DCGM_CUSTOM_PROCESS_SM_UTIL, with the HPA's replica arithmetic;
#   2. seed 000 (Giant Swarm, Mimir): the GPU pack behind basic auth and X-Scope-OrgID (a Mimir
#      stand-in, tests/lib/auth_proxy.py), the two KEDA triggers as one plain HPA's Pods metrics;
#   3. seed 004: the recording rule cuda_test_gpu_avg (tests/lib/rules-seed004.yaml, evaluated by
#      Prometheus) served as an Object metric of the Deployment (config/seed-004.yaml);
#   4. MIG: gpu_utilization_percent from GR_ENGINE_ACTIVE on real MIG output (issue #68 fixture);
#   5. time-sliced GPUs: every pod sharing a card reads the card's value (synthetic data: no real
#      time-sliced sample exists, see ../shared/fixtures/exporters/README.md);
#   6. LLM inference: the HPA's reads of inference_requests_waiting/_running, per pod and per
#      model (the doc's External model_name=qwen-coder step), with the HPA's replica arithmetic,
#      on real vLLM output plus two SYNTHETIC vLLM pods with non-zero queues (every real
#      fixture's queue is 0, so a queue-depth check on them alone could not fail);
#   1b. the GPU pack on ACK-labelled device series (PodName/NamespaceName/NodeName; synthetic:
#      no real ACK device sample is public).
# Data: tests/lib/gen_dcgm.py (--ack-labels) backfilled, and the real exporter fixtures plus
# gen_dcgm.py --exposition's synthetic exporters (files synthetic_*.prom) scraped by Prometheus
# with honor_labels: false and true (tests/lib/exporters.sh). Expected values come from
# expected.json or the raw files (tests/lib/exporters_oracle.py).
# asan: yes
# cost: high (about a minute alone: scripts/test.sh starts it early)
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh
# shellcheck source=tests/lib/exporters.sh
source tests/lib/exporters.sh
C=/apis/custom.metrics.k8s.io/v1beta1
E=/apis/external.metrics.k8s.io/v1beta1

gen_dcgm --ack-labels --exposition || exit 1
EXP="$DCGM_DIR/expected.json"
# Time-sliced card (walkthrough 5): three pods of namespace `shared` on one GPU; dcgm-exporter
# (--kubernetes-virtual-gpus) labels the card's series once per pod, with the card's value.
python3 - "$EXP" "$DCGM_DIR/shared.om" "$DCGM_DIR/shared-pods.json" <<'EOF'
import json, sys
now = json.load(open(sys.argv[1]))["now"]
pods = ["ts-0", "ts-1", "ts-2"]
with open(sys.argv[2], "w") as out:
    for name, value in (("DCGM_FI_DEV_GPU_UTIL", 90), ("DCGM_FI_DEV_FB_USED", 6000), ("DCGM_FI_DEV_FB_FREE", 10000)):
        out.write("# TYPE %s gauge\n" % name)
        for t in range(now - 900, now + 3480 + 1, 60):
            for i, pod in enumerate(pods):
                out.write('%s{gpu="0",UUID="GPU-5a1ced00-0000-4000-8000-000000000001",device="nvidia0",'
                          'modelName="Tesla T4",Hostname="gpu-node-3",vgpu="%d",container="app",'
                          'namespace="shared",pod="%s"} %d %d\n' % (name, i, pod, value, t))
    out.write("# EOF\n")
json.dump([{"namespace": "shared", "name": p, "labels": {"app": "shared-gpu"}, "phase": "Running",
            "nodeName": "gpu-node-3"} for p in pods], open(sys.argv[3], "w"))
EOF
om_merge "$DCGM_DIR/all.om" "$DCGM_DIR/dcgm.om" "$DCGM_DIR/shared.om"
jq -s 'add' "$DCGM_DIR/pods.json" "$DCGM_DIR/shared-pods.json" >"$DCGM_DIR/all-pods.json"
if ! start_prometheus "$DCGM_DIR/all.om" tests/lib/rules-seed004.yaml || ! start_fake_kube "$DCGM_DIR/all-pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
PROM_GEN=$PROM_URL

# hpa_desired CURRENT_REPLICAS TARGET VALUES...: the HPA's desired replicas for a Pods metric
# (mean of the pods' quantities against an AverageValue target, 10 % tolerance).
hpa_desired() {
  local n=$1 target=$2
  shift 2
  printf '%s\n' "$@" | awk -v n="$n" -v t="$target" '
    { v = $1; if (v ~ /m$/) { sub(/m$/, "", v); v /= 1000 } else if (v ~ /k$/) { sub(/k$/, "", v); v *= 1000 }
      s += v; c++ }
    END { r = (s / c) / t; if (r > 0.9 && r < 1.1) { print n; exit }
          d = n * r; print (d == int(d)) ? d : int(d) + 1 }'
}

# --- 1. seed 001: ACK's five rules, HPA on DCGM_CUSTOM_PROCESS_SM_UTIL -------------------------------
if start_adapter config/seed-001.yaml; then
  t_ok "001: discovery lists pods/DCGM_CUSTOM_PROCESS_SM_UTIL" wait_discovery DCGM_CUSTOM_PROCESS_SM_UTIL
  r=$(adapter_get "$C/namespaces/ml/pods/*/DCGM_CUSTOM_PROCESS_SM_UTIL?labelSelector=app%3Dbert")
  want=$(expected_agg DCGM_CUSTOM_PROCESS_SM_UTIL avg PodName '.labels.NamespaceName == "ml" and (.labels.PodName | startswith("bert-"))')
  t_eq "001: the HPA's read (avg by PodName) equals expected.json" "$want" "$(item_values "$r")"
  # gpu-hpa of the walkthrough: targetAverageValue 20 over 3 bert pods
  mapfile -t vals < <(item_values "$r" | awk '{print $2}')
  want_n=$(jq -r '[.series[] | select(.name == "DCGM_CUSTOM_PROCESS_SM_UTIL" and .labels.NamespaceName == "ml" and (.labels.PodName | startswith("bert-")))]
    | group_by(.labels.PodName) | map(map(.value) | add / length) | (add / length / 20) as $r
    | if ($r > 0.9 and $r < 1.1) then 3 else (3 * $r | ceil) end' "$EXP")
  t_eq "001: gpu-hpa (target 20) wants the replicas the served values give" "$want_n" "$(hpa_desired 3 20 "${vals[@]}")"
  t_eq "001: the doc's worked example: 1 pod at 23 against 20 gives 2" 2 "$(hpa_desired 1 20 23)"
  stop_adapter
  t_eq "001: adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "001: start_adapter config/seed-001.yaml"
fi

# --- 2. seed 000: Mimir with basic auth and a tenant header; KEDA's triggers as one HPA -------------
printf 'mimir-reader-password\n' >"$CMA_TMP/mimir-password"
if start_auth_proxy "$PROM_GEN" --basic-user tenant-reader --basic-password mimir-reader-password --org-id giantswarm &&
  PROM_URL=$AUTH_PROXY_URL start_adapter config/packs/dcgm.yaml \
    --prometheus-basic-auth-username=tenant-reader --prometheus-basic-auth-password-file="$CMA_TMP/mimir-password" \
    --prometheus-header=X-Scope-OrgID=giantswarm; then
  t_ok "000: discovery through the Mimir stand-in" wait_discovery gpu_mem_copy_utilization_percent
  sel="labelSelector=app%3Dbert"
  r=$(adapter_get "$C/namespaces/ml/pods/*/gpu_utilization_percent?$sel")
  t_eq "000: trigger 1 as a Pods metric: gpu_utilization_percent per pod" \
    "$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod '.labels.namespace == "ml" and (.labels.pod | startswith("bert-"))')" "$(item_values "$r")"
  r=$(adapter_get "$C/namespaces/ml/pods/*/gpu_mem_copy_utilization_percent?$sel")
  t_eq "000: trigger 2 as a Pods metric: gpu_mem_copy_utilization_percent per pod" \
    "$(expected_agg DCGM_FI_DEV_MEM_COPY_UTIL avg pod '.labels.namespace == "ml" and (.labels.pod | startswith("bert-"))')" "$(item_values "$r")"
  r=$(adapter_get "$C/namespaces/ml/pods/*/gpu_memory_used_percent?$sel")
  want=$(jq -r "$CMA_JQ_QUANTITY"'[.series[] | select(.labels.namespace == "ml" and (.labels.pod // "" | startswith("bert-")))] as $s
    | [$s[] | .labels.pod] | unique[] | . as $p
    | ([$s[] | select(.name == "DCGM_FI_DEV_FB_USED" and .labels.pod == $p) | .value] | add) as $used
    | ([$s[] | select(.name == "DCGM_FI_DEV_FB_FREE" and .labels.pod == $p) | .value] | add) as $free
    | "\($p) \(100 * $used / ($used + $free) | quantity)"' "$EXP")
  t_eq "000: capacity, not bandwidth: gpu_memory_used_percent = FB_USED / (FB_USED + FB_FREE)" "$want" "$(item_values "$r")"
  t_ok "000: every backend call carried basic auth and X-Scope-OrgID: giantswarm" \
    jq -e -s --arg a "Basic $(printf '%s' 'tenant-reader:mimir-reader-password' | base64 -w0)" \
    'map(select(.path | startswith("/prometheus/api/v1/"))) | length > 0 and all(.authorization == $a and .org_id == "giantswarm" and .status == 200)' \
    "$AUTH_PROXY_REQUEST_LOG"
  stop_adapter
  t_eq "000: adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "000: start the Mimir stand-in and the adapter behind it"
fi

# --- 3. seed 004: the recording rule cuda_test_gpu_avg as an Object metric ---------------------------
export PROM_URL=$PROM_GEN
want004=$(jq -r '.recording_rules.cuda_test_gpu_avg.value' "$EXP" | jq -r "$CMA_JQ_QUANTITY quantity")
if start_adapter config/seed-004.yaml; then
  t_ok "004: discovery lists cuda_test_gpu_avg" wait_discovery cuda_test_gpu_avg
  r=$(adapter_get "$C/namespaces/default/deployments.apps/cuda-test/cuda_test_gpu_avg")
  t_eq "004: the HPA's Object metric reads the recording rule's value" "cuda-test $want004" "$(item_values "$r")"
  stop_adapter
  t_eq "004: adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "004: start_adapter config/seed-004.yaml"
fi

# --- 5. time-sliced GPUs: each pod reads the whole card ------------------------------------------
if start_adapter config/packs/dcgm.yaml; then
  t_ok "time-slicing: discovery" wait_discovery gpu_utilization_percent
  r=$(adapter_get "$C/namespaces/shared/pods/*/gpu_utilization_percent")
  t_eq "time-slicing: every pod on the card reads the card's 90 %" "ts-0 90|ts-1 90|ts-2 90" "$(item_values "$r" | paste -sd'|')"
  t_eq "time-slicing: so an HPA at 60 asks for ceil(3 x 90/60) = 5 and more pods read the same" 5 \
    "$(hpa_desired 3 60 90 90 90)"
  r=$(adapter_get "$C/namespaces/shared/pods/*/gpu_memory_used_bytes")
  t_eq "time-slicing: memory too is the card's, once per pod" \
    "ts-0 $(quantity $((6000 * 1048576)))|ts-1 $(quantity $((6000 * 1048576)))|ts-2 $(quantity $((6000 * 1048576)))" \
    "$(item_values "$r" | paste -sd'|')"
  r=$(adapter_get "$C/nodes/gpu-node-3/gpu_utilization_percent")
  t_eq "time-slicing: the node value is the card's" "gpu-node-3 90" "$(item_values "$r")"
  stop_adapter
  t_eq "time-slicing: adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "time-slicing: start_adapter config/packs/dcgm.yaml"
fi

# --- 4, 6 and 1b: real exporter output (MIG, vLLM) and synthetic exporters, honor_labels false/true --
prepare_fixtures "$DCGM_DIR/exporters" || exit 1
ORACLE="$CMA_TMP/oracle.json"
python3 tests/lib/exporters_oracle.py "$CMA_EXPORTER_FIXTURES" "$FIX_DIR" "$DCGM_DIR/exporters" >"$ORACLE" || exit 1
cma_stop "$KUBE_PID" 5 # the fixtures' pods replace the generated ones
if ! start_fixture_server || ! start_fake_kube "$FIX_DIR/pods.json" || ! start_fixture_prometheus false; then
  t_fail "start the fixture scrape"
  t_summary
  exit 1
fi
PROM_FALSE=$PROM_URL
if ! start_fixture_prometheus true; then
  t_fail "start the fixture scrape (honor_labels: true)"
  t_summary
  exit 1
fi
PROM_TRUE=$PROM_URL
ow() { jq -r --arg g "$1" --arg m "$2" --arg k "$3" "$CMA_JQ_QUANTITY"'.[$g][$m][$k] | quantity' "$ORACLE"; }
# The doc's vLLM HPA (target averageValue 5 over the vllm-qwen pods) and External metric (target
# averageValue 5 for model_name=qwen-coder), replicas from the raw values.
qwen_pods=$(jq -r "$CMA_JQ_QUANTITY"'.pods.inference_requests_waiting | to_entries[] | select(.key | startswith("llm/vllm-qwen-")) | "\(.key | ltrimstr("llm/")) \(.value | quantity)"' "$ORACLE" | sort)
qwen_n=$(jq '[.pods.inference_requests_waiting | to_entries[] | select(.key | startswith("llm/vllm-qwen-"))] | length' "$ORACLE")
qwen_want=$(jq --argjson n "$qwen_n" '[.pods.inference_requests_waiting | to_entries[] | select(.key | startswith("llm/vllm-qwen-")) | .value]
  | (add / length / 5) as $r | if ($r > 0.9 and $r < 1.1) then $n else ($n * $r | ceil) end' "$ORACLE")
qwen_model=$(jq '.external.inference_requests_waiting["qwen-coder"]' "$ORACLE")
t_ok "LLM data: the vllm-qwen pods' queues are not all 0 (3 pods, the HPA wants more than 3)" \
  test "$qwen_n" = 3 -a "$qwen_want" -gt 3
for honor in false true; do
  if [ $honor = false ]; then export PROM_URL=$PROM_FALSE; else export PROM_URL=$PROM_TRUE; fi
  h="honor_labels $honor"
  if start_adapter config/packs; then
    t_ok "MIG/LLM ($h): discovery" wait_discovery inference_requests_waiting
    r=$(adapter_get "$C/namespaces/gi-user1-giops-ai/pods/*/gpu_utilization_percent")
    t_eq "MIG ($h): the 2g.12gb instance's pod reads 100 x GR_ENGINE_ACTIVE" \
      "testest-9sxmd $(ow pods gpu_utilization_percent gi-user1-giops-ai/testest-9sxmd)" "$(item_values "$r")"
    r=$(adapter_get "$C/namespaces/llm/pods/*/inference_requests_waiting?labelSelector=app%3Dvllm-qwen")
    t_eq "LLM ($h): the HPA's read of queue depth (Pods metric)" "$qwen_pods" "$(item_values "$r")"
    mapfile -t vals < <(item_values "$r" | awk '{print $2}')
    t_eq "LLM ($h): the vllm HPA (target 5 per pod, 3 replicas) wants $qwen_want" "$qwen_want" "$(hpa_desired 3 5 "${vals[@]}")"
    r=$(adapter_get "$E/namespaces/llm/inference_requests_waiting?labelSelector=model_name%3Dqwen-coder")
    t_eq "LLM ($h): the doc's External read, model_name=qwen-coder" "qwen-coder $(quantity "$qwen_model")" \
      "$(jq -r '.items[] | "\(.metricLabels.model_name) \(.value)"' <<<"$r")"
    mapfile -t vals < <(jq -r '.items[].value' <<<"$r")
    # External AverageValue: desired = ceil(value / target) (usage ratio value / (target x replicas)).
    t_eq "LLM ($h): the External metric at 5 per replica wants ceil($qwen_model / 5) from 3" \
      "$(jq -n --argjson v "$qwen_model" '($v / 15) as $r | if ($r > 0.9 and $r < 1.1) then 3 else (3 * $r | ceil) end')" \
      "$(hpa_desired 3 15 "${vals[@]}")"
    r=$(adapter_get "$C/namespaces/llm/pods/*/inference_requests_running?labelSelector=app%3Dvllm-llama")
    t_eq "LLM ($h): running requests per pod" "vllm-llama-0 $(ow pods inference_requests_running llm/vllm-llama-0)" "$(item_values "$r")"
    mapfile -t vals < <(item_values "$r" | awk '{print $2}')
    t_eq "LLM ($h): an HPA holding 4 running requests per pod wants ceil(1 x 8/4) = 2" 2 "$(hpa_desired 1 4 "${vals[@]}")"
    r=$(adapter_get "$E/namespaces/llm/inference_requests_running")
    t_eq "LLM ($h): per model (External)" \
      "$(jq -r "$CMA_JQ_QUANTITY"'.external.inference_requests_running | to_entries[] | "\(.key) \(.value | quantity)"' "$ORACLE" | LC_ALL=C sort)" \
      "$(jq -r '.items[] | "\(.metricLabels.model_name // "") \(.value)"' <<<"$r" | LC_ALL=C sort)"
    # 1b: the GPU pack on ACK-labelled device series, no rules of one's own.
    r=$(adapter_get "$C/namespaces/syn-ack/pods/*/gpu_utilization_percent")
    t_eq "ACK ($h): gpu_utilization_percent per pod from PodName/NamespaceName" \
      "ack-infer-0 $(ow pods gpu_utilization_percent syn-ack/ack-infer-0)|ack-train-0 $(ow pods gpu_utilization_percent syn-ack/ack-train-0)" \
      "$(item_values "$r" | paste -sd'|')"
    r=$(adapter_get "$C/nodes/syn-node-ack/gpu_utilization_percent")
    t_eq "ACK ($h): per node from NodeName" "syn-node-ack $(ow nodes gpu_utilization_percent syn-node-ack)" "$(item_values "$r")"
    stop_adapter
    t_eq "LLM ($h): adapter exits 0 on SIGTERM" 0 "$?"
  else
    t_fail "MIG/LLM ($h): start_adapter config/packs"
  fi
done

t_summary
