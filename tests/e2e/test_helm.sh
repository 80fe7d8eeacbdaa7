#!/usr/bin/env bash
# Checks the Helm chart deploy/helm/custom-metrics-adapter offline with the real, pinned helm
# (scripts/tools.sh; no cluster runs here):
#  1. `helm lint --strict` and `helm template` with the default values: the objects, the six default
#     rules equal to what the prometheus-community chart renders for rules.default (a recorded
#     rendering in ../shared/fixtures), the rule file and the arguments accepted by the adapter
#     (--check-config), the image = the chart's appVersion = deploy/base's image.
#  2. Each API-group switch, each layout, and the values that contradict each other (rendering stops
#     with a message naming them): the APIServices registered are exactly the groups the adapter
#     serves (rule sections minus --disable-*-metrics), with the HPA controller's read access.
#  3. Real values files users published for the prometheus-community chart (tests/fixtures/
#     helm-values, sources in each header): lint, template, and every key they set is honoured as
#     that chart means it (prometheus.url/port/path → --prometheus-url, rules → the rule file,
#     extraArguments appended, volumes, scheduling, PDB, cert-manager, ...). A key with no check
#     fails the test, so a new file cannot pass on keys nobody looked at. Two files written here
#     cover the chart's keys that no published file sets.
#  4. Drift: the chart with the values matching deploy/base (its rules) against `kubectl kustomize`
#     of the overlays all, next-to-keda and next-to-metrics-server: RBAC, APIServices, the
#     Deployment (args and production settings), the PodDisruptionBudget, the Service and the rule
#     file must be the same objects once the names that legitimately differ are normalised.
#  5. tls.enable: the chart's Secret, arguments and APIService caBundle fit together: the adapter,
#     started with the rendered arguments and the Secret's files (on loopback, against the fake
#     kube-apiserver that stands in for the cluster's), serves /livez and /readyz to a client that
#     trusts only the caBundle and checks the name <service>.<namespace>.svc, as kube-aggregator does.
#  6. NOTES.txt names exactly the APIServices the release registers.
#  7. metricsReaders and deploy/components/metrics-reader: a ClusterRole over nonResourceURLs
#     ["/metrics"] (get) bound to exactly the configured subjects; none with the default values.
# asan: no
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh
bin=$(cma_adapter_bin)
tmp=$(cma_tmp)
chart=deploy/helm/custom-metrics-adapter
values_dir=tests/fixtures/helm-values
if ! tools=$("$CMA_ROOT/scripts/tools.sh"); then
  t_fail "scripts/tools.sh installs the pinned helm and kubectl"
  t_summary
  exit 1
fi
H=$tools/helm
KUBECTL=$tools/kubectl
# must NAME CMD...: t_ok that also returns whether CMD succeeded (t_ok returns 0 either way), for
# checks that later steps depend on.
must() {
  local failed=$T_FAIL
  t_ok "$@"
  [ "$T_FAIL" -eq "$failed" ]
}
# Nothing under $HOME: helm's cache, config and data live in this run's temp dir.
export HELM_CACHE_HOME="$tmp/helm/cache" HELM_CONFIG_HOME="$tmp/helm/config" \
  HELM_DATA_HOME="$tmp/helm/data"
check_py="$tmp/helmcheck.py"

# render_chart CHART OUT RELEASE NAMESPACE [HELM_ARGS...]: helm template into OUT, helm's stderr
# into OUT.err. render OUT RELEASE NAMESPACE [HELM_ARGS...]: the same for deploy/helm's chart.
render_chart() {
  local dir=$1 out=$2 release=$3 ns=$4
  shift 4
  # --skip-tests: the `helm test` hook's objects (templates/tests/) are checked by test_check.sh
  "$H" template "$release" "$dir" --namespace "$ns" --skip-tests "$@" >"$out" 2>"$out.err"
}
render() { render_chart "$chart" "$@"; }

# report CMD...: runs a helmcheck.py command whose lines are "ok NAME" or "FAIL NAME: DETAIL" and
# turns each into an assertion; a checker that prints nothing or crashes is a failure too.
report() {
  local line out rc n=0
  out=$(python3 "$check_py" "$@" 2>&1)
  rc=$?
  while IFS= read -r line; do
    case $line in
      "ok "*) t_pass "${line#ok }" && n=$((n + 1)) ;;
      "FAIL "*) t_fail "${line#FAIL }" && n=$((n + 1)) ;;
      *) [ -n "$line" ] && printf '     %s\n' "$line" ;;
    esac
  done <<<"$out"
  if [ $rc -ne 0 ] || [ $n -eq 0 ]; then
    t_fail "helmcheck.py $1 ran (exit $rc, $n checks)"
  fi
}

cat >"$check_py" <<'PY'
"""Checks on rendered manifests for test_helm.sh. Commands print "ok NAME" / "FAIL NAME: DETAIL"."""
import base64, json, os, re, sys, yaml

GROUPS = [("custom", "custom.metrics.k8s.io"), ("external", "external.metrics.k8s.io"),
          ("resource", "metrics.k8s.io")]
APIS = {"custom": ["v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io"],
        "external": ["v1beta1.external.metrics.k8s.io"], "resource": ["v1beta1.metrics.k8s.io"]}
# CustomResourceDefinition: the chart's is in crds/ (helm template leaves it out), deploy/'s in the
# metric-rules component; test_metric_rule_crd.sh checks the two are the same.
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "APIService", "CustomResourceDefinition"}


def load(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]


def one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    return found[0] if len(found) == 1 else None


def check(name, ok, detail=""):
    print(("ok %s" % name) if ok else ("FAIL %s: %s" % (name, detail)))


def diffs(want, got, path="", out=None):
    """Up to 6 "path: expected X, got Y" lines where two JSON-like values differ."""
    out = [] if out is None else out
    if len(out) >= 6:
        return out
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got), key=str):
            diffs(want.get(k, "<absent>"), got.get(k, "<absent>"), "%s.%s" % (path, k), out)
    elif isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (a, b) in enumerate(zip(want, got)):
            diffs(a, b, "%s[%d]" % (path, i), out)
    elif want != got:
        out.append("%s: expected %s, got %s" % (path or "value", json.dumps(want, sort_keys=True, default=str),
                                                json.dumps(got, sort_keys=True, default=str)))
    return out


def eq(name, want, got):
    check(name, want == got, "; ".join(diffs(want, got)))


def container(dep):
    return dep["spec"]["template"]["spec"]["containers"][0]


def flag(args, name):
    vals = [a.split("=", 1)[1] for a in args if a.startswith("--%s=" % name)]
    return vals[-1] if vals else None


def selects(sel, labels):
    return bool(sel) and not sel.get("matchExpressions") and all(
        labels.get(k) == v for k, v in sel.get("matchLabels", {}).items())


def registered(docs):
    return sorted(d["metadata"]["name"] for d in docs if d["kind"] == "APIService")


def served(docs, config):
    """The groups the adapter serves: a rule section that has rules, minus --disable flags. With no
    rendered rule file (rules.existing) every section may have rules: only the flags can tell."""
    args = container(one(docs, "Deployment"))["args"]
    if config is None:
        have = {g: True for g, _ in GROUPS}
    else:
        have = {"custom": bool(config.get("rules")), "external": bool(config.get("externalRules")),
                "resource": config.get("resourceRules") is not None}
    return sorted(api for g, _ in GROUPS if have[g] and "--disable-%s-metrics" % g not in args
                  for api in APIS[g])


def rules_configmap(docs):
    """The rendered ConfigMap the Deployment mounts as its rule file (None with rules.existing)."""
    vols = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    name = [x for x in vols if x["name"] == "config"][0]["configMap"]["name"]
    found = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    return found[0] if found else None


def config_of(docs):
    cm = rules_configmap(docs)
    return yaml.safe_load(cm["data"]["config.yaml"]) if cm else None


def hpa_readable(docs):
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    out = set()
    for b in docs:
        if b["kind"] != "ClusterRoleBinding":
            continue
        if any(s.get("name") == "horizontal-pod-autoscaler" and s.get("namespace") == "kube-system"
               for s in b["subjects"]):
            for rule in roles.get(b["roleRef"]["name"], {}).get("rules", []):
                out.update(rule["apiGroups"])
    return sorted(out)


# --- extract RENDERED DIR: files the shell uses (config.yaml, args, apiservices) ------------------
def cmd_extract(rendered, out):
    docs = load(rendered)
    cfg = rules_configmap(docs) if one(docs, "Deployment") else None
    if cfg:
        open(os.path.join(out, "config.yaml"), "w").write(cfg["data"]["config.yaml"])
    if one(docs, "Deployment"):
        args = container(one(docs, "Deployment"))["args"]
        open(os.path.join(out, "args"), "w").write("\n".join(args) + "\n")
        open(os.path.join(out, "image"), "w").write(container(one(docs, "Deployment"))["image"] + "\n")
    open(os.path.join(out, "objects"), "w").write(
        "".join(sorted("%s %s\n" % (d["kind"], d["metadata"]["name"]) for d in docs)))
    open(os.path.join(out, "insecureSkipTLSVerify"), "w").write(" ".join(
        str(d["spec"].get("insecureSkipTLSVerify")).lower() for d in docs if d["kind"] == "APIService") + "\n")
    open(os.path.join(out, "apiservices"), "w").write(" ".join(registered(docs)) + "\n")
    for d in docs:
        if d["kind"] == "Secret":
            for k, v in d.get("data", {}).items():
                open(os.path.join(out, k), "wb").write(base64.b64decode(v))
        if d["kind"] == "APIService" and d["spec"].get("caBundle"):
            open(os.path.join(out, "caBundle.pem"), "wb").write(base64.b64decode(d["spec"]["caBundle"]))
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "rendered-notes":
            open(os.path.join(out, "NOTES.txt"), "w").write(d["data"]["notes"])
    return 0


# --- groups RENDERED LABEL "API API ...": registered = expected = served; RBAC follows ----------
def cmd_groups(rendered, label, want):
    docs = load(rendered)
    want = sorted(want.split())
    eq("%s: APIServices registered" % label, want, registered(docs))
    eq("%s: the adapter serves exactly the registered groups" % label, want,
       served(docs, config_of(docs)))
    groups = {a.split(".", 1)[1] for a in want}
    eq("%s: the HPA controller may read the registered custom/external groups" % label,
       sorted(groups - {"metrics.k8s.io"}), hpa_readable(docs))
    agg = [d for d in docs if d["kind"] == "ClusterRole"
           and d["metadata"]["name"] == "system:aggregated-metrics-reader"]
    eq("%s: system:aggregated-metrics-reader only with metrics.k8s.io" % label,
       "metrics.k8s.io" in groups, bool(agg))
    svc = one(docs, "Service")
    bad = [a["metadata"]["name"] for a in docs if a["kind"] == "APIService" and (
        a["spec"]["service"] != {"name": svc["metadata"]["name"],
                                 "namespace": svc["metadata"]["namespace"],
                                 "port": svc["spec"]["ports"][0]["port"]}
        or a["metadata"]["name"] != a["spec"]["version"] + "." + a["spec"]["group"])]
    eq("%s: every APIService points at the Service's name, namespace and port" % label, [], bad)
    return 0


# --- default RENDERED FIXTURE: the default values' rules = prometheus-community's rendering --------
def cmd_default_rules(rendered, fixture):
    cfg = config_of(load(rendered))
    eq("default values: the rule file is prometheus-community's rules.default rendering",
       yaml.safe_load(open(fixture)), cfg)
    return 0


# --- honoured VALUES RENDERED RELEASE NAMESPACE CHART_VALUES DEFAULT_RULES ------------------------
def cmd_honoured(values_path, rendered, release, namespace, chart_values_path, default_rules_path):
    v = yaml.safe_load(open(values_path)) or {}
    chart = yaml.safe_load(open(chart_values_path))
    defaults = chart["productionDefaults"]
    docs = load(rendered)
    name = os.path.basename(values_path)
    dep = one(docs, "Deployment")
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    c = container(dep)
    args = c["args"]
    handled = set()

    def has(key):
        handled.add(key)
        return key in v and v[key] not in (None, "", {}, [])

    def t(what, want, got):
        eq("%s: %s" % (name, what), want, got)

    # namespace, names
    ns = v.get("namespaceOverride") or namespace
    handled.update(["namespaceOverride", "nameOverride", "fullnameOverride"])
    placed = sorted({d["metadata"].get("namespace") for d in docs if d["kind"] not in CLUSTER_SCOPED
                     and not (d["kind"] == "RoleBinding" and d["metadata"].get("namespace") == "kube-system")})
    t("namespaceOverride / release namespace: namespaced objects are in %s" % ns, [ns], placed)

    # prometheus.url/port/path -> --prometheus-url (port and path default as both charts: 9090, "")
    p = v.get("prometheus") or {}
    handled.add("prometheus")
    # url is templated (tpl) in both charts; the files here use only .Release.Namespace
    url = p.get("url", chart["prometheus"]["url"]).replace("{{ .Release.Namespace }}", namespace)
    port = p.get("port", 9090) if "port" in p else 9090
    want = "%s%s%s" % (url, ":%s" % port if port not in (None, "") else "", p.get("path") or "")
    t("prometheus.url/port/path -> --prometheus-url", want, flag(args, "prometheus-url"))

    for key, fl in (("logLevel", "v"), ("metricsRelistInterval", "metrics-relist-interval"),
                    ("listenPort", "secure-port")):
        if has(key):
            t("%s -> --%s" % (key, fl), str(v[key]), flag(args, fl))
    if has("listenPort"):
        t("listenPort -> the container's https port", [{"name": "https", "containerPort": v["listenPort"]}],
          c["ports"])
    if has("replicas"):
        t("replicas", v["replicas"], dep["spec"]["replicas"])

    # rules -> the rule file (or the user's ConfigMap); groups registered as prometheus-adapter's chart
    r = v.get("rules") or {}
    handled.add("rules")
    default_on = r.get("default", True) is True
    custom, external, resource = r.get("custom") or [], r.get("external") or [], r.get("resource") or {}
    config_volume = [x for x in spec["volumes"] if x["name"] == "config"][0]["configMap"]["name"]
    if r.get("existing"):
        t("rules.existing: no rule ConfigMap rendered", [], [
            d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d.get("data", {})])
        t("rules.existing: the adapter mounts that ConfigMap", r["existing"], config_volume)
    else:
        want_cfg = {}
        rules = (yaml.safe_load(open(default_rules_path)) if default_on else []) + custom
        if rules:
            want_cfg["rules"] = rules
        if external:
            want_cfg["externalRules"] = external
        if resource:
            want_cfg["resourceRules"] = resource
        t("rules.default/custom/external/resource -> the rule file", want_cfg, config_of(docs))
        t("the adapter mounts the rendered ConfigMap", [dep["metadata"]["name"]],
          [d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == config_volume])
    want_apis = sorted((APIS["custom"] if default_on or custom else [])
                       + (APIS["external"] if external else []) + (APIS["resource"] if resource else []))
    t("APIServices as prometheus-adapter's chart registers them (v1beta2 added)", want_apis,
      registered(docs))
    t("the adapter serves exactly the registered groups", want_apis, served(docs, config_of(docs)))

    if has("extraArguments"):
        t("extraArguments appended last", v["extraArguments"], args[-len(v["extraArguments"]):])
    if has("extraVolumes"):
        t("extraVolumes", v["extraVolumes"], [x for x in spec["volumes"] if x in v["extraVolumes"]])
    if has("extraVolumeMounts"):
        t("extraVolumeMounts", v["extraVolumeMounts"],
          [x for x in c["volumeMounts"] if x in v["extraVolumeMounts"]])
    if has("extraContainers"):
        t("extraContainers", v["extraContainers"], spec["containers"][1:])
    if has("env"):
        t("env", v["env"], c.get("env"))

    # scheduling
    for key in ("nodeSelector", "tolerations", "affinity", "dnsConfig", "dnsPolicy"):
        if has(key):
            t(key, v[key], spec.get(key))
    if has("topologySpreadConstraints"):
        t("topologySpreadConstraints", v["topologySpreadConstraints"], spec.get("topologySpreadConstraints"))
    else:
        t("no topologySpreadConstraints given: spread over nodes (production default)",
          ["kubernetes.io/hostname"], [x["topologyKey"] for x in spec.get("topologySpreadConstraints", [])])
    if has("priorityClassName"):
        t("priorityClassName", v["priorityClassName"], spec.get("priorityClassName"))
    else:
        t("priorityClassName empty: the production default", defaults["priorityClassName"],
          spec.get("priorityClassName"))
    handled.add("hostNetwork")
    if (v.get("hostNetwork") or {}).get("enabled"):
        t("hostNetwork.enabled", True, spec.get("hostNetwork"))
    else:
        t("hostNetwork off", None, spec.get("hostNetwork"))
    if has("strategy"):
        t("strategy", v["strategy"], dep["spec"].get("strategy"))

    # container settings
    if has("resources"):
        t("resources", v["resources"], c.get("resources"))
    else:
        t("resources empty: the production default", defaults["resources"], c.get("resources"))
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if has(probe):
            t(probe, v[probe], c.get(probe))
        elif probe in defaults:
            t("%s empty: the production default" % probe, defaults[probe], c.get(probe))
    sc = dict(chart["securityContext"])
    if "securityContext" in v:
        handled.add("securityContext")
        for k, val in (v["securityContext"] or {}).items():
            if val is None:
                sc.pop(k, None)
            else:
                sc[k] = val
    if has("runAsUser"):
        sc["runAsUser"] = v["runAsUser"]
    t("securityContext (the chart's restricted one, merged with the file's)", sc, c.get("securityContext"))
    if has("podSecurityContext"):
        t("podSecurityContext", v["podSecurityContext"], spec.get("securityContext"))

    # metadata
    if has("podLabels"):
        t("podLabels", v["podLabels"], {k: pod["metadata"]["labels"].get(k) for k in v["podLabels"]})
    if has("podAnnotations"):
        t("podAnnotations", v["podAnnotations"],
          {k: pod["metadata"].get("annotations", {}).get(k) for k in v["podAnnotations"]})
    if has("deploymentAnnotations"):
        t("deploymentAnnotations", v["deploymentAnnotations"],
          {k: dep["metadata"].get("annotations", {}).get(k) for k in v["deploymentAnnotations"]})
    if has("customLabels"):
        t("customLabels on every object", [], [d["metadata"]["name"] for d in docs if any(
            d["metadata"].get("labels", {}).get(k) != x for k, x in v["customLabels"].items())])
    if has("customAnnotations"):
        t("customAnnotations on every object", [], [d["metadata"]["name"] for d in docs if any(
            (d["metadata"].get("annotations") or {}).get(k) != x for k, x in v["customAnnotations"].items())])

    # service, service account, RBAC
    s = v.get("service") or {}
    handled.add("service")
    svc = one(docs, "Service")
    port = s.get("port", 443)
    t("service.port -> the Service and every APIService", [port] * (1 + len(want_apis)),
      [svc["spec"]["ports"][0]["port"]] + [a["spec"]["service"]["port"] for a in docs if a["kind"] == "APIService"])
    t("service.type", s.get("type") or "ClusterIP", svc["spec"]["type"])
    dual = s.get("ipDualStack") or {}
    if dual.get("enabled"):
        t("service.ipDualStack", [dual.get("ipFamilies", ["IPv6", "IPv4"]), dual.get("ipFamilyPolicy", "PreferDualStack")],
          [svc["spec"].get("ipFamilies"), svc["spec"].get("ipFamilyPolicy")])
    if s.get("clusterIP"):
        t("service.clusterIP", s["clusterIP"], svc["spec"].get("clusterIP"))
    if s.get("annotations"):
        t("service.annotations", s["annotations"],
          {k: svc["metadata"].get("annotations", {}).get(k) for k in s["annotations"]})
    sa = v.get("serviceAccount") or {}
    handled.add("serviceAccount")
    create = sa.get("create", True)
    fullname = dep["metadata"]["name"]
    sa_name = sa.get("name") or (fullname if create else "default")
    t("serviceAccount.create/name: the ServiceAccount object", [sa_name] if create else [],
      [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"])
    if create and sa.get("automountServiceAccountToken") is not None:
        t("serviceAccount.automountServiceAccountToken (on the ServiceAccount)", sa["automountServiceAccountToken"],
          one(docs, "ServiceAccount").get("automountServiceAccountToken"))
    t("serviceAccount name used by the pod and every binding", [sa_name],
      sorted({spec["serviceAccountName"]} | {s2["name"] for d in docs if d["kind"].endswith("Binding")
                                             for s2 in d["subjects"] if s2["name"] != "horizontal-pod-autoscaler"}))
    rb = v.get("rbac") or {}
    handled.add("rbac")
    n_rbac = len([d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "RoleBinding", "Role")])
    t("rbac.create", rb.get("create", True), n_rbac > 0)
    if rb.get("create", True):
        reader = "extension-apiserver-authentication-reader"
        auth = sorted("%s %s/%s -> %s %s" % (
            d["kind"], d["metadata"].get("namespace", "-"), d["metadata"]["name"].replace(fullname, "<fullname>"),
            d["roleRef"]["kind"], d["roleRef"]["name"])
            for d in docs if d["kind"].endswith("Binding") and d["roleRef"]["name"] == reader)
        if rb.get("useAuthReaderClusterRole"):
            want_auth = ["ClusterRoleBinding -/<fullname>-auth-reader -> ClusterRole " + reader]
        else:
            want_auth = ["RoleBinding kube-system/<fullname>-auth-reader -> Role " + reader]
        t("rbac.useAuthReaderClusterRole", want_auth, auth)
        roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
        for key, group in (("customMetrics", "custom.metrics.k8s.io"), ("externalMetrics", "external.metrics.k8s.io")):
            if group.split(".")[0] in {a.split(".")[1] for a in want_apis}:
                want_res = (rb.get(key) or {}).get("resources") or ["*"]
                got_res = [r["resources"] for d in docs if d["kind"] == "ClusterRoleBinding"
                           and any(x.get("name") == "horizontal-pod-autoscaler" for x in d["subjects"])
                           for r in roles.get(d["roleRef"]["name"], {}).get("rules", []) if group in r["apiGroups"]]
                t("rbac.%s.resources: what the HPA controller may read" % key, [want_res], got_res)

    # PodDisruptionBudget
    pdbv = dict(chart["podDisruptionBudget"])
    if "podDisruptionBudget" in v:
        handled.add("podDisruptionBudget")
        for k, val in (v["podDisruptionBudget"] or {}).items():
            pdbv[k] = val
    pdb = one(docs, "PodDisruptionBudget")
    if pdbv.get("enabled"):
        want_pdb = ({"minAvailable": pdbv["minAvailable"]} if pdbv.get("minAvailable") is not None
                    else {"maxUnavailable": pdbv["maxUnavailable"]})
        got = {k: pdb["spec"][k] for k in ("minAvailable", "maxUnavailable") if pdb and k in pdb["spec"]}
        t("podDisruptionBudget (minAvailable when set, else maxUnavailable)", want_pdb, got)
        t("podDisruptionBudget.unhealthyPodEvictionPolicy", pdbv.get("unhealthyPodEvictionPolicy"),
          pdb and pdb["spec"].get("unhealthyPodEvictionPolicy"))
        t("the PodDisruptionBudget selects the pods", True,
          bool(pdb) and selects(pdb["spec"]["selector"], pod["metadata"]["labels"]))
    else:
        t("podDisruptionBudget.enabled false: none", None, pdb)

    # serving certificate
    tls = v.get("tls") or {}
    cm = v.get("certManager") or {}
    handled.update(["tls", "certManager"])
    apiservices = [a for a in docs if a["kind"] == "APIService"]
    tls_args = [a for a in args if a.startswith("--tls-")]
    if cm.get("enabled"):
        certs = [d for d in docs if d["kind"] == "Certificate"]
        serving = [d for d in certs if not d["spec"].get("isCA")]
        vol = [x for x in spec["volumes"] if x["name"] == "serving-cert"]
        t("certManager.enabled: a CA and a serving certificate, mounted", [True, True],
          [len(certs) == 2 and len(serving) == 1,
           bool(vol) and bool(serving) and vol[0]["secret"]["secretName"] == serving[0]["spec"]["secretName"]])
        t("certManager.enabled: the serving certificate names the Service", True,
          bool(serving) and "%s.%s.svc" % (svc["metadata"]["name"], ns) in serving[0]["spec"]["dnsNames"])
        t("certManager.enabled: CA injected into every APIService, verified", [True] * len(apiservices),
          [a["metadata"].get("annotations", {}).get("cert-manager.io/inject-ca-from", "").endswith("-root-cert")
           and a["spec"]["insecureSkipTLSVerify"] is False for a in apiservices])
        t("certManager.enabled: --tls-cert-file/--tls-private-key-file", 2, len(tls_args))
        t("certManager.caCertRevisionHistoryLimit, certRevisionHistoryLimit",
          [cm.get("caCertRevisionHistoryLimit"), cm.get("certRevisionHistoryLimit")],
          [next((d["spec"].get("revisionHistoryLimit") for d in certs if d["spec"].get("isCA")), None),
           serving[0]["spec"].get("revisionHistoryLimit") if serving else "no serving certificate"])
    elif tls.get("enable"):
        t("tls.enable: caBundle on every APIService", [True] * len(apiservices),
          ["caBundle" in a["spec"] and a["spec"]["insecureSkipTLSVerify"] is False for a in apiservices])
    else:
        t("no tls.enable/certManager: self-signed, APIServices skip verification", [[True] * len(apiservices), []],
          [[a["spec"].get("insecureSkipTLSVerify") is True for a in apiservices], tls_args])

    if has("extraManifests"):
        want_extra = []
        for m in v["extraManifests"]:
            m = yaml.safe_load(m.replace("{{ .Release.Namespace }}", namespace)) if isinstance(m, str) else m
            want_extra.append(m)
        key = lambda x: json.dumps(x, sort_keys=True)  # noqa: E731 (helm orders objects by kind)
        t("extraManifests (templated)", sorted(want_extra, key=key),
          sorted([d for d in docs if d in want_extra], key=key))

    # values prometheus-adapter's chart has and this one ignores on purpose (docs/helm.md)
    handled.update(["psp", "automountServiceAccountToken"])
    t("the service account token is mounted (the adapter needs it)", True, spec.get("automountServiceAccountToken"))
    if "image" in v:
        handled.add("image")
        t("image.repository/tag (prometheus-adapter's image) not used", "custom-metrics-adapter:" + chart_app_version(),
          c["image"])
        if (v["image"] or {}).get("pullSecrets"):
            t("image.pullSecrets", v["image"]["pullSecrets"],
              [x["name"] for x in spec.get("imagePullSecrets", []) if x["name"] in v["image"]["pullSecrets"]])

    unknown = sorted(set(v) - handled)
    check("%s: every key has a check" % name, not unknown, "keys nobody checks: %s" % unknown)
    return 0


def chart_app_version():
    return str(yaml.safe_load(open(os.environ["CHART_YAML"]))["appVersion"])


# --- drift KUSTOMIZE HELM LABEL: the objects that matter are the same -------------------------------
def normalise(docs):
    """Per kind, the fields that matter, with names that legitimately differ replaced."""
    dep = one(docs, "Deployment")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    sa = one(docs, "ServiceAccount")["metadata"]
    svc = one(docs, "Service")
    cm = rules_configmap(docs)

    def sel(s):
        return "<selects the adapter's pods>" if selects(s, pod_labels) else s

    def subj(s):
        if s.get("kind") == "ServiceAccount" and s["name"] == sa["name"] and s.get("namespace") == sa["namespace"]:
            return {"kind": "ServiceAccount", "name": "<adapter>", "namespace": "<adapter namespace>"}
        return s

    def canon(items):
        return sorted(items, key=lambda x: json.dumps(x, sort_keys=True))

    def canon_rules(rules):
        return canon([{k: sorted(x) if isinstance(x, list) else x for k, x in r.items()} for r in rules])

    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    bound = set()
    bindings = []
    for b in docs:
        if not b["kind"].endswith("RoleBinding"):
            continue
        ref = b["roleRef"]
        if ref["kind"] == "ClusterRole" and ref["name"] in roles and not ref["name"].startswith("system:"):
            bound.add(ref["name"])
            role = {"rules": canon_rules(roles[ref["name"]]["rules"])}
        else:
            role = {"kind": ref["kind"], "name": ref["name"]}
        bindings.append({"kind": b["kind"], "namespace": b["metadata"].get("namespace"), "role": role,
                         "subjects": canon([subj(x) for x in b["subjects"]])})
    other_roles = canon([{"name": n, "rules": canon_rules(r["rules"]),
                          "aggregate": sorted(k for k, x in r["metadata"].get("labels", {}).items()
                                              if k.startswith("rbac.authorization.k8s.io/aggregate"))}
                         for n, r in roles.items() if n not in bound])

    apis = {}
    for a in docs:
        if a["kind"] == "APIService":
            s = dict(a["spec"])
            s["service"] = dict(s["service"], name="<service>" if s["service"]["name"] == svc["metadata"]["name"]
                                else s["service"]["name"], namespace=s["service"]["namespace"])
            apis[a["metadata"]["name"]] = s

    d = json.loads(json.dumps(dep["spec"]))
    d["selector"] = sel(d["selector"])
    d["template"]["metadata"] = "<pod metadata: labels and annotations>"
    ps = d["template"]["spec"]
    for t in ps.get("topologySpreadConstraints", []):
        t["labelSelector"] = sel(t.get("labelSelector"))
    for vol in ps.get("volumes", []):
        if vol.get("configMap", {}).get("name") == cm["metadata"]["name"]:
            vol["configMap"]["name"] = "<the rules ConfigMap>"
    ps["serviceAccountName"] = "<adapter>" if ps["serviceAccountName"] == sa["name"] else ps["serviceAccountName"]
    pdb = one(docs, "PodDisruptionBudget")
    pdb_spec = dict(pdb["spec"], selector=sel(pdb["spec"]["selector"])) if pdb else None
    svc_spec = dict(svc["spec"], selector=sel(svc["spec"]["selector"]))
    return {
        "RBAC bindings (kind, namespace, role's rules or system role, subjects)": canon(bindings),
        "ClusterRoles no binding of the adapter uses (aggregated readers)": other_roles,
        "APIServices (name -> spec)": apis,
        "Deployment args": ps["containers"][0]["args"],
        "Deployment spec (replicas, strategy, scheduling, probes, resources, securityContext, volumes)": d,
        "PodDisruptionBudget spec": pdb_spec,
        "Service spec": svc_spec,
        "the rule file": yaml.safe_load(cm["data"]["config.yaml"]),
        "namespaced objects: kind -> namespace": sorted(
            {"%s=%s" % (x["kind"], "<adapter namespace>" if x["metadata"].get("namespace") == sa["namespace"]
                        else x["metadata"].get("namespace")) for x in docs if x["kind"] not in CLUSTER_SCOPED}),
    }


def cmd_drift(kustomized, helm_rendered, label):
    a, b = normalise(load(kustomized)), normalise(load(helm_rendered))
    for key in a:
        eq("drift %s: %s" % (label, key), a[key], b[key])
    return 0


# --- notes NOTES_FILE "API API ..." SELF_SIGNED(yes|no) -------------------------------------------
def cmd_notes(path, label, want, self_signed):
    text = open(path).read()
    listed = sorted(re.findall(r"^\s+(v1beta\d\.[a-z.]+k8s\.io)\s*$", text, re.M))
    eq("%s: NOTES.txt lists exactly the registered APIServices" % label, sorted(want.split()), listed)
    eq("%s: NOTES.txt says the APIServices skip verification iff the certificate is self-signed" % label,
       self_signed == "yes", "insecureSkipTLSVerify" in text)
    return 0


if __name__ == "__main__":
    commands = {"extract": cmd_extract, "groups": cmd_groups, "default-rules": cmd_default_rules,
                "honoured": cmd_honoured, "drift": cmd_drift, "notes": cmd_notes}
    sys.exit(commands[sys.argv[1]](*sys.argv[2:]))
PY
export CHART_YAML="$chart/Chart.yaml"

# accepted_args LABEL DIR: the rendered arguments, with --config pointed at a valid rule file, pass
# the adapter's flag parsing (--check-config parses every flag, then loads the rules).
accepted_args() {
  local label=$1 dir=$2 args=()
  mapfile -t args < <(sed "s|^--config=.*|--config=$CMA_ROOT/config/gpu-dcgm.yaml|" "$dir/args")
  t_ok "$label: the adapter accepts every rendered argument (--check-config)" \
    "$bin" "${args[@]}" --check-config
}

# --- 1. default values --------------------------------------------------------------------------------
t_ok "helm lint --strict (default values)" "$H" lint --strict "$chart"
d="$tmp/default"
mkdir -p "$d"
if must "helm template (default values)" render "$d/all.yaml" custom-metrics-adapter custom-metrics; then
  python3 "$check_py" extract "$d/all.yaml" "$d"
  t_eq "default values: the objects rendered" "APIService v1beta1.custom.metrics.k8s.io
APIService v1beta2.custom.metrics.k8s.io
ClusterRole custom-metrics-adapter-custom-metrics-reader
ClusterRole custom-metrics-adapter-metricrules
ClusterRole custom-metrics-adapter-metricrules-edit
ClusterRole custom-metrics-adapter-metricrules-view
ClusterRole custom-metrics-adapter-metrics-read
ClusterRole custom-metrics-adapter-resource-reader
ClusterRoleBinding custom-metrics-adapter-custom-metrics-reader-hpa
ClusterRoleBinding custom-metrics-adapter-metricrules
ClusterRoleBinding custom-metrics-adapter-resource-reader
ClusterRoleBinding custom-metrics-adapter:system:auth-delegator
ConfigMap custom-metrics-adapter
Deployment custom-metrics-adapter
PodDisruptionBudget custom-metrics-adapter
RoleBinding custom-metrics-adapter-auth-reader
Service custom-metrics-adapter
ServiceAccount custom-metrics-adapter" "$(cat "$d/objects")"
  report default-rules "$d/all.yaml" ../shared/fixtures/prometheus-adapter-configs/01-helm-chart-default.yaml
  report groups "$d/all.yaml" "default values" "v1beta1.custom.metrics.k8s.io v1beta2.custom.metrics.k8s.io"
  t_ok "default values: the rule file passes --check-config" "$bin" --config="$d/config.yaml" --check-config
  accepted_args "default values" "$d"
  mkdir -p "$tmp/base-extract"
  "$KUBECTL" kustomize deploy/base -o "$tmp/base-extract/all.yaml" &&
    python3 "$check_py" extract "$tmp/base-extract/all.yaml" "$tmp/base-extract"
  app_version=$(sed -n 's/^appVersion: "\(.*\)"$/\1/p' "$chart/Chart.yaml")
  t_eq "default values: image custom-metrics-adapter:<appVersion>, the same as deploy/base's" \
    "custom-metrics-adapter:$app_version custom-metrics-adapter:$app_version" \
    "$(cat "$d/image") $(cat "$tmp/base-extract/image" 2>/dev/null)"
fi

# --- 2. group switches, layouts, contradictions ------------------------------------------------------------
# Rules for all three groups: deploy/base's rule file, as chart values (what the drift test uses too).
"$KUBECTL" kustomize deploy/base -o "$tmp/base.yaml"
python3 - "$tmp/base.yaml" "$tmp/base-rules.values.yaml" <<'PY'
import sys, yaml
cm = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ConfigMap"][0]
cfg = yaml.safe_load(cm["data"]["config.yaml"])
yaml.safe_dump({"rules": {"default": False, "custom": cfg["rules"], "external": cfg["externalRules"],
                          "resource": cfg["resourceRules"]}}, open(sys.argv[2], "w"), sort_keys=False)
PY
rules3="$tmp/base-rules.values.yaml"
C1=v1beta1.custom.metrics.k8s.io
C2=v1beta2.custom.metrics.k8s.io
E1=v1beta1.external.metrics.k8s.io
R1=v1beta1.metrics.k8s.io
# switch LABEL "EXPECTED APIS" HELM_ARGS...: lint, render and check one combination.
switch() {
  local label=$1 want=$2 dir
  shift 2
  dir="$tmp/switch-${label//[^a-z0-9]/-}"
  mkdir -p "$dir"
  t_ok "$label: helm lint --strict" "$H" lint --strict "$chart" "$@"
  if must "$label: helm template" render "$dir/all.yaml" cma metrics "$@"; then
    python3 "$check_py" extract "$dir/all.yaml" "$dir"
    report groups "$dir/all.yaml" "$label" "$want"
    [ -f "$dir/config.yaml" ] &&
      t_ok "$label: the rule file passes --check-config" "$bin" --config="$dir/config.yaml" --check-config
    accepted_args "$label" "$dir"
  fi
}
switch "rules for all groups" "$C1 $C2 $E1 $R1" -f "$rules3"
switch "apiGroups.custom=false" "$E1 $R1" -f "$rules3" --set apiGroups.custom=false
switch "apiGroups.external=false" "$C1 $C2 $R1" -f "$rules3" --set apiGroups.external=false
switch "apiGroups.resource=false" "$C1 $C2 $E1" -f "$rules3" --set apiGroups.resource=false
switch "layout=next-to-keda" "$C1 $C2" -f "$rules3" --set layout=next-to-keda
switch "layout=next-to-metrics-server" "$C1 $C2 $E1" -f "$rules3" --set layout=next-to-metrics-server
switch "rules.existing with apiGroups.external=true" "$C1 $C2 $E1" \
  --set rules.existing=my-rules --set apiGroups.external=true
switch "rules.existing, default values otherwise (as prometheus-adapter's chart: custom)" "$C1 $C2" \
  --set rules.existing=my-rules
switch "no rules at all" "" --set rules.default=false

# refused VALUES_LABEL "MESSAGE PART" HELM_ARGS...: rendering stops and says why.
refused() {
  local label=$1 want=$2 out="$tmp/refused.yaml"
  shift 2
  if render "$out" cma metrics "$@"; then
    t_fail "$label: helm template refuses the values" "it rendered"
  else
    t_ok "$label: helm template refuses the values, saying: $want" grep -qF -- "$want" "$out.err"
  fi
}
refused "apiGroups.external=true without external rules" \
  "apiGroups.external is true but rules.external is empty and rules.existing is not set" \
  --set apiGroups.external=true
refused "layout=next-to-keda with apiGroups.external=true" \
  "apiGroups.external is true but layout next-to-keda leaves that group to KEDA" \
  -f "$rules3" --set layout=next-to-keda --set apiGroups.external=true
refused "layout=next-to-metrics-server with apiGroups.resource=true" \
  "apiGroups.resource is true but layout next-to-metrics-server leaves that group to metrics-server" \
  -f "$rules3" --set layout=next-to-metrics-server --set apiGroups.resource=true
refused "layout=bogus" 'layout: "bogus" is not one of: all, next-to-keda, next-to-metrics-server' \
  --set layout=bogus
refused "apiGroups.custom=yes" 'apiGroups.custom: "yes" is not one of: auto, true, false' \
  --set apiGroups.custom=yes
refused "tls.enable with the placeholder comments of prometheus-adapter's values" \
  "tls.enable is true but tls.ca is not a PEM certificate" \
  --set tls.enable=true --set-string "tls.ca=# Public CA file that signed the APIService"
refused "tls.enable and certManager.enabled" \
  "tls.enable and certManager.enabled are both true" --set tls.enable=true --set certManager.enabled=true
refused "podDisruptionBudget without minAvailable and maxUnavailable" \
  "podDisruptionBudget.enabled is true but neither minAvailable nor maxUnavailable is set" \
  --set podDisruptionBudget.maxUnavailable=null

# --- 3. values files for the prometheus-community chart ------------------------------------------------
# check_values FILE RELEASE: lint, render (namespace monitoring), every key honoured, the arguments
# accepted, the rendered rule file loaded by the adapter.
check_values() {
  local values=$1 release=$2 f dir
  f=$(basename "$values" .yaml)
  dir="$tmp/values-$f"
  mkdir -p "$dir"
  t_ok "$f: helm lint --strict" "$H" lint --strict "$chart" -f "$values"
  if ! must "$f: helm template" render "$dir/all.yaml" "$release" monitoring -f "$values"; then
    return
  fi
  python3 "$check_py" extract "$dir/all.yaml" "$dir"
  report honoured "$values" "$dir/all.yaml" "$release" monitoring "$chart/values.yaml" \
    "$chart/files/default-rules.yaml"
  accepted_args "$f" "$dir"
  if [ ! -f "$dir/config.yaml" ]; then
    return # rules.existing: the rule file is the user's ConfigMap
  fi
  case $f in
    devsecopssamples-eks-gpu)
      # Its second custom rule nests metricsQuery under name: prometheus-adapter ignores the key and
      # the rule queries nothing; this adapter refuses the file at start-up and says where.
      if "$bin" --config="$dir/config.yaml" --check-config >"$dir/check.out" 2>&1; then
        t_fail "$f: the adapter refuses the rendered rule file" "--check-config accepted it"
      else
        t_ok "$f: the adapter refuses the rendered rule file with file:line:column" grep -qE \
          'config\.yaml:[0-9]+:[0-9]+: unknown key "metricsQuery" \(allowed: matches, as\)' "$dir/check.out"
      fi
      ;;
    *)
      t_ok "$f: the rendered rule file passes --check-config" "$bin" --config="$dir/config.yaml" --check-config
      ;;
  esac
}

# Published by users (sources in each file's header).
n_files=0
for values in "$values_dir"/*.yaml; do
  n_files=$((n_files + 1))
  check_values "$values" prometheus-adapter
done
t_ok "at least 4 published values files were checked ($n_files)" test "$n_files" -ge 4

# Written here for the prometheus-adapter chart keys no published file above sets.
cat >"$tmp/synthetic-every-other-key.yaml" <<'EOF'
fullnameOverride: metrics-adapter
namespaceOverride: platform
prometheus:
  url: http://thanos-query.{{ .Release.Namespace }}.svc
  port: 10902
  path: /tenant-a
logLevel: 6
listenPort: 8443
replicas: 3
rules:
  existing: team-rules
  external:
  - seriesQuery: 'queue_depth{namespace!=""}'
    metricsQuery: max(<<.Series>>{<<.LabelMatchers>>})
hostNetwork:
  enabled: true
dnsPolicy: ClusterFirstWithHostNet
dnsConfig:
  options: [{name: ndots, value: "2"}]
serviceAccount:
  create: false
  name: shared-metrics
rbac:
  create: false
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector: {matchLabels: {app.kubernetes.io/name: custom-metrics-adapter}}
topologySpreadConstraints:
- {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway,
   labelSelector: {matchLabels: {app.kubernetes.io/name: custom-metrics-adapter}}}
priorityClassName: platform-critical
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: monitoring, effect: NoSchedule}]
livenessProbe:
  tcpSocket: {port: https}
  periodSeconds: 20
startupProbe:
  httpGet: {path: /livez, port: https, scheme: HTTPS}
  failureThreshold: 30
resources:
  requests: {cpu: 200m, memory: 64Mi}
securityContext:
  runAsUser: 1000
podSecurityContext:
  fsGroup: 2000
podDisruptionBudget:
  enabled: true
  minAvailable: 2
  unhealthyPodEvictionPolicy: IfHealthyBudget
strategy:
  type: Recreate
env: [{name: TZ, value: UTC}]
extraContainers: [{name: sidecar, image: registry.example/sidecar:1}]
podLabels: {team: ml}
podAnnotations: {example.com/scrape: "false"}
deploymentAnnotations: {example.com/owner: platform}
customLabels: {example.com/tier: platform}
customAnnotations: {example.com/contact: platform-team}
service:
  port: 8443
  type: ClusterIP
  clusterIP: 10.96.200.10
  annotations: {example.com/service: metrics}
  ipDualStack: {enabled: true}
image:
  repository: registry.k8s.io/prometheus-adapter/prometheus-adapter
  tag: v0.12.0
  pullSecrets: [regcred]
EOF
cat >"$tmp/synthetic-rbac.yaml" <<'EOF'
rbac:
  useAuthReaderClusterRole: true
  customMetrics:
    resources: ["pods/*", "namespaces/*"]
  externalMetrics:
    resources: [queue_depth]
rules:
  default: false
  custom:
  - seriesQuery: 'http_requests_total{namespace!="",pod!=""}'
    resources: {template: "<<.Resource>>"}
    name: {matches: ^(.*)_total$, as: "${1}_per_second"}
    metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)
  external:
  - seriesQuery: 'queue_depth{namespace!=""}'
    resources: {overrides: {namespace: {resource: namespace}}}
    metricsQuery: max(<<.Series>>{<<.LabelMatchers>>})
podDisruptionBudget:
  enabled: false
serviceAccount:
  automountServiceAccountToken: false
certManager:
  enabled: true
  caCertRevisionHistoryLimit: 2
  certRevisionHistoryLimit: 3
extraManifests:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: extra-object, namespace: monitoring}
  data: {a: b}
- |
  apiVersion: v1
  kind: Secret
  metadata: {name: extra-templated, namespace: {{ .Release.Namespace }}}
  stringData: {token: x}
EOF
check_values "$tmp/synthetic-every-other-key.yaml" cma
check_values "$tmp/synthetic-rbac.yaml" cma

# --- 4. drift between the chart and deploy/ ---------------------------------------------------------------
# The chart with only deploy/base's rules as values, released as custom-metrics-adapter in
# custom-metrics (deploy/'s names), against each overlay. Each comparison guards one promise:
#  - RBAC: the adapter gets the same permissions (and the HPA controller the same read access) from
#    either install path; role names may differ, so bindings are compared by the rules they grant.
#  - APIServices: the same group versions, priorities, TLS settings and Service port.
#  - Deployment args: the same flags in the same order (a later flag wins).
#  - Deployment spec, PDB, Service: the same production settings (replicas, spread, priority class,
#    probes, resources, securityContext, volumes); selectors only need to select their own pods.
#  - the rule file: the chart assembles deploy/base's rules back into the same file.
#  - MetricRules' RBAC (deploy/components/metric-rules) is in overlays/all only; the chart renders it
#    by default (metricRules.*), so the other layouts are compared with it switched off.
for layout in all next-to-keda next-to-metrics-server; do
  dir="$tmp/drift-$layout"
  mkdir -p "$dir"
  mr_off=()
  [ "$layout" = all ] || mr_off=(--set metricRules.enabled=false --set metricRules.aggregateToDefaultRoles=false
    --set metricRules.metricsReadersAggregateToView=false)
  if must "drift $layout: kubectl kustomize deploy/overlays/$layout" \
    "$KUBECTL" kustomize "deploy/overlays/$layout" -o "$dir/kustomize.yaml" &&
    must "drift $layout: helm template with deploy/base's rules and layout=$layout" \
      render "$dir/helm.yaml" custom-metrics-adapter custom-metrics -f "$rules3" --set "layout=$layout" "${mr_off[@]}"; then
    report drift "$dir/kustomize.yaml" "$dir/helm.yaml" "$layout"
  fi
done

# --- 5. tls.enable: Secret + args + caBundle work with the real adapter --------------------------------
tdir="$tmp/tls"
mkdir -p "$tdir/serving-cert" "$tdir/adapter"
svc_dns=cma-custom-metrics-adapter.metrics.svc
if openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=test-aggregator-ca -keyout "$tdir/ca.key" -out "$tdir/ca.crt" >"$tdir/openssl.log" 2>&1 &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$svc_dns" \
    -keyout "$tdir/tls.key" -out "$tdir/tls.csr" >>"$tdir/openssl.log" 2>&1 &&
  openssl x509 -req -in "$tdir/tls.csr" -CA "$tdir/ca.crt" -CAkey "$tdir/ca.key" -CAcreateserial \
    -days 2 -extfile <(printf 'subjectAltName=DNS:%s\n' "$svc_dns") -out "$tdir/tls.crt" \
    >>"$tdir/openssl.log" 2>&1; then
  t_pass "tls: openssl makes a CA and a serving certificate for $svc_dns"
else
  t_fail "tls: openssl makes a CA and a serving certificate" "$(cat "$tdir/openssl.log")"
fi
if must "tls: helm template with tls.enable and the PEM files" render "$tdir/all.yaml" cma metrics \
  --set tls.enable=true --set-file tls.ca="$tdir/ca.crt" --set-file tls.certificate="$tdir/tls.crt" \
  --set-file tls.key="$tdir/tls.key"; then
  python3 "$check_py" extract "$tdir/all.yaml" "$tdir/adapter"
  t_ok "tls: the Secret holds the certificate" cmp "$tdir/tls.crt" "$tdir/adapter/tls.crt"
  t_ok "tls: the Secret holds the key" cmp "$tdir/tls.key" "$tdir/adapter/tls.key"
  t_ok "tls: every APIService's caBundle is the CA" cmp "$tdir/ca.crt" "$tdir/adapter/caBundle.pem"
  t_eq "tls: APIServices verify (insecureSkipTLSVerify false on each)" "false false" \
    "$(cat "$tdir/adapter/insecureSkipTLSVerify")"
  # The pod's files: the ConfigMap at /etc/adapter, the Secret at /var/run/serving-cert, the
  # emptyDir at /tmp; the rendered args run with those paths mapped into this test's temp dir, on
  # a free loopback port, with the fake kube-apiserver as the cluster and a closed port as Prometheus
  # (the first relist fails fast; /readyz only waits for it to finish).
  cp "$tdir/adapter/tls.crt" "$tdir/adapter/tls.key" "$tdir/serving-cert/"
  mapfile -t args < <(sed -e "s|/etc/adapter/|$tdir/adapter/|; s|/var/run/serving-cert/|$tdir/serving-cert/|" \
    -e "s|^--cert-dir=/tmp/|--cert-dir=$tdir/|; s|^--catalog-cache-file=/tmp/|--catalog-cache-file=$tdir/|" -e '/^--secure-port=/d; /^--prometheus-url=/d' "$tdir/adapter/args")
  if start_fake_kube ""; then
    port=$(free_port)
    closed=$(free_port)
    _cma_spawn "$tdir/adapter.log" "$bin" "${args[@]}" --bind-address=127.0.0.1 --secure-port="$port" \
      --prometheus-url="http://127.0.0.1:$closed" --lister-kubeconfig="$KUBE_KUBECONFIG"
    pid=$_CMA_SPAWNED
    if _cma_wait_ready adapter "$pid" "$tdir/adapter.log" "https://$svc_dns:$port/livez" \
      --cacert "$tdir/adapter/caBundle.pem" --resolve "$svc_dns:$port:127.0.0.1"; then
      t_pass "tls: /livez answers over TLS verified with the APIService's caBundle for $svc_dns"
      deadline=$((SECONDS + 60))
      while :; do
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$tdir/adapter/caBundle.pem" \
          --resolve "$svc_dns:$port:127.0.0.1" "https://$svc_dns:$port/readyz")
        [ "$code" = 200 ] || [ "$SECONDS" -ge "$deadline" ] && break
        sleep 0.3
      done
      t_eq "tls: /readyz answers 200 (the readiness probe's path)" 200 "$code"
    else
      t_fail "tls: the adapter serves with the chart's certificate" "$(tail -n 20 "$tdir/adapter.log")"
    fi
    cma_stop "$pid"
  else
    t_fail "tls: the fake kube-apiserver starts"
  fi
fi

# --- 6. NOTES.txt ---------------------------------------------------------------------------------------------
# helm prints NOTES.txt only on install/upgrade, which need a cluster; a copy of the chart renders
# the same template (include of templates/NOTES.txt) into a ConfigMap that helm template prints.
ncopy="$tmp/notes-chart"
mkdir -p "$ncopy"
cp -r "$chart" "$ncopy/"
cat >"$ncopy/custom-metrics-adapter/templates/zz-rendered-notes.yaml" <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata: {name: rendered-notes}
data:
  notes: {{ include "custom-metrics-adapter/templates/NOTES.txt" . | toJson }}
EOF
# notes LABEL "APIS" SELF_SIGNED HELM_ARGS...
notes() {
  local label=$1 want=$2 self_signed=$3 dir="$tmp/notes-${1//[^a-z0-9]/-}"
  shift 3
  mkdir -p "$dir"
  if must "$label: helm template renders NOTES.txt" \
    render_chart "$ncopy/custom-metrics-adapter" "$dir/all.yaml" cma metrics "$@"; then
    python3 "$check_py" extract "$dir/all.yaml" "$dir"
    report notes "$dir/NOTES.txt" "$label" "$want" "$self_signed"
  fi
}
notes "NOTES, default values" "$C1 $C2" yes
notes "NOTES, rules for all groups" "$C1 $C2 $E1 $R1" yes -f "$rules3"
notes "NOTES, next-to-keda" "$C1 $C2" yes -f "$rules3" --set layout=next-to-keda
notes "NOTES, cert-manager, external only" "$E1" no --set rules.default=false \
  --set certManager.enabled=true --set-json 'rules.external=[{"seriesQuery":"up","metricsQuery":"up"}]'
notes "NOTES, no rules" "" yes --set rules.default=false

# 7. Who may scrape /metrics: the chart's metricsReaders and deploy/components/metrics-reader each
# render a ClusterRole granting exactly get on nonResourceURLs ["/metrics"], bound to exactly the
# configured subjects; the chart renders none with the default (empty) list.
mr_py="$tmp/metrics-reader.py"
cat >"$mr_py" <<'EOF'
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
want = json.loads(sys.argv[2])
roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"
         and any("/metrics" in r.get("nonResourceURLs", []) for r in d.get("rules", []))}
if not want:
    print("none" if not roles else "roles: %s" % sorted(roles))
    sys.exit(0)
out = []
for name, role in sorted(roles.items()):
    binds = [b for b in docs if b["kind"] == "ClusterRoleBinding" and b["roleRef"]["kind"] == "ClusterRole"
             and b["roleRef"]["name"] == name]
    compact = lambda v: json.dumps(v, sort_keys=True, separators=(",", ":"))
    out.append("role rules=%s bound=%s" % (compact(role["rules"]),
                                           compact([b["subjects"] for b in binds])))
print("\n".join(out))
EOF
mr_subjects='[{"kind":"ServiceAccount","name":"prometheus-k8s","namespace":"monitoring"},{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"team-sre"}]'
mr_rules='[{"nonResourceURLs":["/metrics"],"verbs":["get"]}]'
mr_want="role rules=$mr_rules bound=[$(jq -cS . <<<"$mr_subjects")]"
mrdir="$tmp/metrics-reader"
mkdir -p "$mrdir"
if must "metricsReaders: helm template with two subjects" \
  render "$mrdir/chart.yaml" cma metrics --set-json "metricsReaders=$mr_subjects"; then
  t_eq "metricsReaders: one ClusterRole over nonResourceURLs /metrics (get), bound to exactly those subjects" \
    "$mr_want" "$(python3 "$mr_py" "$mrdir/chart.yaml" "$mr_subjects")"
fi
if must "metricsReaders: helm template with the default values" render "$mrdir/default.yaml" cma metrics; then
  t_eq "metricsReaders empty (default): no ClusterRole over /metrics" none \
    "$(python3 "$mr_py" "$mrdir/default.yaml" '[]')"
fi
# deploy/components/metrics-reader, as an overlay uses it (a kustomization naming the component)
mkdir -p "$mrdir/overlay"
printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ncomponents:\n- %s\n' \
  "$(realpath --relative-to="$mrdir/overlay" deploy/components/metrics-reader)" >"$mrdir/overlay/kustomization.yaml"
comp_subjects='[{"kind":"ServiceAccount","name":"prometheus-k8s","namespace":"monitoring"}]'
if must "deploy/components/metrics-reader: kubectl kustomize" \
  "$KUBECTL" kustomize "$mrdir/overlay" -o "$mrdir/component.yaml"; then
  t_eq "deploy/components/metrics-reader: a ClusterRole over nonResourceURLs /metrics (get), bound to prometheus-k8s" \
    "role rules=$mr_rules bound=[$(jq -cS . <<<"$comp_subjects")]" \
    "$(python3 "$mr_py" "$mrdir/component.yaml" "$comp_subjects")"
fi
t_summary
