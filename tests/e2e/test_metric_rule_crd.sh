#!/usr/bin/env bash
# The MetricRule resource (issue 23; docs/metric-rules.md), offline with the pinned kubectl and helm
# (scripts/tools.sh) and the fake kube-apiserver that stands in for the cluster's:
#  1. Packaging: deploy/components/metric-rules is a kustomize Component in overlays/all; the CRD
#     file is byte-identical in deploy/ and the chart's crds/, and the CRD kubectl kustomize and
#     helm template --include-crds render is the same object.
#  2. The CRD: structural (every node typed, no preserve-unknown-fields anywhere), the group, kind,
#     short name mr, v1alpha1 served and stored, the status subresource, the printer columns
#     Accepted, Metrics, Age; the rule schema is the same for rules and externalRules but for
#     externalRules' resources.namespaced; every field described (what kubectl explain prints).
#  3. Validation as kube-apiserver does it (tests/lib/crd_validate.py, python3-jsonschema against
#     the openAPIV3Schema, unknown fields refused as kubectl's Strict field validation does):
#     tests/fixtures/metric-rules/good-* validate, bad-* fail naming the field; every MetricRule in
#     the yaml blocks of docs/*.md validates; the rules/externalRules sections of the real
#     prometheus-adapter configs in ../shared/fixtures/prometheus-adapter-configs, pasted unchanged
#     (text indented under spec:), validate, except the two blocks the CRD refuses on purpose.
#  4. RBAC: the aggregation labels and verbs of the ClusterRoles (admin/edit manage, view reads,
#     view reads the metrics groups, no team role writes status) and the adapter's own rights, in
#     deploy/ and in the chart under its metricRules values; --enable-metric-rules in the
#     Deployment of deploy/overlays/all and of the chart while metricRules.enabled (not otherwise).
#  5. The fake kube-apiserver's MetricRule paths (--metric-rules): kubectl discovers the resource
#     (short name mr), explains its fields (/openapi/v3), creates MetricRules (--dry-run=server:
#     Strict unknown fields, 422 naming the field) and lists them (the printer columns' Table,
#     ACCEPTED and METRICS from status); LIST shape, limit/continue; WATCH with
#     synthetic ADDED, MODIFIED/DELETED, BOOKMARK, a dropped watch (clean and cut), 410 Gone on
#     watch, continue and Exact list; status subresource PUT/PATCH (409 on a stale
#     resourceVersion, 415, 422 naming the field, spec untouched, no-op writes keep the
#     resourceVersion) and the status log.
# asan: no
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh
tmp=$(cma_tmp)
chart=deploy/helm/custom-metrics-adapter
crd=deploy/components/metric-rules/crd.yaml
validate=(python3 tests/lib/crd_validate.py)
if ! tools=$("$CMA_ROOT/scripts/tools.sh"); then
  t_fail "scripts/tools.sh installs the pinned helm and kubectl"
  t_summary
  exit 1
fi
H=$tools/helm
KUBECTL=$tools/kubectl
export HELM_CACHE_HOME="$tmp/helm/cache" HELM_CONFIG_HOME="$tmp/helm/config" \
  HELM_DATA_HOME="$tmp/helm/data"
must() {
  local failed=$T_FAIL
  t_ok "$@"
  [ "$T_FAIL" -eq "$failed" ]
}
# py SCRIPT ARGS...: runs a Python snippet from stdin.
py() { python3 - "$@"; }

# --- 1. packaging ------------------------------------------------------------------------------------
t_eq "deploy/components/metric-rules is a kustomize Component" "kustomize.config.k8s.io/v1alpha1 Component" \
  "$(py deploy/components/metric-rules/kustomization.yaml <<<'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); print(d["apiVersion"], d["kind"])')"
t_ok "deploy/overlays/all uses the metric-rules component" \
  grep -qx -- '- ../../components/metric-rules' deploy/overlays/all/kustomization.yaml
t_ok "the CRD file is identical in deploy/ and the chart's crds/" cmp "$crd" "$chart/crds/metricrules.yaml"
mkdir -p "$tmp/comp"
printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ncomponents:\n- %s\n' \
  "$(realpath --relative-to="$tmp/comp" deploy/components/metric-rules)" >"$tmp/comp/kustomization.yaml"
must "kubectl kustomize the component alone" "$KUBECTL" kustomize "$tmp/comp" -o "$tmp/component.yaml"
must "kubectl kustomize deploy/overlays/all" "$KUBECTL" kustomize deploy/overlays/all -o "$tmp/all.yaml"
must "helm template --include-crds (default values)" \
  "$H" template custom-metrics-adapter "$chart" --namespace custom-metrics --include-crds --output-dir "$tmp/helm-out"
cat "$tmp"/helm-out/custom-metrics-adapter/crds/*.yaml "$tmp"/helm-out/custom-metrics-adapter/templates/*.yaml \
  >"$tmp/helm.yaml" 2>/dev/null
"$H" template custom-metrics-adapter "$chart" --namespace custom-metrics >"$tmp/helm-nocrds.yaml" 2>&1
t_eq "the same CRD object from the component, overlays/all, the chart (--include-crds) and the file" \
  "same same same" "$(py "$crd" "$tmp/component.yaml" "$tmp/all.yaml" "$tmp/helm.yaml" <<'PY'
import sys, yaml
def crds(path):
    return [d for d in yaml.safe_load_all(open(path)) if d and d.get("kind") == "CustomResourceDefinition"]
want = crds(sys.argv[1])
print(" ".join("same" if crds(p) == want else "different (%d CRDs)" % len(crds(p)) for p in sys.argv[2:]))
PY
)"
t_eq "helm template without --include-crds renders no CRD (Helm installs crds/ itself)" 0 \
  "$(grep -c '^kind: CustomResourceDefinition' "$tmp/helm-nocrds.yaml")"

# --- 2. the CRD ----------------------------------------------------------------------------------------
t_eq "the CRD's schema is structural (no x-kubernetes-preserve-unknown-fields anywhere)" structural \
  "$("${validate[@]}" structural "$crd" 2>&1)"
t_eq "group, names, scope, versions, status subresource, printer columns" \
  "metricrules.metrics.custom-metrics-adapter.dev metrics.custom-metrics-adapter.dev Namespaced MetricRule MetricRuleList metricrules metricrule mr | v1alpha1 served storage status | Accepted:string:.status.conditions[?(@.type==\"Accepted\")].status Metrics:string:.status.metrics Age:date:.metadata.creationTimestamp" \
  "$(py "$crd" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
s, n = c["spec"], c["spec"]["names"]
out = [c["metadata"]["name"], s["group"], s["scope"], n["kind"], n["listKind"], n["plural"], n["singular"],
       ",".join(n["shortNames"]), "|"]
for v in s["versions"]:
    out += [v["name"], "served" if v["served"] else "-", "storage" if v["storage"] else "-",
            ",".join(sorted(v.get("subresources", {}))), "|"]
    out += ["%s:%s:%s" % (x["name"], x["type"], x["jsonPath"]) for x in v["additionalPrinterColumns"]]
print(" ".join(out))
PY
)"
t_eq "rules[] and externalRules[] items: the same schema but for resources.namespaced (externalRules: only true)" \
  "same; externalRules namespaced enum [True]; rules namespaced enum None" "$(py "$crd" <<'PY'
import copy, sys, yaml
spec = yaml.safe_load(open(sys.argv[1]))["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
a, b = copy.deepcopy(spec["rules"]["items"]), copy.deepcopy(spec["externalRules"]["items"])
na, nb = a["properties"]["resources"]["properties"].pop("namespaced"), b["properties"]["resources"]["properties"].pop("namespaced")
print("%s; externalRules namespaced enum %s; rules namespaced enum %s" % (
    "same" if a == b else "different", nb.get("enum"), na.get("enum")))
PY
)"
t_eq "required as prometheus-adapter needs them: seriesQuery and metricsQuery, overrides' resource" \
  "seriesQuery,metricsQuery resource" "$(py "$crd" <<'PY'
import sys, yaml
item = yaml.safe_load(open(sys.argv[1]))["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["rules"]["items"]
print(",".join(item["required"]), ",".join(item["properties"]["resources"]["properties"]["overrides"]["additionalProperties"]["required"]))
PY
)"
# kubectl explain prints each field's description: every field under spec and status has one.
t_eq "every field of spec and status has a description (kubectl explain metricrules.spec...)" none \
  "$(py "$crd" <<'PY'
import sys, yaml
root = yaml.safe_load(open(sys.argv[1]))["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
missing = []
def walk(node, path):
    if path.count(".") > 0 and not node.get("description") and not path.endswith("[*]"):
        missing.append(path)
    for k, v in (node.get("properties") or {}).items():
        walk(v, path + "." + k)
    if isinstance(node.get("items"), dict):
        walk(node["items"], path + "[*]")
    if isinstance(node.get("additionalProperties"), dict):
        walk(node["additionalProperties"], path + "[*]")
for top in ("spec", "status"):
    walk(root["properties"][top], top)
print(" ".join(m for m in missing if not m.startswith("status.conditions[*].")) or "none")
PY
)"

# --- 3. validation -----------------------------------------------------------------------------------
n_good=0
for f in tests/fixtures/metric-rules/good-*.yaml; do
  n_good=$((n_good + 1))
  out=$("${validate[@]}" validate "$crd" "$f" --with-status 2>&1)
  t_eq "$(basename "$f") validates" ok "${out%% *}"
  [ "${out%% *}" = ok ] || printf '     %s\n' "$out"
done
n_bad=0
for f in tests/fixtures/metric-rules/bad-*.yaml; do
  n_bad=$((n_bad + 1))
  want=$(sed -n 's/^# expect: //p' "$f")
  out=$("${validate[@]}" validate "$crd" "$f" --with-status 2>&1)
  if [ -z "$want" ]; then
    t_fail "$(basename "$f") has an '# expect:' line"
  elif [ "${out%% *}" = invalid ] && grep -qF -- "$want" <<<"$out"; then
    t_pass "$(basename "$f") is refused: $want"
  else
    t_fail "$(basename "$f") is refused naming the field" "expected: $want" "actual:   $out"
  fi
done
t_ok "at least 3 good and 6 bad examples ($n_good, $n_bad)" test "$n_good" -ge 3 -a "$n_bad" -ge 6
# More than a list can hold, and a name over 63 characters (generated: too long for a fixture).
py "$tmp/too-many.yaml" <<'PY'
import sys, yaml
rule = {"seriesQuery": 'up{namespace!=""}', "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>})"}
docs = [{"apiVersion": "metrics.custom-metrics-adapter.dev/v1alpha1", "kind": "MetricRule",
         "metadata": {"name": "fifty-one", "namespace": "shop"}, "spec": {"rules": [rule] * 51}},
        {"apiVersion": "metrics.custom-metrics-adapter.dev/v1alpha1", "kind": "MetricRule",
         "metadata": {"name": "long-as", "namespace": "shop"},
         "spec": {"externalRules": [dict(rule, name={"as": "q" * 254})]}}]
yaml.safe_dump_all(docs, open(sys.argv[1], "w"))
PY
out=$("${validate[@]}" validate "$crd" "$tmp/too-many.yaml" 2>&1)
t_ok "51 rules are refused (maxItems 50)" grep -qF 'spec.rules: Too many: 51: must have at most 50 items' <<<"$out"
t_ok "a 254-character name.as is refused (maxLength 253)" \
  grep -qF 'spec.externalRules[0].name.as: Too long: may not be more than 253 bytes' <<<"$out"
# The examples in the docs
out=$("${validate[@]}" validate "$crd" docs/*.md --with-status 2>&1)
n_docs=$(grep -c '^ok ' <<<"$out")
t_eq "every MetricRule in the yaml blocks of docs/*.md validates" "" "$(grep -v '^ok ' <<<"$out")"
t_ok "the docs hold at least 3 MetricRules ($n_docs)" test "$n_docs" -ge 3
# Real prometheus-adapter configs: their rules/externalRules text, unchanged, indented under spec:.
# Refused on purpose: 06a's `rules: [{}]` (no seriesQuery: prometheus-adapter loads it and every
# relist fails) and an external rule with namespaced: false (it would span namespaces).
t_eq "prometheus-adapter configs pasted unchanged into a MetricRule validate (but the two refused on purpose)" \
  "01-helm-chart-default ok
02-helm-chart-resource-external ok
05b-sample-config-quotes-fixed invalid spec.externalRules[1].resources.namespaced: Unsupported value: false
06-prometheus-adapter-config-walkthrough ok
06a-walkthrough-first-block invalid spec.rules[0].metricsQuery: Required value; spec.rules[0].seriesQuery: Required value
07-prometheus-adapter-walkthrough-configmap ok
08-prometheus-adapter-externalmetrics-doc invalid spec.externalRules[1].resources.namespaced: Unsupported value: false
09-prometheus-adapter-config-gen-default ok" \
  "$(py ../shared/fixtures/prometheus-adapter-configs "$tmp/pasted" <<'PY'
import glob, os, re, subprocess, sys, yaml
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
for path in sorted(glob.glob(os.path.join(src, "*.yaml"))):
    text = open(path).read()
    try:
        yaml.safe_load(text)
    except yaml.YAMLError:
        continue  # 05: invalid YAML as published (prometheus-adapter refuses it too)
    # the top-level sections, as text: a line at column 0 that is not a comment starts one
    sections, current = {}, None
    for line in text.splitlines():
        m = re.match(r'^"?([A-Za-z]+)"?:', line)
        if m:
            current = m.group(1)
        if current and not line.startswith("#"):
            sections.setdefault(current, []).append(line)
    pasted = [l for k in ("rules", "externalRules") for l in sections.get(k, [])]
    if not pasted:
        continue
    name = os.path.basename(path)[:-5]
    doc = ("apiVersion: metrics.custom-metrics-adapter.dev/v1alpha1\nkind: MetricRule\nmetadata:\n"
           "  name: pasted\n  namespace: shop\nspec:\n" + "".join("  " + l + "\n" for l in pasted))
    target = os.path.join(out, name + ".yaml")
    open(target, "w").write(doc)
    original = yaml.safe_load(text)
    got = yaml.safe_load(doc)["spec"]
    if any(got.get(k) != original.get(k) for k in ("rules", "externalRules")):
        print(name, "the pasted text does not hold the same rules")
        continue
    res = subprocess.run(["python3", "tests/lib/crd_validate.py", "validate",
                          "deploy/components/metric-rules/crd.yaml", target],
                         capture_output=True, text=True).stdout.strip()
    if res.startswith("ok "):
        print(name, "ok")
    else:
        print(name, "invalid", re.sub(r"(Unsupported value: false)[^;]*", r"\1", res.split(": ", 1)[1]))
PY
)"

# --- 4. RBAC ---------------------------------------------------------------------------------------
rbac_py="$tmp/rbac.py"
cat >"$rbac_py" <<'PY'
"""Prints what the rendered RBAC grants about MetricRules and the metrics groups, one line each."""
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
G = "metrics.custom-metrics-adapter.dev"
roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}

def grants(role):
    out = []
    for r in role.get("rules", []):
        for g in r.get("apiGroups", []):
            for res in r.get("resources", []):
                out.append("%s/%s:%s" % (g or "core", res, ",".join(sorted(r["verbs"]))))
    return " ".join(sorted(out))

lines = []
for name, role in sorted(roles.items()):
    labels = sorted(k.rsplit("/", 1)[1][len("aggregate-to-"):] for k, v in role["metadata"].get("labels", {}).items()
                    if k.startswith("rbac.authorization.k8s.io/aggregate-to-") and v == "true")
    text = grants(role)
    if labels and (G in text or "custom.metrics.k8s.io" in text or "external.metrics.k8s.io" in text):
        lines.append("aggregated[%s] %s" % (",".join(labels), text))
sa_roles = set()
for b in docs:
    if b["kind"] == "ClusterRoleBinding" and any(s.get("kind") == "ServiceAccount" and s.get("name") == sys.argv[2]
                                                  for s in b["subjects"]):
        sa_roles.add(b["roleRef"]["name"])
for name in sorted(sa_roles):
    if G in grants(roles.get(name, {})):
        lines.append("adapter %s" % grants(roles[name]))
status_writers = sorted(n for n, r in roles.items() if any(
    "metricrules/status" in x.get("resources", []) and set(x["verbs"]) & {"update", "patch", "create"}
    for x in r.get("rules", [])) and r["metadata"].get("labels", {}).get("rbac.authorization.k8s.io/aggregate-to-edit"))
lines.append("team roles writing status: %s" % (" ".join(status_writers) or "none"))
args = [a for d in docs if d["kind"] == "Deployment" for c in d["spec"]["template"]["spec"]["containers"]
        for a in c.get("args", [])]
lines.append("deployment args with --enable-metric-rules: %d" % sum(1 for a in args if a.startswith("--enable-metric-rules")))
print("\n".join(lines))
PY
G_MR=metrics.custom-metrics-adapter.dev
edit_line="aggregated[admin,edit] $G_MR/metricrules:create,delete,deletecollection,get,list,patch,update,watch"
view_line="aggregated[view] $G_MR/metricrules/status:get,list,watch $G_MR/metricrules:get,list,watch"
adapter_line="adapter core/namespaces:get,list,watch $G_MR/metricrules/status:get,patch,update $G_MR/metricrules:get,list,watch"
read_both="aggregated[view] custom.metrics.k8s.io/*:get,list external.metrics.k8s.io/*:get,list"
read_custom="aggregated[view] custom.metrics.k8s.io/*:get,list"
tail_lines="team roles writing status: none
deployment args with --enable-metric-rules: 1"
tail_off="team roles writing status: none
deployment args with --enable-metric-rules: 0"
t_eq "deploy/overlays/all: admin/edit manage MetricRules, view reads them and the metrics groups, the adapter lists/watches and writes status" \
  "$edit_line
$view_line
$read_both
$adapter_line
$tail_lines" "$(python3 "$rbac_py" "$tmp/all.yaml" custom-metrics-adapter)"
t_eq "chart, default values: the same, metrics read limited to the group it registers (custom)" \
  "$edit_line
$view_line
$read_custom
$adapter_line
$tail_lines" "$(python3 "$rbac_py" "$tmp/helm-nocrds.yaml" custom-metrics-adapter)"
# chart_rbac LABEL EXPECTED HELM_ARGS...
chart_rbac() {
  local label=$1 want=$2 out="$tmp/chart-${1//[^a-z0-9]/-}.yaml"
  shift 2
  must "chart, $label: helm template" "$H" template cma "$chart" --namespace metrics "$@" || return
  "$H" template cma "$chart" --namespace metrics "$@" >"$out" 2>&1
  t_eq "chart, $label: MetricRule RBAC" "$want" "$(python3 "$rbac_py" "$out" cma-custom-metrics-adapter)"
}
ext_values="$tmp/external.values.yaml"
printf 'rules:\n  external:\n  - seriesQuery: %s\n    metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>})\n' \
  "'queue_depth{namespace!=\"\"}'" >"$ext_values"
chart_rbac "with external rules" "$edit_line
$view_line
$read_both
$adapter_line
$tail_lines" -f "$ext_values"
chart_rbac "metricRules.enabled=false" "$edit_line
$view_line
$read_custom
$tail_off" --set metricRules.enabled=false
chart_rbac "metricRules.aggregateToDefaultRoles=false" "$read_custom
$adapter_line
$tail_lines" --set metricRules.aggregateToDefaultRoles=false
chart_rbac "metricRules.metricsReadersAggregateToView=false" "$edit_line
$view_line
$adapter_line
$tail_lines" --set metricRules.metricsReadersAggregateToView=false
chart_rbac "rbac.create=false" "$tail_lines" --set rbac.create=false
chart_rbac "no custom/external group registered: no metrics-read role" "$edit_line
$view_line
$adapter_line
$tail_lines" --set rules.default=false
t_ok "helm lint --strict with every metricRules value off" "$H" lint --strict "$chart" \
  --set metricRules.enabled=false --set metricRules.aggregateToDefaultRoles=false \
  --set metricRules.metricsReadersAggregateToView=false

# --- 5. the fake kube-apiserver's MetricRules --------------------------------------------------------
if ! start_fake_kube "" --metric-rules "$CMA_ROOT/$crd"; then
  t_fail "the fake kube-apiserver starts with --metric-rules"
  t_summary
  exit 1
fi
K=("$KUBECTL" --kubeconfig "$KUBE_KUBECONFIG" --cache-dir "$tmp/kube-cache") # discovery cache in this run's temp dir
BASE="$KUBE_URL/apis/metrics.custom-metrics-adapter.dev/v1alpha1"
# kcurl URL [CURL_ARGS...]: body on stdout, HTTP status in $tmp/code.
kcurl() {
  local url=$1
  shift
  curl -s --max-time 20 --cacert "$KUBE_CA" -H 'Authorization: Bearer fake-admin' -o "$tmp/body" \
    -w '%{http_code}' "$@" "$url" >"$tmp/code"
  cat "$tmp/body"
}
control() { kcurl "$KUBE_URL/__fake/metricrules/$1" "${@:2}"; }
apply() { control apply -X POST -H 'Content-Type: application/yaml' --data-binary "@$1"; }

t_eq "kubectl api-resources: metricrules, short name mr, namespaced, kind MetricRule" \
  "metricrules mr metrics.custom-metrics-adapter.dev/v1alpha1 true MetricRule" \
  "$("${K[@]}" api-resources --api-group=metrics.custom-metrics-adapter.dev --no-headers 2>"$tmp/kubectl.err" | tr -s ' ')"
t_eq "kubectl explain mr.spec.rules.metricsQuery (the fake publishes the CRD's schema in /openapi/v3)" \
  "FIELD: metricsQuery <string> PromQL Go template" \
  "$("${K[@]}" explain mr.spec.rules.metricsQuery 2>"$tmp/kubectl.err" | grep -E '^FIELD|PromQL' | sed 's/^ *//; s/ (<<.*//' | paste -sd' ')"
t_eq "kubectl explain metricrules.status: its three fields" "conditions metrics observedGeneration" \
  "$("${K[@]}" explain metricrules.status 2>"$tmp/kubectl.err" | sed -n 's/^  \([a-zA-Z]*\)\t.*/\1/p' | paste -sd' ')"
t_eq "kubectl create --dry-run=server: a good example passes, nothing is stored" \
  "metricrule.metrics.custom-metrics-adapter.dev/queue-depth|0" \
  "$("${K[@]}" create --dry-run=server -o name -f tests/fixtures/metric-rules/good-queue-depth.yaml 2>"$tmp/kubectl.err")|$(kcurl "$BASE/metricrules" | jq '.items | length')"
t_ok "kubectl create --dry-run=server: an unknown field is refused (kubectl sends fieldValidation=Strict)" \
  grep -qF 'strict decoding error: unknown field "spec.rules[0].name.metricsQuery"' \
  <<<"$("${K[@]}" create --dry-run=server -f tests/fixtures/metric-rules/bad-query-under-name.yaml 2>&1)"
t_ok "kubectl create --dry-run=server: what the schema refuses is a 422 naming the field" \
  grep -qF 'The MetricRule "filter-both" is invalid: spec.rules[0].seriesFilters[0]' \
  <<<"$("${K[@]}" create --dry-run=server -f tests/fixtures/metric-rules/bad-filter-both.yaml 2>&1)"
t_ok "kubectl create --dry-run=client accepts the good examples" \
  "${K[@]}" create --dry-run=client --validate=false -o name -f tests/fixtures/metric-rules/good-queue-depth.yaml \
  -f tests/fixtures/metric-rules/good-gpu-custom.yaml
t_eq "kubectl create (POST) creates a MetricRule: 201" "metricrule.metrics.custom-metrics-adapter.dev/gpu created" \
  "$("${K[@]}" create --validate=false -f tests/fixtures/metric-rules/good-gpu-custom.yaml 2>"$tmp/kubectl.err")"
t_ok "kubectl create of the same MetricRule again: AlreadyExists" \
  grep -qF 'metricrules.metrics.custom-metrics-adapter.dev "gpu" already exists' \
  <<<"$("${K[@]}" create --validate=false -f tests/fixtures/metric-rules/good-gpu-custom.yaml 2>&1 | grep -v memcache.go)"
out=$(apply tests/fixtures/metric-rules/good-queue-depth.yaml)
t_json "control apply: ADDED, generation 1" "$out" '"\(.event) \(.generation)"' "ADDED 1"
out=$(apply tests/fixtures/metric-rules/bad-query-under-name.yaml)
t_eq "control apply (as kubectl apply: Strict) of an unknown field: 400 strict decoding error naming it" \
  "400 BadRequest MetricRule in version \"v1alpha1\" cannot be handled as a MetricRule: strict decoding error: unknown field \"spec.rules[0].name.metricsQuery\"" \
  "$(cat "$tmp/code") $(jq -r '"\(.reason) \(.message)"' <<<"$out")"
out=$(apply tests/fixtures/metric-rules/bad-missing-metricsquery.yaml)
t_eq "control apply of a rule without metricsQuery: 422 Invalid naming the field" \
  "422 Invalid MetricRule.metrics.custom-metrics-adapter.dev \"no-query\" is invalid: spec.rules[0].metricsQuery: Required value spec.rules[0].metricsQuery:FieldValueRequired" \
  "$(cat "$tmp/code") $(jq -r '"\(.reason) \(.message) \(.details.causes[0].field):\(.details.causes[0].reason)"' <<<"$out")"
t_eq "kubectl get mr -A -o name" "metricrule.metrics.custom-metrics-adapter.dev/gpu
metricrule.metrics.custom-metrics-adapter.dev/queue-depth" "$("${K[@]}" get mr -A -o name 2>"$tmp/kubectl.err")"
t_eq "kubectl get mr -n shop (one namespace)" "queue-depth" \
  "$("${K[@]}" get mr -n shop -o jsonpath='{.items[*].metadata.name}' 2>"$tmp/kubectl.err")"

# LIST: the unstructured list shape (keys sorted, continue "" on the last page)
list=$(kcurl "$BASE/metricrules")
rv=$(jq -r .metadata.resourceVersion <<<"$list")
t_eq "LIST: {apiVersion, items, kind MetricRuleList, metadata {continue \"\", resourceVersion}}, keys sorted" \
  "200 apiVersion,items,kind,metadata continue,resourceVersion MetricRuleList  2 true" \
  "$(cat "$tmp/code") $(jq -r '"\(keys_unsorted | join(",")) \(.metadata | keys_unsorted | join(",")) \(.kind) \(.metadata.continue) \(.items | length) \(.items | all(.apiVersion == "metrics.custom-metrics-adapter.dev/v1alpha1" and .kind == "MetricRule" and (keys_unsorted == (keys_unsorted | sort))))"' <<<"$list")"
t_json "LIST items carry metadata generation/uid/resourceVersion/creationTimestamp" "$list" \
  '[.items[].metadata | has("generation") and has("uid") and has("resourceVersion") and has("creationTimestamp")] | all' true
page1=$(kcurl "$BASE/metricrules?limit=1")
t_json "LIST limit=1: one item, a continue token, remainingItemCount 1, the same resourceVersion" "$page1" \
  '"\(.items | length) \(.metadata.continue != "") \(.metadata.remainingItemCount) \(.metadata.resourceVersion)"' "1 true 1 $rv"
cont=$(jq -r .metadata.continue <<<"$page1")
page2=$(kcurl "$BASE/metricrules?limit=1&continue=$cont")
t_eq "LIST continue: the next item, continue \"\" on the last page" \
  "gpu queue-depth|" \
  "$(jq -r '.items[0].metadata.name' <<<"$page1") $(jq -r '"\(.items[0].metadata.name)|\(.metadata.continue)"' <<<"$page2")"
t_json "LIST labelSelector: nothing carries team=none" "$(kcurl "$BASE/metricrules?labelSelector=team%3Dnone")" '.items | length' 0
t_json "GET one MetricRule" "$(kcurl "$BASE/namespaces/shop/metricrules/queue-depth")" '.spec.externalRules[0].name.as' queue_depth
out=$(kcurl "$BASE/namespaces/shop/metricrules/nope")
t_eq "GET a missing MetricRule: 404 NotFound with details" \
  '404 {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"metricrules.metrics.custom-metrics-adapter.dev \"nope\" not found","reason":"NotFound","details":{"name":"nope","group":"metrics.custom-metrics-adapter.dev","kind":"metricrules"},"code":404}' \
  "$(cat "$tmp/code") $out"

# WATCH: start_watch NAME QUERY: curl in the background writing the event lines to $tmp/NAME.
declare -A WATCH_PID
start_watch() {
  curl -s -N --max-time 120 --cacert "$KUBE_CA" -H 'Authorization: Bearer fake-admin' \
    "$BASE/metricrules?watch=true&$2" >"$tmp/$1" 2>"$tmp/$1.err" &
  WATCH_PID[$1]=$!
}
# wait_lines NAME N: until file NAME has N lines (deadline 60 s).
wait_lines() {
  local deadline=$((SECONDS + 60))
  while [ "$(wc -l <"$tmp/$1")" -lt "$2" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
}
# wait_exit NAME...: sets RC to the watches' curl exit statuses, space-separated (deadline 60 s
# each; 124 for one still running, which is then stopped). Not in a subshell: `wait` needs the parent.
wait_exit() {
  local name pid deadline
  RC=""
  for name in "$@"; do
    pid=${WATCH_PID[$name]}
    deadline=$((SECONDS + 60))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      wait "$pid" 2>/dev/null
      RC="${RC:+$RC }124"
    else
      wait "$pid"
      RC="${RC:+$RC }$?"
    fi
  done
}
events() { jq -r '"\(.type) \(.object.metadata.name // .object.reason) \(.object.metadata.resourceVersion // .object.code)"' <"$tmp/$1"; }

start_watch initial "allowWatchBookmarks=true&timeoutSeconds=600"
wait_lines initial 2
start_watch w1 "resourceVersion=$rv&allowWatchBookmarks=true&timeoutSeconds=600"
start_watch nobm "resourceVersion=$rv&timeoutSeconds=600"
sed 's/sum(<<.Series>>{<<.LabelMatchers>>}) by (queue)/max(<<.Series>>{<<.LabelMatchers>>}) by (queue)/' \
  tests/fixtures/metric-rules/good-queue-depth.yaml >"$tmp/queue-depth-v2.yaml"
out=$(apply "$tmp/queue-depth-v2.yaml")
t_json "control apply with a changed spec: MODIFIED, generation 2" "$out" '"\(.event) \(.generation)"' "MODIFIED 2"
rv_mod=$(jq -r .resourceVersion <<<"$out")
out=$(apply "$tmp/queue-depth-v2.yaml")
t_json "control apply of the same object: unchanged, same resourceVersion" "$out" '"\(.event) \(.resourceVersion)"' "UNCHANGED $rv_mod"
rv_del=$(control "delete?namespace=ml&name=gpu" | jq -r .resourceVersion)
control bookmark >/dev/null
wait_lines w1 3
wait_lines initial 5
t_eq "WATCH from the list's resourceVersion: MODIFIED, DELETED, BOOKMARK at the latest resourceVersion" \
  "MODIFIED queue-depth $rv_mod
DELETED gpu $rv_del
BOOKMARK null $rv_del" "$(events w1)"
t_eq "WATCH without resourceVersion: synthetic ADDED for each object, then the changes" \
  "ADDED gpu
ADDED queue-depth
MODIFIED queue-depth
DELETED gpu
BOOKMARK null" "$(events initial | cut -d' ' -f1,2)"
t_eq "BOOKMARK object: only apiVersion, kind and metadata.resourceVersion" \
  "{\"type\":\"BOOKMARK\",\"object\":{\"apiVersion\":\"metrics.custom-metrics-adapter.dev/v1alpha1\",\"kind\":\"MetricRule\",\"metadata\":{\"resourceVersion\":\"$rv_del\"}}}" \
  "$(tail -n 1 "$tmp/w1")"
t_eq "event objects are whole MetricRules with sorted keys" "apiVersion,kind,metadata,spec MetricRule" \
  "$(head -n 1 "$tmp/w1" | jq -r '"\(.object | keys_unsorted | join(",")) \(.object.kind)"')"
control "drop-watches?mode=close" >/dev/null
wait_exit w1 initial nobm
t_eq "drop-watches (close): the watches end cleanly (curl exit 0)" "0 0 0" "$RC"
t_eq "a watch without allowWatchBookmarks gets no BOOKMARK" "MODIFIED DELETED" "$(events nobm | cut -d' ' -f1 | paste -sd' ')"
start_watch cut "resourceVersion=$rv_del&timeoutSeconds=600"
apply tests/fixtures/metric-rules/good-gpu-custom.yaml >/dev/null
wait_lines cut 1
control "drop-watches?mode=abort" >/dev/null
wait_exit cut
code=$RC
t_eq "drop-watches (abort): the stream is cut mid-way (curl fails: 18 partial or 56 receive error)" yes \
  "$(case $code in 18 | 56) echo yes ;; *) echo "no (curl exit $code)" ;; esac)"
t_eq "the cut watch got the event sent before" "ADDED gpu" "$(events cut | cut -d' ' -f1,2)"
start_watch timeout "resourceVersion=$rv_del&allowWatchBookmarks=true&timeoutSeconds=1"
wait_exit timeout
t_eq "timeoutSeconds ends the watch with a BOOKMARK (after the events since its resourceVersion)" "0 ADDED BOOKMARK" \
  "$RC $(events timeout | cut -d' ' -f1 | paste -sd' ')"

# 410 Gone: compaction
cont_old=$(kcurl "$BASE/metricrules?limit=1" | jq -r .metadata.continue)
start_watch open "resourceVersion=$rv_del&timeoutSeconds=600"
wait_lines open 1 # connected: it has sent the ADDED of gpu (after $rv_del), so it is open at compaction
compacted=$(control gone | jq -r .resourceVersion)
wait_exit open
t_eq "compaction: an open watch gets ERROR 410 Expired and ends" \
  "0 {\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"too old resource version: $((compacted - 1)) ($compacted)\",\"reason\":\"Expired\",\"code\":410}}" \
  "$RC $(grep ERROR "$tmp/open")"
start_watch old "resourceVersion=$rv&timeoutSeconds=600"
wait_exit old
t_eq "WATCH from a resourceVersion older than the compaction: ERROR 410 (as watch-pods-too-old-rv.jsonl)" \
  "0 ERROR Expired 410 too old resource version: $rv ($compacted)" \
  "$RC $(jq -r '"\(.type) \(.object.reason) \(.object.code) \(.object.message)"' <"$tmp/old")"
out=$(kcurl "$BASE/metricrules?limit=1&continue=$cont_old")
t_eq "LIST with a continue token from before the compaction: 410 Expired as recorded, a fresh token (rv -1)" \
  "410 Expired 410 -1 $(tail -n 1 "$CMA_FIXTURES/error-410-list-continue-expired.http" | jq -r .message)" \
  "$(cat "$tmp/code") $(jq -r '"\(.reason) \(.code) \(.metadata.continue | . + "=" * ((4 - length % 4) % 4) | gsub("-"; "+") | gsub("_"; "/") | @base64d | fromjson | .rv) \(.message)"' <<<"$out")"
out=$(kcurl "$BASE/metricrules?resourceVersion=$rv&resourceVersionMatch=Exact")
t_eq "LIST Exact at a compacted resourceVersion: the recorded 410 body" \
  "410 $(tail -n 1 "$CMA_FIXTURES/error-410-list-exact-rv-compacted.http")" "$(cat "$tmp/code") $out"
out=$(kcurl "$BASE/metricrules?resourceVersion=$compacted&resourceVersionMatch=Exact")
t_eq "LIST Exact at the compaction point: the state then (queue-depth, gpu re-added)" "200 gpu queue-depth" \
  "$(cat "$tmp/code") $(jq -r '[.items[].metadata.name] | join(" ")' <<<"$out")"

# The status subresource
obj=$(kcurl "$BASE/namespaces/shop/metricrules/queue-depth")
cur_rv=$(jq -r .metadata.resourceVersion <<<"$obj")
status='{"observedGeneration":2,"conditions":[{"type":"Accepted","status":"True","observedGeneration":2,"lastTransitionTime":"2026-12-01T16:00:00Z","reason":"Accepted","message":"1 external metric"}],"metrics":["queue_depth"]}'
jq --argjson s "$status" '.status = $s | .spec.externalRules[0].metricsQuery = "changed by a status write"' <<<"$obj" >"$tmp/put.json"
out=$(kcurl "$BASE/namespaces/shop/metricrules/queue-depth/status" -X PUT -H 'Content-Type: application/json' \
  --data-binary "@$tmp/put.json")
t_eq "PUT status: 200, the status stored, spec and generation untouched, a new resourceVersion" \
  "200 True queue_depth 2 max(<<.Series>>{<<.LabelMatchers>>}) by (queue) true" \
  "$(cat "$tmp/code") $(jq -r --arg rv "$cur_rv" '"\(.status.conditions[0].status) \(.status.metrics | join(",")) \(.metadata.generation) \(.spec.externalRules[0].metricsQuery) \(.metadata.resourceVersion != $rv)"' <<<"$out")"
new_rv=$(jq -r .metadata.resourceVersion <<<"$out")
t_eq "kubectl get mr -n shop: the printer columns show the status (a Table from the CRD's columns)" \
  'NAME ACCEPTED METRICS|queue-depth True ["queue_depth"]' \
  "$("${K[@]}" get mr -n shop 2>"$tmp/kubectl.err" | awk '{print $1, $2, $3}' | paste -sd'|')"
t_json "GET reads the status back" "$(kcurl "$BASE/namespaces/shop/metricrules/queue-depth")" \
  '"\(.status.observedGeneration) \(.status.conditions[0].reason) \(.status.conditions[0].observedGeneration)"' "2 Accepted 2"
jq --arg rv "$new_rv" '.metadata.resourceVersion = $rv' "$tmp/put.json" >"$tmp/put-same.json"
out=$(kcurl "$BASE/namespaces/shop/metricrules/queue-depth/status" -X PUT -H 'Content-Type: application/json' \
  --data-binary "@$tmp/put-same.json")
t_eq "PUT the same status again: 200, resourceVersion unchanged (no-op write)" "200 $new_rv" \
  "$(cat "$tmp/code") $(jq -r .metadata.resourceVersion <<<"$out")"
out=$(kcurl "$BASE/namespaces/shop/metricrules/queue-depth/status" -X PUT -H 'Content-Type: application/json' \
  --data-binary "@$tmp/put.json")
t_eq "PUT status with a stale resourceVersion: 409 Conflict" \
  "409 Conflict Operation cannot be fulfilled on metricrules.metrics.custom-metrics-adapter.dev \"queue-depth\": the object has been modified; please apply your changes to the latest version and try again" \
  "$(cat "$tmp/code") $(jq -r '"\(.reason) \(.message)"' <<<"$out")"
out=$(kcurl "$BASE/namespaces/shop/metricrules/queue-depth/status" -X PATCH -H 'Content-Type: application/merge-patch+json' \
  --data-binary '{"status":{"conditions":[{"type":"Accepted","status":"False","observedGeneration":2,"lastTransitionTime":"2026-12-01T16:05:00Z","reason":"Conflict","message":"spec.externalRules[0]: metric queue_depth is served by MetricRule shop/orders (created first)"}],"metrics":[]}}')
t_eq "PATCH status (merge patch): 200 with the condition replaced, observedGeneration kept" \
  "200 False Conflict 2 0" \
  "$(cat "$tmp/code") $(jq -r '"\(.status.conditions[0].status) \(.status.conditions[0].reason) \(.status.observedGeneration) \(.status.metrics | length)"' <<<"$out")"
out=$(kcurl "$BASE/namespaces/shop/metricrules/queue-depth/status" -X PATCH -H 'Content-Type: application/json-patch+json' \
  --data-binary '[{"op":"replace","path":"/status/metrics","value":["queue_depth"]}]')
t_eq "PATCH status (JSON patch): 200" "200 queue_depth" "$(cat "$tmp/code") $(jq -r '.status.metrics | join(",")' <<<"$out")"
out=$(kcurl "$BASE/namespaces/shop/metricrules/queue-depth/status" -X PATCH \
  -H 'Content-Type: application/strategic-merge-patch+json' --data-binary '{"status":{"metrics":[]}}')
t_eq "PATCH status (strategic merge patch): 415, as for every custom resource" "415 UnsupportedMediaType" \
  "$(cat "$tmp/code") $(jq -r .reason <<<"$out")"
out=$(kcurl "$BASE/namespaces/shop/metricrules/queue-depth/status" -X PATCH -H 'Content-Type: application/merge-patch+json' \
  --data-binary '{"status":{"conditions":[{"type":"Accepted","status":"Maybe","lastTransitionTime":"2026-12-01T16:05:00Z","message":"x"}]}}')
t_eq "PATCH status the schema refuses: 422 Invalid naming each field" \
  "422 Invalid status.conditions[0].reason:FieldValueRequired status.conditions[0].status:FieldValueNotSupported" \
  "$(cat "$tmp/code") $(jq -r '"\(.reason) \([.details.causes[] | "\(.field):\(.reason)"] | sort | join(" "))"' <<<"$out")"
out=$(kcurl "$BASE/namespaces/shop/metricrules/nope/status" -X PUT -H 'Content-Type: application/json' --data-binary '{}')
t_eq "PUT status of a missing MetricRule: 404" 404 "$(cat "$tmp/code")"
out=$(apply "$tmp/queue-depth-v2.yaml")
t_json "control apply after the status writes: unchanged (status is not the main resource's)" "$out" .event UNCHANGED
t_json "the status log: every write in order with its answer" "$(control status-log)" \
  '[.[] | "\(.method) \(.contentType) \(.code)"] | join(", ")' \
  "PUT application/json 200, PUT application/json 200, PUT application/json 409, PATCH application/merge-patch+json 200, PATCH application/json-patch+json 200, PATCH application/strategic-merge-patch+json 415, PATCH application/merge-patch+json 422, PUT application/json 404"
t_summary
