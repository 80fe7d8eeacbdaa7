#!/usr/bin/env bash
# test_restmapper.sh: the RESTMapper kept live. A rule maps the `pod` label of DCGM_FI_DEV_GPU_UTIL to a CRD, gpuworkloads.ml.example.com, that does not exist when the adapter starts (the fake kube-apiserver stands in for kube-apiserver; its /__fake/add-api-resource control endpoint stands in for `kubectl apply` of the CRD). Before the CRD exists the metric is neither listed nor served; after it is added, the first by-name request (404, unknown resource) makes the adapter re-read API discovery at once (--discovery-interval is 10m here, so nothing else would), and within the relist window discovery lists gpuworkloads.ml.example.com/gpu_workload_util and the by-name request answers the Prometheus value.
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

cat >"$CMA_TMP/crd-rules.yaml" <<'YAML'
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace:
        resource: namespace
      pod:
        group: ml.example.com
        resource: gpuworkloads
  name:
    as: gpu_workload_util
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
YAML

gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json" ||
  ! RELIST=1s start_adapter "$CMA_TMP/crd-rules.yaml" --discovery-interval=10m; then
  t_fail "start Prometheus, fake kube-apiserver and adapter"
  t_summary
  exit 1
fi

G=/apis/custom.metrics.k8s.io/v1beta2
METRIC=gpuworkloads.ml.example.com/gpu_workload_util
BY_NAME="$G/namespaces/ml/gpuworkloads.ml.example.com/bert-0/gpu_workload_util"
want=$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod '.labels.namespace == "ml" and .labels.pod == "bert-0"' |
  awk '{print $2}')

# listed: prints "yes" when the v1beta2 discovery document lists METRIC.
listed() {
  curl -s --max-time 5 --cacert "$ADAPTER_CA" "$ADAPTER_URL$G" |
    jq -r --arg m "$METRIC" 'if any(.resources[]?; .name == $m) then "yes" else "no" end'
}

# --- before the CRD exists -------------------------------------------------------------------
# served: the discovery document answers 200 (a first relist published a catalog).
served() {
  for _ in $(seq 1 120); do
    [ "$(curl -s --max-time 5 --cacert "$ADAPTER_CA" -o /dev/null -w '%{http_code}' "$ADAPTER_URL$G")" = 200 ] &&
      return 0
    sleep 0.5
  done
  return 1
}
t_ok "a first relist published a catalog" served
sleep 2 # a few more relists against the start-up mapper
t_eq "before the CRD: discovery does not list $METRIC" "no" "$(listed)"

# --- the CRD is installed --------------------------------------------------------------------
added=$(curl -s --max-time 10 --cacert "$KUBE_CA" -H "Authorization: Bearer fake-admin" \
  "$KUBE_URL/__fake/add-api-resource?group=ml.example.com&version=v1alpha1&resource=gpuworkloads&kind=GPUWorkload&namespaced=true")
t_json "fake kube-apiserver: CRD gpuworkloads.ml.example.com added" "$added" '.added' \
  "ml.example.com/v1alpha1/gpuworkloads"
t_json "fake kube-apiserver: /apis lists ml.example.com" \
  "$(curl -s --max-time 10 --cacert "$KUBE_CA" -H "Authorization: Bearer fake-admin" "$KUBE_URL/apis")" \
  '[.groups[].name] | index("ml.example.com") != null' "true"

adapter_fetch "$BY_NAME"
t_eq "first by-name request after the CRD: 404 (mapper not refreshed yet), asks for a refresh" \
  "404" "$R_STATUS"

ok=no
for _ in $(seq 1 60); do
  if [ "$(listed)" = yes ]; then
    ok=yes
    break
  fi
  sleep 0.5
done
t_eq "after the refresh: discovery lists $METRIC (discovery-interval is 10m)" "yes" "$ok"
t_ok "the adapter logged the on-demand discovery refresh" \
  grep -q "refresh requested for an unknown resource" "$ADAPTER_LOG"

adapter_fetch "$BY_NAME"
t_eq "by-name request for gpuworkloads.ml.example.com/bert-0: 200" "200" "$R_STATUS"
t_json "by-name answer: describedObject is the GPUWorkload ml/bert-0" "$R_BODY" \
  '.items[0].describedObject | "\(.kind) \(.apiVersion) \(.namespace)/\(.name)"' \
  "GPUWorkload ml.example.com/v1alpha1 ml/bert-0"
t_json "by-name answer: metric name and value from Prometheus" "$R_BODY" \
  '"\(.items[0].metric.name) \(.items[0].value)"' "gpu_workload_util $want"

adapter_fetch "$G/namespaces/ml/gpuworkloads.ml.example.com/bert-0/no_such_metric"
t_eq "an unknown metric on the now-known resource: 404" "404" "$R_STATUS"

t_summary
