#!/usr/bin/env bash
# test_valgrind.sh: the adapter (release or debug build, not ASan) under valgrind memcheck: discovery, by-selector, by-name, root-scoped and namespace metrics, error answers (404, 400, 405, 406, 503 with the backend down, failed relists), then SIGTERM; valgrind must exit 0 with "ERROR SUMMARY: 0 errors" and no definite leaks.
# asan: no
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

bin=$(cma_adapter_bin)
if ! command -v valgrind >/dev/null; then
  t_fail "valgrind is installed"
  t_summary
  exit 1
fi
if grep -q -a '__asan_init' "$bin" 2>/dev/null; then
  t_fail "CMA_BIN is not an ASan build (valgrind cannot run those): $bin"
  t_summary
  exit 1
fi

gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
export CMA_WRAPPER="valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --num-callers=30"
RELIST=2s
export RELIST
if ! start_adapter config/gpu-dcgm.yaml; then
  t_fail "start_adapter under valgrind"
  t_summary
  exit 1
fi
t_ok "valgrind wraps the adapter" grep -q 'Memcheck, a memory error detector' "$ADAPTER_LOG"
t_ok "discovery under valgrind" wait_discovery DCGM_FI_DEV_GPU_UTIL custom.metrics.k8s.io/v1beta1 120

G=/apis/custom.metrics.k8s.io
t_json "discovery document" "$(adapter_get "$G/v1beta2")" '.resources | length' 12
r=$(adapter_get "$G/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert")
t_eq "by-selector values" \
  "$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod '.labels.namespace == "ml" and (.labels.pod // "" | startswith("bert-"))')" \
  "$(item_values "$r")"
adapter_fetch "$G/v1beta2/namespaces/ml/pods/%2A/DCGM_FI_PROF_GR_ENGINE_ACTIVE?labelSelector=app+in+%28bert%2Cother%29&metricLabelSelector=gpu+in+%280%2C1%2C2%29"
t_eq "by-selector with metricLabelSelector and a NaN sample: 200" 200 "$R_STATUS"
t_json "... other-0's NaN left out" "$R_BODY" '[.items[].describedObject.name] | sort | join(" ")' "bert-0 bert-1 bert-2"
t_json "by-name" "$(adapter_get "$G/v1beta1/namespaces/vision/pods/resnet-1/DCGM_FI_DEV_FB_USED")" '.items | length' 1
t_json "root-scoped node" "$(adapter_get "$G/v1beta1/nodes/gpu-node-1/DCGM_FI_DEV_GPU_UTIL")" '.items[0].describedObject.kind' Node
t_json "namespace metric" "$(adapter_get "$G/v1beta1/namespaces/ml/metrics/DCGM_FI_DEV_FB_USED")" '.items[0].describedObject.kind' Namespace
adapter_fetch "$G/v1beta1/namespaces/ml/pods/bert-9/DCGM_FI_DEV_GPU_UTIL"
t_eq "404 no data for a named pod" 404 "$R_STATUS"
adapter_fetch "$G/v1beta1/namespaces/ml/pods/*/NO_SUCH_METRIC"
t_eq "404 unknown metric" 404 "$R_STATUS"
adapter_fetch "$G/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3D%3D%3Dx"
t_eq "400 malformed labelSelector" 400 "$R_STATUS"
adapter_fetch "$G/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert&metricLabelSelector=gpu%3E1"
t_eq "400 gt in metricLabelSelector" 400 "$R_STATUS"
adapter_fetch "$G/v1beta1" -X POST -d x
t_eq "405 POST" 405 "$R_STATUS"
adapter_fetch "$G/v1beta1" -H 'Accept: application/vnd.kubernetes.protobuf'
t_eq "406 protobuf only" 406 "$R_STATUS"
for p in /healthz '/readyz?verbose' /livez /version /openapi/v2 /apis /apis/custom.metrics.k8s.io /nope; do
  adapter_fetch "$p"
  t_ok "GET $p answers" test "$R_STATUS" != 000
done

stop_prometheus
sleep 6 # answers from before the outage may be served until --metrics-cache-ttl (5s) has passed
adapter_fetch "$G/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert"
t_eq "503 with the backend down" 503 "$R_STATUS"
t_ok "a failed relist keeps the previous catalog" wait_adapter_log 'keeping the previous catalog' 60

stop_adapter 120
rc=$?
t_eq "valgrind's exit status after SIGTERM (99 = memcheck errors)" 0 "$rc"
t_ok "ERROR SUMMARY: 0 errors" grep -q 'ERROR SUMMARY: 0 errors from 0 contexts' "$ADAPTER_LOG"
t_ok "no definite leaks" bash -c 'grep -q "definitely lost: 0 bytes" "$1" || grep -q "All heap blocks were freed" "$1"' _ "$ADAPTER_LOG"
t_summary
