#!/usr/bin/env bash
# demo.sh: the README's first command. Builds the adapter (scripts/setup.sh), generates synthetic
# NVIDIA DCGM GPU metrics and vLLM queue metrics, loads them into a local Prometheus, starts a fake
# kube-apiserver that stands in for the cluster, starts the adapter with the rule packs
# (config/packs: dcgm.yaml and inference.yaml) and shows what an HPA reads: the discovery list,
# per-pod GPU utilisation and memory, per-node utilisation, and the inference queue depth per pod
# and per model. Everything binds 127.0.0.1 on free ports and is stopped at the end, and on Ctrl-C.
#   scripts/demo.sh          run through and stop
#   scripts/demo.sh --keep   leave it all running, print commands to try; Ctrl-C stops it
#   --no-setup               skip scripts/setup.sh (tree already built; CMA_BIN picks the binary)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

keep=0
setup=1
for arg in "$@"; do
  case $arg in
    --keep) keep=1 ;;
    --no-setup) setup=0 ;;
    -h | --help)
      sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
      exit 0
      ;;
    *)
      echo "demo.sh: unknown argument $arg (try --help)" >&2
      exit 2
      ;;
  esac
done

if [ "$setup" = 1 ]; then
  scripts/setup.sh --demo || exit 1
fi
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

if [ -t 1 ]; then
  bold=$'\033[1m' dim=$'\033[2m' off=$'\033[0m'
else
  bold="" dim="" off=""
fi
say() { printf '%s\n' "$*"; }
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$off"; }
show() { # CAPTION COMMAND: prints the command as typed, then runs it
  step "$1"
  printf '%s$ %s%s\n' "$dim" "$2" "$off"
  bash -c "$2" || say "(the command failed: exit $?)"
}
die() {
  say "demo: $*" >&2
  exit 1
}

step "Synthetic GPU metrics (DCGM exporter labels)"
# The vLLM queue gauges of the bert pods come with it (--vllm: vllm.om), as a scrape of each pod
# would store them (synthetic, like the GPU data: values constant over time, from the table in
# tests/lib/gen_dcgm.py).
gen_dcgm --vllm || die "could not generate the data"
jq -r '.series | map(select(.name == "DCGM_FI_DEV_GPU_UTIL" and .labels.pod != null))
  | group_by(.labels.namespace + "/" + .labels.pod)
  | map("  \(.[0].labels.namespace)/\(.[0].labels.pod) on \(.[0].labels.Hostname): GPU util "
        + (map(.value | tostring + "%") | join(" + ")))[]' "$DCGM_DIR/expected.json"

om_merge "$DCGM_DIR/demo.om" "$DCGM_DIR/dcgm.om" "$DCGM_DIR/vllm.om"
jq -r '[.vllm[] | select(.name == "vllm:num_requests_waiting")]
  | "  vLLM queue: \(map("\(.labels.pod) \(.value) waiting") | join(", ")) (model \(.[0].labels.model_name))"' "$DCGM_DIR/expected.json"

step "Prometheus $(prometheus --version 2>&1 | awk 'NR == 1 {print $3}') with that data backfilled"
start_prometheus "$DCGM_DIR/demo.om" || die "Prometheus did not start"
say "  $PROM_URL ($(prom_query 'count({__name__=~"DCGM_.*|vllm:.*"})' | jq -r '.data.result[0].value[1]') series)"

step "Fake kube-apiserver"
say "  There is no Kubernetes cluster here: tests/lib/fake_kube_apiserver.py stands in for it,"
say "  serving recorded kube-apiserver responses and the pods above (namespaces ml, vision, default)."
start_fake_kube "$DCGM_DIR/pods.json" || die "the fake kube-apiserver did not start"
say "  $KUBE_URL"

step "custom-metrics-adapter with the rule packs (--config=config/packs)"
start_adapter config/packs || die "the adapter did not start (log: $ADAPTER_LOG)"
say "  $ADAPTER_URL (pid $ADAPTER_PID); waiting for the first discovery..."
if ! wait_discovery gpu_utilization_percent custom.metrics.k8s.io/v1beta1 60 ||
  ! wait_discovery inference_requests_waiting custom.metrics.k8s.io/v1beta1 60; then
  tail -n 30 "$ADAPTER_LOG" >&2
  die "the packs' metrics never appeared in discovery"
fi
export KUBECONFIG=$ADAPTER_KUBECONFIG

show "The metrics an HPA can use (discovery)" \
  'kubectl get --raw /apis/custom.metrics.k8s.io/v1beta1 | jq -r ".resources[].name"'
show "GPU utilisation of the bert pods (an HPA's Pods metric: mean over each pod's GPUs)" \
  'kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/gpu_utilization_percent?labelSelector=app%3Dbert" | jq -c ".items[] | {pod: .describedObject.name, value}"'
show "GPU memory of the same pods, percent of their cards" \
  'kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/gpu_memory_used_percent?labelSelector=app%3Dbert" | jq -c ".items[] | {pod: .describedObject.name, value}"'
show "Inference queue depth of the same pods (vLLM requests waiting): the LLM-serving signal" \
  'kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/inference_requests_waiting?labelSelector=app%3Dbert" | jq -c ".items[] | {pod: .describedObject.name, value}"'
show "... and per model (external.metrics.k8s.io, model_name)" \
  'kubectl get --raw "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/inference_requests_waiting?labelSelector=model_name%3Dbert-intent" | jq -c ".items[] | {model: .metricLabels.model_name, value}"'
show "GPU utilisation per node (mean over all GPUs of the node, idle ones included)" \
  'kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/nodes/gpu-node-2/gpu_utilization_percent" | jq -c ".items[] | {node: .describedObject.name, value}"'

if [ "$keep" = 1 ]; then
  step "Still running. Try, in another terminal:"
  cat <<EOF
  export KUBECONFIG=$ADAPTER_KUBECONFIG
  kubectl get --raw /apis/custom.metrics.k8s.io/v1beta1 | jq
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/gpu_utilization_percent?labelSelector=app%3Dbert" | jq
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/vision/pods/*/gpu_memory_used_bytes" | jq
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/gpu_engine_active_percent" | jq
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/metrics/gpu_memory_used_bytes" | jq
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/inference_kv_cache_usage_percent" | jq
  kubectl get --raw "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/inference_requests_waiting" | jq
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/nodes/gpu-node-2/gpu_utilization_percent" | jq
  curl -s "$PROM_URL/api/v1/query" --data-urlencode 'query=DCGM_FI_DEV_GPU_UTIL' | jq
  tail -f $ADAPTER_LOG           # the adapter's log
  tail -f $KUBE_REQUEST_LOG      # what the adapter asked the fake kube-apiserver
Press Ctrl-C to stop everything.
EOF
  # Wait on a background sleep, not a foreground one: a SIGTERM sent to this script alone (not
  # to its process group, as Ctrl-C is) ends bash and runs common.sh's EXIT trap at once, but a
  # foreground `sleep` would be left running; `wait` returns on the signal and the exit hook
  # stops the sleep.
  sleep infinity &
  cma_on_exit "kill $! 2>/dev/null"
  wait $!
fi

step "Stopping"
stop_adapter
rc=$?
say "  adapter exited with status $rc; Prometheus and the fake kube-apiserver stop on exit."
exit "$rc"
