#!/usr/bin/env bash
# demo.sh: the README's first command. Builds the adapter (scripts/setup.sh), generates synthetic
# NVIDIA DCGM GPU metrics, loads them into a local Prometheus, starts a fake kube-apiserver that
# stands in for the cluster, starts the adapter with config/gpu-dcgm.yaml and shows what an HPA
# reads: the discovery list, per-pod and per-node GPU utilisation. Everything binds 127.0.0.1 on
# free ports and is stopped at the end, and on Ctrl-C.
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
gen_dcgm || die "could not generate the data"
jq -r '.series | map(select(.name == "DCGM_FI_DEV_GPU_UTIL" and .labels.pod != null))
  | group_by(.labels.namespace + "/" + .labels.pod)
  | map("  \(.[0].labels.namespace)/\(.[0].labels.pod) on \(.[0].labels.Hostname): GPU util "
        + (map(.value | tostring + "%") | join(" + ")))[]' "$DCGM_DIR/expected.json"

step "Prometheus $(prometheus --version 2>&1 | awk 'NR == 1 {print $3}') with that data backfilled"
start_prometheus "$DCGM_DIR/dcgm.om" || die "Prometheus did not start"
say "  $PROM_URL ($(prom_query 'count({__name__=~"DCGM_.*"})' | jq -r '.data.result[0].value[1]') DCGM series)"

step "Fake kube-apiserver"
say "  There is no Kubernetes cluster here: tests/lib/fake_kube_apiserver.py stands in for it,"
say "  serving recorded kube-apiserver responses and the pods above (namespaces ml, vision, default)."
start_fake_kube "$DCGM_DIR/pods.json" || die "the fake kube-apiserver did not start"
say "  $KUBE_URL"

step "custom-metrics-adapter with config/gpu-dcgm.yaml"
start_adapter config/gpu-dcgm.yaml || die "the adapter did not start (log: $ADAPTER_LOG)"
say "  $ADAPTER_URL (pid $ADAPTER_PID); waiting for the first discovery..."
if ! wait_discovery DCGM_FI_DEV_GPU_UTIL custom.metrics.k8s.io/v1beta1 60; then
  tail -n 30 "$ADAPTER_LOG" >&2
  die "DCGM_FI_DEV_GPU_UTIL never appeared in discovery"
fi
export KUBECONFIG=$ADAPTER_KUBECONFIG

show "The metrics an HPA can use (discovery)" \
  'kubectl get --raw /apis/custom.metrics.k8s.io/v1beta1 | jq'
show "GPU utilisation of the bert pods (an HPA's Pods metric: mean over each pod's GPUs)" \
  'kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert" | jq'
show "GPU utilisation per node (mean over all GPUs of the node, idle ones included)" \
  'kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/nodes/*/DCGM_FI_DEV_GPU_UTIL" | jq'

if [ "$keep" = 1 ]; then
  step "Still running. Try, in another terminal:"
  cat <<EOF
  export KUBECONFIG=$ADAPTER_KUBECONFIG
  kubectl get --raw /apis/custom.metrics.k8s.io/v1beta1 | jq
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert" | jq
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/vision/pods/*/DCGM_FI_DEV_FB_USED" | jq
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/DCGM_FI_PROF_GR_ENGINE_ACTIVE" | jq
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/metrics/DCGM_FI_DEV_FB_USED" | jq
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/nodes/gpu-node-2/DCGM_FI_DEV_GPU_UTIL" | jq
  curl -s "$PROM_URL/api/v1/query" --data-urlencode 'query=DCGM_FI_DEV_GPU_UTIL' | jq
  tail -f $ADAPTER_LOG           # the adapter's log
  tail -f $KUBE_REQUEST_LOG      # what the adapter asked the fake kube-apiserver
Press Ctrl-C to stop everything.
EOF
  while :; do
    sleep 3600
  done
fi

step "Stopping"
stop_adapter
rc=$?
say "  adapter exited with status $rc; Prometheus and the fake kube-apiserver stop on exit."
exit "$rc"
