#!/usr/bin/env bash
# test_values_schema.sh: deploy/helm/custom-metrics-adapter/values.schema.json (issue 24 part 4),
# with the real, pinned helm: every value of values.yaml is typed and described in the schema;
# the default values and the seven published values files for the prometheus-community chart
# (tests/fixtures/helm-values) still pass `helm lint --strict` and `helm template`; a wrong type or
# a misspelt key in each of this chart's own sections fails both, with a message naming the key.
# asan: no
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

tmp=$(cma_tmp)
if ! tools=$("$CMA_ROOT/scripts/tools.sh"); then
  t_fail "scripts/tools.sh installs the pinned helm"
  t_summary
  exit 1
fi
H=$tools/helm
export HELM_CACHE_HOME="$tmp/helm/cache" HELM_CONFIG_HOME="$tmp/helm/config" HELM_DATA_HOME="$tmp/helm/data"
chart=deploy/helm/custom-metrics-adapter

out=$(python3 - "$chart/values.yaml" "$chart/values.schema.json" <<'PY'
import json, sys, yaml
values = yaml.safe_load(open(sys.argv[1]))
schema = json.load(open(sys.argv[2]))
def walk(vals, sch, path):
    for key, val in vals.items():
        sub = (sch.get("properties") or {}).get(key)
        if sub is None:
            print(f"{path}{key}: not in the schema")
            continue
        if "description" not in sub or not ("type" in sub or "enum" in sub):
            print(f"{path}{key}: no type or no description")
        if isinstance(val, dict) and "properties" in sub:
            walk(val, sub, f"{path}{key}.")
walk(values, schema, "")
PY
)
t_eq "every value of values.yaml is typed and described in values.schema.json" "" "$out"

t_ok "helm lint --strict (default values)" "$H" lint --strict "$chart"
for f in tests/fixtures/helm-values/*.yaml; do
  n=$(basename "$f" .yaml)
  t_ok "$n (prometheus-community values): helm lint --strict" "$H" lint --strict "$chart" -f "$f"
  t_ok "$n (prometheus-community values): helm template" "$H" template r "$chart" -f "$f"
done

# wrong KEY=VALUE "MESSAGE": helm lint and helm template both fail, naming the key
wrong() {
  local set=$1 want=$2 out
  out=$("$H" lint --strict "$chart" --set "$set" 2>&1)
  if [ $? -ne 0 ] && grep -qF -- "$want" <<<"$out"; then t_pass "helm lint refuses $set: $want"; else t_fail "helm lint refuses $set: $want" "$out"; fi
  out=$("$H" template r "$chart" --set "$set" 2>&1 >/dev/null)
  if [ $? -ne 0 ] && grep -qF -- "$want" <<<"$out"; then t_pass "helm template refuses $set: $want"; else t_fail "helm template refuses $set: $want" "$out"; fi
}
wrong serviceMonitor.enabeld=true "serviceMonitor: Additional property enabeld is not allowed"
wrong serviceMonitor.enabled=yes "serviceMonitor.enabled: Invalid type. Expected: boolean, given: string"
wrong podMonitor.prometheusServiceAcount=prom "podMonitor: Additional property prometheusServiceAcount is not allowed"
wrong podMonitor.interval=soon "podMonitor.interval: Does not match pattern"
wrong prometheusRule.runbookBaseUrl=https://x "prometheusRule: Additional property runbookBaseUrl is not allowed"
wrong prometheusRule.runbookBaseURL=wiki "prometheusRule.runbookBaseURL: Does not match pattern"
wrong dashboard.labell=x "dashboard: Additional property labell is not allowed"
wrong dashboard.enabled=1 "dashboard.enabled: Invalid type. Expected: boolean, given: integer"
wrong helmTest.enable=false "helmTest: Additional property enable is not allowed"
wrong adapterImage.repo=x "adapterImage: Additional property repo is not allowed"
wrong adapterImage.pullPolicy=Sometimes "adapterImage.pullPolicy: adapterImage.pullPolicy must be one of the following"
wrong adapterImage.digest=latest "adapterImage.digest: Does not match pattern"
wrong productionDefaults.spreadAcrossNode=true "productionDefaults: Additional property spreadAcrossNode is not allowed"
wrong productionDefaults.spreadAcrossNodes=maybe "productionDefaults.spreadAcrossNodes: Invalid type"
wrong metricRules.enable=true "metricRules: Additional property enable is not allowed"
wrong apiGroups.custm=true "apiGroups: Additional property custm is not allowed"
wrong replicas=two "replicas: Invalid type. Expected: integer, given: string"

t_summary
