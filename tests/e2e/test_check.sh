#!/usr/bin/env bash
# test_check.sh: `custom-metrics-adapter check` and the chart's `helm test` hook (issue 24 part 5).
# A fake kube-apiserver (tests/lib/fake_kube_apiserver.py) stands in for the cluster's
# kube-apiserver and kube-aggregator: it answers GET of APIServices with the recorded objects
# (Available, and not Available with the aggregator's FailedDiscoveryCheck message; other names
# synthesised from them) and proxies /apis/custom.metrics.k8s.io/<version> to the running adapter,
# as the aggregator does for an APIService pointing at it. check runs from "a laptop": a kubeconfig
# with a bearer token. Checked: all Available and listing → exit 0 and the number of metrics the
# adapter's own discovery lists; an APIService not Available → exit 1 naming the reason and the
# aggregator's message; default names skip what is not registered; the adapter gone → discovery
# through the aggregator fails (503) and check says so; the hook renders the adapter's own image
# running `check` (no shell) with one --apiservice per APIService the release registers, RBAC for
# exactly those, and those arguments work with the binary.
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

bin=$(cma_adapter_bin)
tmp=$(cma_tmp)
C1=v1beta1.custom.metrics.k8s.io
C2=v1beta2.custom.metrics.k8s.io

gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json" --with-v1beta2 ||
  ! start_adapter config/gpu-dcgm.yaml; then
  t_fail "start Prometheus, the fake kube-apiserver and the adapter"
  t_summary
  exit 1
fi
wait_discovery DCGM_FI_DEV_GPU_UTIL >/dev/null
# the cluster's front: APIServices and the aggregator's proxy to the adapter
if ! start_fake_kube "$DCGM_DIR/pods.json" --proxy-metrics "$ADAPTER_URL" --proxy-custom-metrics \
  --apiservice "$C1=available" --apiservice "$C2=available"; then
  t_fail "start the fake kube-apiserver front"
  t_summary
  exit 1
fi
FRONT=$KUBE_KUBECONFIG
control() { curl -s --max-time 10 --cacert "$KUBE_CA" -H "Authorization: Bearer fake-admin" "$KUBE_URL$1" >/dev/null; }
# run_check ARGS...: OUT and RC of the check subcommand
run_check() {
  OUT=$("$bin" check "$@" 2>&1)
  RC=$?
}
n_v1=$(curl -s --max-time 10 --cacert "$ADAPTER_CA" "$ADAPTER_URL/apis/custom.metrics.k8s.io/v1beta1" | jq '.resources | length')
n_v2=$(curl -s --max-time 10 --cacert "$ADAPTER_CA" "$ADAPTER_URL/apis/custom.metrics.k8s.io/v1beta2" | jq '.resources | length')
t_ok "the adapter's own discovery lists metrics ($n_v1 in v1beta1, $n_v2 in v1beta2)" test "${n_v1:-0}" -gt 0 -a "${n_v2:-0}" -gt 0

# --- both Available, discovery through the aggregator lists the adapter's metrics ---------------
run_check --kubeconfig="$FRONT" --apiservice="$C1" --apiservice "$C2"
t_eq "both Available and listing: exit 0" 0 "$RC"
t_ok "v1beta1: ok with the adapter's metric count" grep -qxF \
  "ok   $C1: Available; discovery of custom.metrics.k8s.io/v1beta1 lists $n_v1 resources" <<<"$OUT"
t_ok "v1beta2: ok with the adapter's metric count" grep -qxF \
  "ok   $C2: Available; discovery of custom.metrics.k8s.io/v1beta2 lists $n_v2 resources" <<<"$OUT"
t_ok "summary line" grep -qxF "check: 2 APIServices working" <<<"$OUT"
t_ok "the requests went through kube-apiserver with the kubeconfig's token" \
  jq -se --arg p "/apis/custom.metrics.k8s.io/v1beta1" 'any(.[]; .path == $p and .status == 200)' "$KUBE_REQUEST_LOG"

# --- default names: what is registered is checked, the rest skipped ------------------------------
run_check --kubeconfig="$FRONT"
t_eq "default names: exit 0" 0 "$RC"
t_ok "default names: v1beta1.external.metrics.k8s.io not registered, skipped" \
  grep -qxF "skip v1beta1.external.metrics.k8s.io: not registered" <<<"$OUT"

# --- not Available: the aggregator's reason and message ------------------------------------------
control "/__fake/apiservice?name=$C2&state=unavailable"
run_check --kubeconfig="$FRONT"
t_eq "v1beta2 not Available: exit 1" 1 "$RC"
t_ok "v1beta2 not Available: reason and the aggregator's message" grep -qF \
  "FAIL $C2: not Available (status False, FailedDiscoveryCheck): failing or missing response from https://10.213.37.2:6443/apis/custom.metrics.k8s.io/v1beta2" <<<"$OUT"
t_ok "v1beta1 still ok" grep -qF "ok   $C1: Available" <<<"$OUT"
t_ok "summary: 1 of 2 not working" grep -qxF "check: 1 of 2 APIServices not working" <<<"$OUT"
control "/__fake/apiservice?name=v1beta1.metrics.k8s.io&state=unavailable"
run_check --kubeconfig="$FRONT" --apiservice=v1beta1.metrics.k8s.io
t_ok "a synthesised APIService of another group: not Available, named" \
  grep -qF "FAIL v1beta1.metrics.k8s.io: not Available (status False, FailedDiscoveryCheck)" <<<"$OUT"
run_check --kubeconfig="$FRONT" --apiservice=v1beta1.external.metrics.k8s.io
t_eq "an APIService asked for but not registered: exit 1" 1 "$RC"
t_ok "... says not registered" grep -qxF "FAIL v1beta1.external.metrics.k8s.io: not registered" <<<"$OUT"
control "/__fake/apiservice?name=$C2&state=available"

# --- the helm test hook ---------------------------------------------------------------------------
if tools=$("$CMA_ROOT/scripts/tools.sh"); then
  export HELM_CACHE_HOME="$tmp/helm/cache" HELM_CONFIG_HOME="$tmp/helm/config" HELM_DATA_HOME="$tmp/helm/data"
  chart=deploy/helm/custom-metrics-adapter
  "$tools/helm" template r "$chart" -n custom-metrics >"$tmp/default.yaml" 2>&1
  t_eq "helm template (default values) renders" 0 $?
  hook=$(python3 - "$tmp/default.yaml" <<'PY'
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
pod = [d for d in docs if d["kind"] == "Pod"][0]
dep = [d for d in docs if d["kind"] == "Deployment"][0]
role = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-test")][0]
c = pod["spec"]["containers"][0]
print(json.dumps({
    "hook": pod["metadata"]["annotations"]["helm.sh/hook"],
    "same_image": c["image"] == dep["spec"]["template"]["spec"]["containers"][0]["image"],
    "command": c.get("command"), "args": c["args"],
    "sa": pod["spec"]["serviceAccountName"],
    "role": role["rules"], "role_hook": role["metadata"]["annotations"]["helm.sh/hook"]}))
PY
  )
  t_json "hook: a test Pod with the Deployment's image, no command (no shell), args check + the APIServices" "$hook" \
    '"\(.hook) \(.same_image) \(.command) \(.args | join(" "))"' \
    "test true null check --apiservice=$C1 --apiservice=$C2"
  t_json "hook: its ClusterRole may get exactly those APIServices" "$hook" \
    '.role | "\(.[0].apiGroups[0]) \(.[0].resources[0]) \(.[0].verbs[0]) \(.[0].resourceNames | join(","))"' \
    "apiregistration.k8s.io apiservices get $C1,$C2"
  # the Pod's arguments work with the binary (in the cluster it uses the in-cluster config instead)
  args=$(jq -r '.args[1:] | join(" ")' <<<"$hook")
  # shellcheck disable=SC2086 # the rendered arguments, one per word
  run_check --kubeconfig="$FRONT" $args
  t_eq "the hook's arguments, run against the front: exit 0" 0 "$RC"
  "$tools/helm" template r "$chart" -n custom-metrics --set helmTest.enabled=false >"$tmp/off.yaml" 2>&1
  t_eq "helmTest.enabled=false: no hook objects" 0 "$(grep -c 'helm.sh/hook: test' "$tmp/off.yaml")"
else
  t_fail "scripts/tools.sh installs the pinned helm"
fi

# --- the adapter gone: the aggregator cannot reach it ---------------------------------------------
stop_adapter >/dev/null
run_check --kubeconfig="$FRONT" --apiservice="$C1"
t_eq "adapter stopped: exit 1" 1 "$RC"
t_ok "adapter stopped: discovery through the aggregator fails with 503, said" \
  grep -qF "FAIL $C1: GET /apis/custom.metrics.k8s.io/v1beta1: HTTP 503" <<<"$OUT"

# --- usage ---------------------------------------------------------------------------------------
run_check --kubeconfig=/nonexistent/kubeconfig
t_eq "a kubeconfig that cannot be read: exit 2" 2 "$RC"
t_ok "... naming it" grep -qF "/nonexistent/kubeconfig" <<<"$OUT"
run_check --bogus
t_eq "an unknown flag: exit 2" 2 "$RC"

t_summary
