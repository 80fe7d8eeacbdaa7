#!/usr/bin/env bash
# test_victoria_metrics.sh: the adapter against VictoriaMetrics' Prometheus API: the same synthetic DCGM data in a real Prometheus and in VictoriaMetrics give the same discovery and the same by-selector, by-name, node and namespace values (and match expected.json); the one difference is the NaN series VictoriaMetrics does not store.
# asan: no
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_victoria_metrics "$DCGM_DIR/dcgm.prom" ||
  ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus, VictoriaMetrics and the fake kube-apiserver"
  t_summary
  exit 1
fi
G=/apis/custom.metrics.k8s.io/v1beta1
PATHS=()
for m in DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_MEM_COPY_UTIL DCGM_FI_DEV_FB_USED DCGM_FI_PROF_GR_ENGINE_ACTIVE; do
  PATHS+=("$G/namespaces/ml/pods/*/$m?labelSelector=app%3Dbert"
    "$G/namespaces/ml/pods/*/$m?labelSelector=tier%3Dinference"
    "$G/namespaces/vision/pods/*/$m"
    "$G/namespaces/default/pods/cuda-test-0/$m"
    "$G/namespaces/ml/pods/*/$m?labelSelector=app%3Dbert&metricLabelSelector=gpu%3D0"
    "$G/nodes/*/$m"
    "$G/namespaces/vision/metrics/$m")
done

# collect NAME: every path's status and "pod value" lines into $CMA_TMP/NAME.answers; discovery
# names into $CMA_TMP/NAME.discovery.
collect() {
  local out="$CMA_TMP/$1.answers" p
  : >"$out"
  for p in "${PATHS[@]}"; do
    adapter_fetch "$p"
    printf '%s %s: %s\n' "$R_STATUS" "$p" "$(item_values "$R_BODY" 2>/dev/null | paste -sd' ')" >>"$out"
  done
  adapter_get "$G" | jq -r '[.resources[] | "\(.name) \(.namespaced)"] | sort[]' >"$CMA_TMP/$1.discovery"
}

if start_adapter config/gpu-dcgm.yaml && wait_discovery DCGM_FI_PROF_GR_ENGINE_ACTIVE; then
  collect prometheus
  adapter_fetch "$G/namespaces/ml/metrics/DCGM_FI_PROF_GR_ENGINE_ACTIVE"
  prom_ns_nan="$R_STATUS"
  stop_adapter
else
  t_fail "adapter against Prometheus"
fi

if PROM_URL=$VM_URL start_adapter config/gpu-dcgm.yaml; then
  t_ok "VictoriaMetrics: discovery through its /api/v1/series" wait_discovery DCGM_FI_PROF_GR_ENGINE_ACTIVE
  collect victoria-metrics
  t_ok "VictoriaMetrics: the relist lists the 7 GR_ENGINE_ACTIVE series it stored (not the NaN one)" \
    wait_adapter_log 'discovery: 7 series for DCGM_FI_PROF_GR_ENGINE_ACTIVE' 1
  t_eq "oracle: 7 GR_ENGINE_ACTIVE pod series are in VictoriaMetrics" 7 \
    "$(jq '[.series[] | select(.name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE" and .labels.pod != null and .in_victoria_metrics)] | length' "$DCGM_DIR/expected.json")"
  t_eq "VictoriaMetrics: the same discovery document as with Prometheus" \
    "$(cat "$CMA_TMP/prometheus.discovery")" "$(cat "$CMA_TMP/victoria-metrics.discovery")"
  t_eq "VictoriaMetrics: 12 discovery entries" 12 "$(wc -l <"$CMA_TMP/victoria-metrics.discovery")"
  # Every answer but one is the same; nodes/*/GR_ENGINE_ACTIVE differs (see the NaN part below).
  nan_path="$G/nodes/*/DCGM_FI_PROF_GR_ENGINE_ACTIVE"
  i=0
  while IFS= read -r line; do
    i=$((i + 1))
    [[ $line == *" $nan_path:"* ]] && continue
    t_eq "same answer as Prometheus: ${line%%:*}" "$line" "$(sed -n "${i}p" "$CMA_TMP/victoria-metrics.answers")"
  done <"$CMA_TMP/prometheus.answers"
  t_eq "as many answers as paths" "${#PATHS[@]}" "$i"
  t_eq "every answer was a 200" "200" "$(cut -d' ' -f1 "$CMA_TMP/victoria-metrics.answers" | sort -u | paste -sd' ')"

  # The values are the generated ones, not just equal to each other.
  t_eq "VictoriaMetrics: bert pods' GPU util equals expected.json" \
    "$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod '.labels.namespace == "ml" and (.labels.pod // "" | startswith("bert-"))' | paste -sd' ')" \
    "$(grep -F "$G/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert:" "$CMA_TMP/victoria-metrics.answers" | sed 's/^.*: //')"
  t_eq "VictoriaMetrics: node memory sums equal expected.json" \
    "$(expected_agg DCGM_FI_DEV_FB_USED sum Hostname | paste -sd' ')" \
    "$(grep -F "$G/nodes/*/DCGM_FI_DEV_FB_USED:" "$CMA_TMP/victoria-metrics.answers" | sed 's/^.*: //')"
  t_eq "NaN: other-0 is left out with both backends" 0 \
    "$(grep -c 'other-0' <(grep -F 'DCGM_FI_PROF_GR_ENGINE_ACTIVE' "$CMA_TMP/victoria-metrics.answers" "$CMA_TMP/prometheus.answers"))"

  # The one difference: Prometheus keeps other-0's NaN sample, so every average over it is NaN and
  # left out (gpu-node-2 among the nodes, namespace ml: 404); VictoriaMetrics never stored it, so
  # it averages the other GPUs.
  t_eq "NaN difference: Prometheus leaves gpu-node-2 out of nodes/*" \
    "200 $nan_path: $(expected_agg DCGM_FI_PROF_GR_ENGINE_ACTIVE avg Hostname | paste -sd' ')" \
    "$(grep -F "$nan_path:" "$CMA_TMP/prometheus.answers")"
  t_eq "NaN difference: VictoriaMetrics averages gpu-node-2 without the NaN series" \
    "200 $nan_path: $(expected_agg DCGM_FI_PROF_GR_ENGINE_ACTIVE avg Hostname '.in_victoria_metrics' | paste -sd' ')" \
    "$(grep -F "$nan_path:" "$CMA_TMP/victoria-metrics.answers")"
  adapter_fetch "$G/namespaces/ml/metrics/DCGM_FI_PROF_GR_ENGINE_ACTIVE"
  t_eq "NaN difference: Prometheus's ml average is NaN (404)" 404 "${prom_ns_nan:-unset}"
  t_eq "NaN difference: VictoriaMetrics averages ml without the NaN series" \
    "$(expected_agg DCGM_FI_PROF_GR_ENGINE_ACTIVE avg namespace '.labels.namespace == "ml" and .in_victoria_metrics')" \
    "$(item_values "$R_BODY")"
  stop_adapter
  t_eq "adapter against VictoriaMetrics exits 0 on SIGTERM" 0 "$?"
else
  t_fail "start_adapter against VictoriaMetrics"
fi

t_summary
