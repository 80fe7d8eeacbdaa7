#!/usr/bin/env bash
# Checks deploy/ offline (no cluster runs here): `kubectl kustomize` renders the base, each
# component is a kustomize Component, and each overlay (all, next-to-keda, next-to-metrics-server)
# renders with exactly the APIServices it should register, all pointing at the Service's port;
# the groups the adapter would serve (the ConfigMap's rule sections minus the Deployment's
# --disable-*-metrics flags) are exactly the registered ones; the ConfigMap's config passes
# --check-config; the Deployment's args are flags the adapter accepts (--check-config); every
# namespaced object is in custom-metrics except the kube-system RoleBinding; the HPA controller
# is bound to read each registered custom/external group and only those; every overlay keeps the
# production defaults (2 replicas spread over nodes, a PodDisruptionBudget that selects them,
# system-cluster-critical, /livez and /readyz probes, requests and a memory limit, a restricted
# securityContext, --cert-dir on a writable volume).
# kubectl is the pinned one from scripts/tools.sh: Debian's 1.20 lacks Components and `-o`.
# asan: no
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh
bin=$(cma_adapter_bin)
tmp=$(cma_tmp)
if ! tools=$("$CMA_ROOT/scripts/tools.sh"); then
  t_fail "scripts/tools.sh installs the pinned kubectl"
  t_summary
  exit 1
fi
KUBECTL=$tools/kubectl
# must NAME CMD...: t_ok that also returns whether CMD succeeded (t_ok returns 0 either way), for
# checks that later steps depend on.
must() {
  local failed=$T_FAIL
  t_ok "$@"
  [ "$T_FAIL" -eq "$failed" ]
}

C=custom.metrics.k8s.io
E=external.metrics.k8s.io
R=metrics.k8s.io

# facts DIR RENDERED: writes what the checks below compare, one file each, into DIR.
facts() {
  python3 - "$1" "$2" <<'PY'
import json, os, sys, yaml
out, rendered = sys.argv[1], sys.argv[2]
docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
kinds = {}
for d in docs:
    kinds.setdefault(d["kind"], []).append(d)
def write(name, text):
    with open(os.path.join(out, name), "w") as f:
        f.write(text + "\n")

# APIServices: "v1beta1.custom.metrics.k8s.io" names, and whether each points at the Service
apis = kinds.get("APIService", [])
write("apiservices", " ".join(sorted(a["metadata"]["name"] for a in apis)))
svc = kinds["Service"][0]
ports = {p["port"] for p in svc["spec"]["ports"]}
bad = [a["metadata"]["name"] for a in apis
       if a["spec"]["service"]["name"] != svc["metadata"]["name"]
       or a["spec"]["service"]["namespace"] != svc["metadata"]["namespace"]
       or a["spec"]["service"]["port"] not in ports
       or a["metadata"]["name"] != a["spec"]["version"] + "." + a["spec"]["group"]
       or not (a["spec"].get("insecureSkipTLSVerify") or a["spec"].get("caBundle"))]
write("apiservice-mismatches", " ".join(bad) or "none")
write("registered-groups", " ".join(sorted({a["spec"]["group"] for a in apis})))

# the rule file and the Deployment's args (--config pointed at the extracted file)
cm = kinds["ConfigMap"][0]
config_path = os.path.join(out, "config.yaml")
write("config.yaml", cm["data"]["config.yaml"])
dep = kinds["Deployment"][0]
containers = dep["spec"]["template"]["spec"]["containers"]
args = containers[0]["args"]
mounted = any(v.get("configMap", {}).get("name") == cm["metadata"]["name"]
              for v in dep["spec"]["template"]["spec"]["volumes"])
write("config-mounted", "yes" if mounted else "no")
write("args", "\n".join("--config=" + config_path if a.startswith("--config=") else a
                        for a in args))

# the groups the adapter serves: a rule section that has rules, unless switched off
cfg = yaml.safe_load(cm["data"]["config.yaml"]) or {}
def on(flag):
    return not any(a in ("--" + flag, "--" + flag + "=true") for a in args)
served = []
if cfg.get("rules") and on("disable-custom-metrics"):
    served.append("custom.metrics.k8s.io")
if cfg.get("externalRules") and on("disable-external-metrics"):
    served.append("external.metrics.k8s.io")
if cfg.get("resourceRules") is not None and on("disable-resource-metrics"):
    served.append("metrics.k8s.io")
write("served-groups", " ".join(sorted(served)))
write("disable-flags", " ".join(sorted(a for a in args if a.startswith("--disable-"))))

# namespaces: every namespaced object in custom-metrics, except the kube-system RoleBinding
cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "APIService", "CustomResourceDefinition"}
placed = sorted("%s/%s=%s" % (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", "-"))
                for d in docs if d["kind"] not in cluster_scoped)
write("namespaced-objects", " ".join(placed))
sa = kinds["ServiceAccount"][0]["metadata"]
write("sa-subjects-ok", "yes" if all(
    s["namespace"] == sa["namespace"]
    for d in docs if d["kind"].endswith("RoleBinding")
    for s in d["subjects"] if s["kind"] == "ServiceAccount" and s["name"] == sa["name"]) else "no")

# RBAC: which groups the HPA controller may read, which ClusterRoles bindings reference
roles = {d["metadata"]["name"]: d for d in kinds.get("ClusterRole", [])}
hpa = set()
dangling = []
for b in kinds.get("ClusterRoleBinding", []) + kinds.get("RoleBinding", []):
    ref = b["roleRef"]
    if ref["kind"] == "ClusterRole" and ref["name"] not in roles and not ref["name"].startswith("system:"):
        dangling.append(ref["name"])
    if any(s["kind"] == "ServiceAccount" and s["name"] == "horizontal-pod-autoscaler"
           and s["namespace"] == "kube-system" for s in b["subjects"]):
        for rule in roles.get(ref["name"], {}).get("rules", []):
            hpa.update(g for g in rule["apiGroups"] if g.endswith("metrics.k8s.io"))
write("hpa-readable-groups", " ".join(sorted(hpa)))
write("dangling-role-refs", " ".join(dangling) or "none")
agg = roles.get("system:aggregated-metrics-reader")
write("aggregated-reader", "absent" if agg is None else " ".join(sorted(
    k.rsplit("/", 1)[1] for k, v in agg["metadata"].get("labels", {}).items() if v == "true")))

# production defaults, one "what=value" line each (compared with PRODUCTION below)
pod = dep["spec"]["template"]
spec = pod["spec"]
c = containers[0]
labels = pod["metadata"].get("labels", {})
def selects(sel):
    return "yes" if sel and all(labels.get(k) == v for k, v in sel.get("matchLabels", {}).items()) \
        and not sel.get("matchExpressions") else "no"
def flag(name):
    return next((a.split("=", 1)[1] for a in args if a.startswith("--" + name + "=")), None)
ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
def probe(p):
    h = (p or {}).get("httpGet", {})
    port = h.get("port")
    secure = ports.get(port, port) == int(flag("secure-port") or 6443)
    return "%s %s on the secure port: %s" % (h.get("scheme"), h.get("path"), "yes" if secure else "no")
pdbs = kinds.get("PodDisruptionBudget", [])
pdb = pdbs[0]["spec"] if len(pdbs) == 1 else {}
spread = spec.get("topologySpreadConstraints", [])
res = c.get("resources", {})
sc = c.get("securityContext", {})
cert_dir = flag("cert-dir") or ""
empty_dirs = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
writable = any(m["name"] in empty_dirs and not m.get("readOnly")
               and (cert_dir + "/").startswith(m["mountPath"].rstrip("/") + "/")
               for m in c.get("volumeMounts", []))
def j(v):
    return json.dumps(v, sort_keys=True)
lines = [
    "replicas=%s" % dep["spec"].get("replicas"),
    "strategy=%s" % j(dep["spec"].get("strategy")),
    "pdb=%d, maxUnavailable %s, minAvailable %s, unhealthyPodEvictionPolicy %s, selects the pods: %s" % (
        len(pdbs), pdb.get("maxUnavailable"), pdb.get("minAvailable"),
        pdb.get("unhealthyPodEvictionPolicy"), selects(pdb.get("selector"))),
    "priorityClassName=%s" % spec.get("priorityClassName"),
    "spread=%s" % "; ".join("%s maxSkew %s %s nodeTaintsPolicy %s selects the pods: %s" % (
        t["topologyKey"], t["maxSkew"], t["whenUnsatisfiable"], t.get("nodeTaintsPolicy"),
        selects(t.get("labelSelector"))) for t in spread),
    "livenessProbe=%s" % probe(c.get("livenessProbe")),
    "readinessProbe=%s" % probe(c.get("readinessProbe")),
    "requests=%s" % j(res.get("requests")),
    "limits=%s" % j(res.get("limits")),
    "securityContext=%s" % j(sc),
    "cert-dir on a writable emptyDir=%s" % ("yes" if writable else "no"),
    "automountServiceAccountToken=%s" % spec.get("automountServiceAccountToken"),
]
write("production", "\n".join(lines))
PY
}

# What every overlay's Deployment must carry (docs/operations.md, "Deploying").
PRODUCTION='replicas=2
strategy={"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}, "type": "RollingUpdate"}
pdb=1, maxUnavailable 1, minAvailable None, unhealthyPodEvictionPolicy AlwaysAllow, selects the pods: yes
priorityClassName=system-cluster-critical
spread=kubernetes.io/hostname maxSkew 1 DoNotSchedule nodeTaintsPolicy Honor selects the pods: yes
livenessProbe=HTTPS /livez on the secure port: yes
readinessProbe=HTTPS /readyz on the secure port: yes
requests={"cpu": "50m", "memory": "32Mi"}
limits={"memory": "128Mi"}
securityContext={"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": true, "runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}}
cert-dir on a writable emptyDir=yes
automountServiceAccountToken=True'

# --- base and components ----------------------------------------------------------------------------
mkdir -p "$tmp/base"
if must "kustomize renders deploy/base" "$KUBECTL" kustomize deploy/base -o "$tmp/base/all.yaml"; then
  facts "$tmp/base" "$tmp/base/all.yaml"
  t_eq "deploy/base registers no APIService" "" "$(cat "$tmp/base/apiservices")"
  t_ok "deploy/base: the ConfigMap's config passes --check-config" \
    "$bin" --config="$tmp/base/config.yaml" --check-config
  # docs/configuration.md shows this file under "A complete file": the two must not drift apart.
  t_eq "deploy/base: the ConfigMap's config is the one in docs/configuration.md (A complete file)" \
    same "$(python3 - docs/configuration.md "$tmp/base/config.yaml" <<'PY'
import re, sys, yaml
doc = open(sys.argv[1], encoding="utf-8").read()
section = doc.split("\n## A complete file\n", 1)[1].split("\n## ", 1)[0]
block = re.search(r"^```yaml\n(.*?)^```", section, re.S | re.M).group(1)
print("same" if yaml.safe_load(block) == yaml.safe_load(open(sys.argv[2])) else "different")
PY
)"
fi
for c in custom-metrics external-metrics resource-metrics ca-bundle metric-rules metrics-reader; do
  t_eq "deploy/components/$c is a kustomize Component" "kustomize.config.k8s.io/v1alpha1 Component" \
    "$(python3 -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); print(d["apiVersion"], d["kind"])' \
      "deploy/components/$c/kustomization.yaml")"
done

# --- overlays -----------------------------------------------------------------------------------------
# check_overlay NAME "APISERVICES" "GROUPS" "DISABLE FLAGS" AGGREGATED_READER
check_overlay() {
  local name=$1 want_apis=$2 want_groups=$3 want_flags=$4 want_agg=$5 dir="$tmp/$1" args
  mkdir -p "$dir"
  if ! must "$name: kustomize renders deploy/overlays/$name" \
    "$KUBECTL" kustomize "deploy/overlays/$name" -o "$dir/all.yaml"; then
    return
  fi
  facts "$dir" "$dir/all.yaml"
  t_eq "$name: exactly these APIServices" "$want_apis" "$(cat "$dir/apiservices")"
  t_eq "$name: every APIService points at the Service (name, namespace, port) with TLS settings" \
    none "$(cat "$dir/apiservice-mismatches")"
  t_eq "$name: the adapter serves exactly the registered groups" "$want_groups" \
    "$(cat "$dir/served-groups")"
  t_eq "$name: registered groups" "$want_groups" "$(cat "$dir/registered-groups")"
  t_eq "$name: --disable-*-metrics flags" "$want_flags" "$(cat "$dir/disable-flags")"
  # metrics.k8s.io needs no binding: the HPA controller's bootstrap role reads it already.
  t_eq "$name: the HPA controller is bound to read the registered custom/external groups" \
    "$(tr ' ' '\n' <<<"$want_groups" | grep -vx "$R" | paste -sd' ')" \
    "$(cat "$dir/hpa-readable-groups")"
  t_eq "$name: system:aggregated-metrics-reader (aggregate-to labels)" "$want_agg" \
    "$(cat "$dir/aggregated-reader")"
  t_eq "$name: every binding references a ClusterRole that exists" none \
    "$(cat "$dir/dangling-role-refs")"
  t_eq "$name: namespaced objects are in custom-metrics, the auth-reader RoleBinding in kube-system" \
    "ConfigMap/custom-metrics-adapter-config=custom-metrics Deployment/custom-metrics-adapter=custom-metrics PodDisruptionBudget/custom-metrics-adapter=custom-metrics RoleBinding/custom-metrics-adapter-auth-reader=kube-system Service/custom-metrics-adapter=custom-metrics ServiceAccount/custom-metrics-adapter=custom-metrics" \
    "$(cat "$dir/namespaced-objects")"
  t_eq "$name: bindings name the adapter's service account in its namespace" yes \
    "$(cat "$dir/sa-subjects-ok")"
  t_eq "$name: the Deployment mounts the ConfigMap" yes "$(cat "$dir/config-mounted")"
  t_eq "$name: production defaults (replicas, PDB, spread, priority, probes, resources, securityContext)" \
    "$PRODUCTION" "$(cat "$dir/production")"
  t_ok "$name: the ConfigMap's config passes --check-config" \
    "$bin" --config="$dir/config.yaml" --check-config
  mapfile -t args <"$dir/args"
  t_ok "$name: the Deployment's args are accepted (--check-config)" "$bin" "${args[@]}" --check-config
}

check_overlay all \
  "v1beta1.custom.metrics.k8s.io v1beta1.external.metrics.k8s.io v1beta1.metrics.k8s.io v1beta2.custom.metrics.k8s.io" \
  "$C $E $R" "" "aggregate-to-admin aggregate-to-edit aggregate-to-view"
check_overlay next-to-keda \
  "v1beta1.custom.metrics.k8s.io v1beta2.custom.metrics.k8s.io" \
  "$C" "--disable-external-metrics --disable-resource-metrics" absent
check_overlay next-to-metrics-server \
  "v1beta1.custom.metrics.k8s.io v1beta1.external.metrics.k8s.io v1beta2.custom.metrics.k8s.io" \
  "$C $E" "--disable-resource-metrics" absent
# --- RBAC for delegated authn/authz and the watch cache (base) ------------------------------------------
t_eq "base RBAC: auth-delegator, auth-reader in kube-system, get/list/watch on pods, nodes, namespaces" \
  "ClusterRoleBinding:system:auth-delegator RoleBinding:kube-system:extension-apiserver-authentication-reader get,list,watch:namespaces,nodes,pods" \
  "$(python3 - "$tmp/base/all.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
out = []
for d in docs:
    if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == "system:auth-delegator" \
            and any(s["name"] == "custom-metrics-adapter" for s in d["subjects"]):
        out.append("ClusterRoleBinding:system:auth-delegator")
    if d["kind"] == "RoleBinding" and d["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role", "name": "extension-apiserver-authentication-reader"}:
        out.append("RoleBinding:%s:%s" % (d["metadata"]["namespace"], d["roleRef"]["name"]))
core = set()
for d in docs:
    if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "custom-metrics-adapter-resource-reader":
        for r in d["rules"]:
            if "" in r["apiGroups"] and {"get", "list", "watch"} <= set(r["verbs"]):
                core.update(x for x in r["resources"] if x in ("pods", "nodes", "namespaces"))
out.sort()
out.append("get,list,watch:" + ",".join(sorted(core)))
print(" ".join(out))
PY
)"

# --- the ca-bundle component (verified aggregator -> adapter TLS) ---------------------------------------
# Rendered from a copy of deploy/ whose ca.crt holds a real CA made by openssl, in an overlay that
# adds the component after custom-metrics and external-metrics.
cab="$tmp/ca-bundle"
mkdir -p "$cab"
cp -r deploy "$cab/"
if must "ca-bundle: openssl makes a CA certificate" openssl req -x509 -newkey ec \
  -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=test-aggregator-ca \
  -keyout "$cab/ca.key" -out "$cab/deploy/components/ca-bundle/ca.crt"; then
  mkdir -p "$cab/deploy/overlays/with-ca"
  cat >"$cab/deploy/overlays/with-ca/kustomization.yaml" <<'YAML'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../base
components:
- ../../components/custom-metrics
- ../../components/external-metrics
- ../../components/ca-bundle
YAML
  if must "ca-bundle: kustomize renders an overlay with the component" \
    "$KUBECTL" kustomize "$cab/deploy/overlays/with-ca" -o "$cab/all.yaml"; then
    t_eq "ca-bundle: every APIService has caBundle = base64(ca.crt) and insecureSkipTLSVerify false" \
      "v1beta1.custom.metrics.k8s.io=ok v1beta1.external.metrics.k8s.io=ok v1beta2.custom.metrics.k8s.io=ok" \
      "$(python3 - "$cab/all.yaml" "$cab/deploy/components/ca-bundle/ca.crt" <<'PY'
import base64, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
pem = open(sys.argv[2], "rb").read()
res = []
for d in docs:
    if d["kind"] != "APIService":
        continue
    spec = d["spec"]
    ok = (base64.b64decode("".join(spec.get("caBundle", "").split())) == pem
          and spec.get("insecureSkipTLSVerify") is False)
    res.append("%s=%s" % (d["metadata"]["name"], "ok" if ok else "bad"))
print(" ".join(sorted(res)))
PY
)"
    t_eq "ca-bundle: the generated Secret is local-config (not applied)" 0 \
      "$(python3 -c 'import sys, yaml; print(sum(1 for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Secret"))' "$cab/all.yaml")"
  fi
fi

t_eq "deploy/overlays has exactly the three documented overlays" "all next-to-keda next-to-metrics-server" \
  "$(find deploy/overlays -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort | paste -sd' ')"
t_summary
