#!/usr/bin/env bash
# test_groups.sh: each API group is optional. With a config that has rules, externalRules and
# resourceRules (written below over the synthetic DCGM data), /apis lists exactly the three groups;
# each --disable-*-metrics flag takes its group out of /, /apis, /apis/<group>, /apis/<group>/<v>
# (404 Status) and makes its metric paths answer 404 Status, while the other groups keep
# answering; a config with only `rules` lists only custom.metrics.k8s.io. Also: every ```yaml
# block of docs/configuration.md that starts with rules:, externalRules: or resourceRules: passes
# the adapter's --check-config. Listing and 404s only: values are tested by
# test_custom_metrics.sh, test_external_metrics.sh and test_resource_metrics.sh.
# Real Prometheus (promtool-backfilled DCGM data) and the fake kube-apiserver (recorded fixtures).
# asan: no
# shellcheck disable=SC2119 # gen_dcgm and stop_adapter are called without their optional args
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

bin=$(cma_adapter_bin)
tmp=$(cma_tmp)

# --- docs/configuration.md: every rule-file example loads -----------------------------------------
python3 - docs/configuration.md "$tmp/doc-yaml" <<'PY'
import os, re, sys
text = open(sys.argv[1], encoding="utf-8").read()
out = sys.argv[2]
os.makedirs(out, exist_ok=True)
n = 0
for m in re.finditer(r"^```yaml\n(.*?)^```", text, re.S | re.M):
    block = m.group(1)
    if re.match(r"(rules|externalRules|resourceRules):", block):
        n += 1
        line = text.count("\n", 0, m.start()) + 2
        with open(os.path.join(out, "block-%02d-line-%d.yaml" % (n, line)), "w") as f:
            f.write(block)
PY
n_blocks=0
for f in "$tmp"/doc-yaml/*.yaml; do
  [ -f "$f" ] || continue
  n_blocks=$((n_blocks + 1))
  t_ok "docs/configuration.md example $(basename "$f" .yaml) passes --check-config" \
    "$bin" --config="$f" --check-config
done
# The document covers the three rule kinds, so there are several such examples of each.
t_ok "docs/configuration.md has at least 6 rule-file examples (found $n_blocks)" \
  test "$n_blocks" -ge 6
for kind in rules externalRules resourceRules; do
  t_ok "docs/configuration.md has an example starting with $kind:" \
    grep -lq "^$kind:" "$tmp"/doc-yaml/*.yaml
done

# --- the adapter with all three groups --------------------------------------------------------------
gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi

cat >"$tmp/all-groups.yaml" <<'EOF'
# custom.metrics.k8s.io: GPU utilisation per pod
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
# external.metrics.k8s.io: memory copy utilisation, per pod of the request's namespace
externalRules:
- seriesQuery: 'DCGM_FI_DEV_MEM_COPY_UTIL{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (pod)
# metrics.k8s.io: GPU figures standing in for CPU and memory (only listing is tested here)
resourceRules:
  cpu:
    containerQuery: sum(DCGM_FI_DEV_GPU_UTIL{<<.LabelMatchers>>}) by (<<.GroupBy>>) / 100
    nodeQuery: sum(DCGM_FI_DEV_GPU_UTIL{<<.LabelMatchers>>}) by (<<.GroupBy>>) / 100
    resources:
      overrides:
        namespace: {resource: namespace}
        pod: {resource: pod}
        Hostname: {resource: node}
    containerLabel: container
  memory:
    containerQuery: sum(DCGM_FI_DEV_FB_USED{<<.LabelMatchers>>}) by (<<.GroupBy>>) * 1048576
    nodeQuery: sum(DCGM_FI_DEV_FB_USED{<<.LabelMatchers>>}) by (<<.GroupBy>>) * 1048576
    resources:
      overrides:
        namespace: {resource: namespace}
        pod: {resource: pod}
        Hostname: {resource: node}
    containerLabel: container
  window: 1m
EOF
# Only `rules`: the first block of the file above.
sed -n '1,/^externalRules:/p' "$tmp/all-groups.yaml" | sed '$d' >"$tmp/rules-only.yaml"

C=custom.metrics.k8s.io
E=external.metrics.k8s.io
R=metrics.k8s.io
# group name → its versions, one metric path that the group's handler answers
declare -A versions=([$C]="v1beta1 v1beta2" [$E]="v1beta1" [$R]="v1beta1")
declare -A metric_path=(
  [$C]="/apis/$C/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert"
  [$E]="/apis/$E/v1beta1/namespaces/ml/DCGM_FI_DEV_MEM_COPY_UTIL"
  [$R]="/apis/$R/v1beta1/namespaces/ml/pods"
)
# more paths of each group, all of which must be 404 when the group is off
declare -A more_paths=(
  [$C]="/apis/$C/v1beta2/namespaces/ml/pods/bert-0/DCGM_FI_DEV_GPU_UTIL /apis/$C/v1beta1/nodes/gpu-node-1/DCGM_FI_DEV_GPU_UTIL /apis/$C/v1beta1/namespaces/ml/metrics/DCGM_FI_DEV_GPU_UTIL"
  [$E]="/apis/$E/v1beta1/namespaces/default/dcgm_fi_dev_mem_copy_util?labelSelector=pod%3Dbert-0"
  [$R]="/apis/$R/v1beta1/nodes /apis/$R/v1beta1/nodes/gpu-node-1 /apis/$R/v1beta1/pods /apis/$R/v1beta1/namespaces/ml/pods/bert-0"
)

# not_served_answer NAME: the last adapter_fetch is the 404 Status of a group that is not served.
not_served_answer() {
  t_eq "$1: HTTP 404" 404 "$R_STATUS"
  t_json "$1: Status Failure NotFound 404" "$R_BODY" '"\(.kind) \(.status) \(.reason) \(.code)"' \
    "Status Failure NotFound 404"
}

# check_groups LABEL "SERVED GROUPS" "OFF GROUPS": the adapter running now serves exactly SERVED.
check_groups() {
  local label=$1 served=$2 off=$3 g v p want_list want_paths
  want_list=$(tr ' ' '\n' <<<"$served" | sed '/^$/d' | sort | paste -sd' ')
  adapter_fetch /apis
  t_eq "$label: /apis answers 200" 200 "$R_STATUS"
  t_json "$label: /apis is an APIGroupList of exactly [$want_list]" "$R_BODY" \
    '"\(.kind) \([.groups[].name] | sort | join(" "))"' "APIGroupList $want_list"
  want_paths=$(for g in $served; do
    echo "/apis/$g"
    for v in ${versions[$g]}; do echo "/apis/$g/$v"; done
  done | sort | paste -sd' ')
  adapter_fetch /
  t_json "$label: / lists the paths of exactly the served groups" "$R_BODY" \
    '[.paths[] | select(startswith("/apis/"))] | sort | join(" ")' "$want_paths"
  for g in $served; do
    adapter_fetch /apis
    t_json "$label: /apis lists $g with versions [${versions[$g]}]" "$R_BODY" \
      "[.groups[] | select(.name == \"$g\") | .versions[].version] | join(\" \")" "${versions[$g]}"
    adapter_fetch "/apis/$g"
    t_eq "$label: /apis/$g answers 200" 200 "$R_STATUS"
    t_json "$label: /apis/$g is its APIGroup" "$R_BODY" '"\(.kind) \(.name)"' "APIGroup $g"
    for v in ${versions[$g]}; do
      adapter_fetch "/apis/$g/$v"
      t_eq "$label: /apis/$g/$v answers 200" 200 "$R_STATUS"
      t_json "$label: /apis/$g/$v is its APIResourceList" "$R_BODY" \
        '"\(.kind) \(.groupVersion)"' "APIResourceList $g/$v"
    done
    # Answered by the group's own handler: never the "not served" Status, and 200 with the right
    # kind. Exact values are the business of each group's own test.
    adapter_fetch "${metric_path[$g]}"
    if [ "$R_STATUS" = 404 ] && grep -q 'is not served' <<<"$R_BODY"; then
      t_fail "$label: ${metric_path[$g]} is answered by its group" "$R_BODY"
    else
      t_pass "$label: ${metric_path[$g]} is answered by its group (HTTP $R_STATUS)"
    fi
    if [ "$g" = "$C" ]; then
      t_eq "$label: custom metric by selector answers 200" 200 "$R_STATUS"
      t_json "$label: custom metric by selector has the bert pods" "$R_BODY" \
        '[.items[].describedObject.name] | sort | join(" ")' "bert-0 bert-1 bert-2"
    elif [ "$g" = "$E" ]; then
      t_eq "$label: external metric answers 200" 200 "$R_STATUS"
      t_json "$label: external metric has one item per ml pod" "$R_BODY" \
        '"\(.kind) \([.items[].metricLabels.pod] | sort | join(" "))"' \
        "ExternalMetricValueList bert-0 bert-1 bert-2 other-0"
    else
      t_eq "$label: pod metrics list answers 200" 200 "$R_STATUS"
      t_json "$label: pod metrics list is a PodMetricsList of ml pods" "$R_BODY" \
        '"\(.kind) \([.items[].metadata.namespace] | unique | join(","))"' "PodMetricsList ml"
    fi
  done
  for g in $off; do
    adapter_fetch "/apis/$g"
    not_served_answer "$label: /apis/$g"
    for v in ${versions[$g]}; do
      adapter_fetch "/apis/$g/$v"
      not_served_answer "$label: /apis/$g/$v"
    done
    for p in ${metric_path[$g]} ${more_paths[$g]}; do
      adapter_fetch "$p"
      not_served_answer "$label: $p"
      t_json "$label: $p: the message says why" "$R_BODY" \
        '.message | test("^\\S+ is not served: the config has no \\S+, or --disable-\\S+-metrics is set$")' \
        true
    done
  done
}

# run_case LABEL CONFIG "SERVED" "OFF" [FLAGS...]
run_case() {
  local label=$1 config=$2 served=$3 off=$4
  shift 4
  if ! start_adapter "$config" "$@"; then
    t_fail "$label: the adapter starts"
    return
  fi
  # Wait for the first relist so that "answered by its group" is not a 503 from an empty catalog.
  case " $served " in
    *" $C "*) wait_discovery DCGM_FI_DEV_GPU_UTIL >/dev/null ;;
    *" $E "*) wait_discovery DCGM_FI_DEV_MEM_COPY_UTIL "$E/v1beta1" >/dev/null ;;
  esac
  check_groups "$label" "$served" "$off"
  stop_adapter
  t_eq "$label: the adapter stops cleanly (exit status 0)" 0 "$?"
}

run_case "all three groups" "$tmp/all-groups.yaml" "$C $E $R" ""
run_case "--disable-custom-metrics" "$tmp/all-groups.yaml" "$E $R" "$C" --disable-custom-metrics
run_case "--disable-external-metrics (next to KEDA)" "$tmp/all-groups.yaml" "$C $R" "$E" \
  --disable-external-metrics
run_case "--disable-resource-metrics (next to metrics-server)" "$tmp/all-groups.yaml" "$C $E" "$R" \
  --disable-resource-metrics
run_case "custom only (deploy/overlays/next-to-keda flags)" "$tmp/all-groups.yaml" "$C" "$E $R" \
  --disable-external-metrics --disable-resource-metrics
run_case "config with only rules" "$tmp/rules-only.yaml" "$C" "$E $R"
run_case "--disable-external-metrics=false keeps the group" "$tmp/all-groups.yaml" "$C $E $R" "" \
  --disable-external-metrics=false

# The external discovery document lists the external metric, and the custom one does not.
if start_adapter "$tmp/all-groups.yaml"; then
  t_ok "external discovery lists DCGM_FI_DEV_MEM_COPY_UTIL" \
    wait_discovery DCGM_FI_DEV_MEM_COPY_UTIL "$E/v1beta1"
  t_json "external discovery lists only the external rule's metric" \
    "$(adapter_get "/apis/$E/v1beta1")" '[.resources[].name] | join(" ")' DCGM_FI_DEV_MEM_COPY_UTIL
  t_json "custom discovery has no external metric" "$(adapter_get "/apis/$C/v1beta1")" \
    '[.resources[].name | select(endswith("MEM_COPY_UTIL"))] | length' 0
  stop_adapter
  t_eq "the adapter stops cleanly (exit status 0)" 0 "$?"
else
  t_fail "the adapter starts with all three groups"
fi
t_summary
