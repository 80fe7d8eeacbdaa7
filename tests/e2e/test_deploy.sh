#!/usr/bin/env bash
# Checks deploy/: `kubectl kustomize` renders the base, the ConfigMap's rules pass the adapter's
# --check-config, the Deployment's args are flags the adapter accepts, and the APIServices point
# at the Service's port. (No cluster runs here; this checks what can be checked offline.)
# asan: no
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source tests/lib/common.sh
bin=${CMA_BIN:-build/custom-metrics-adapter}
tmp=$(cma_tmp)

t_ok "kustomize renders deploy/base" kubectl kustomize deploy/base -o "$tmp/all.yaml"
python3 - "$tmp" <<'PY'
import sys, yaml, os
tmp = sys.argv[1]
docs = [d for d in yaml.safe_load_all(open(os.path.join(tmp, "all.yaml"))) if d]
kinds = {}
for d in docs:
    kinds.setdefault(d["kind"], []).append(d)
open(os.path.join(tmp, "config.yaml"), "w").write(kinds["ConfigMap"][0]["data"]["config.yaml"])
args = kinds["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
args = [a if not a.startswith("--config=") else "--config=" + os.path.join(tmp, "config.yaml")
        for a in args]
open(os.path.join(tmp, "args"), "w").write("\n".join(args) + "\n")
svc = kinds["Service"][0]
port = svc["spec"]["ports"][0]["port"]
ok = all(a["spec"]["service"]["name"] == svc["metadata"]["name"] and a["spec"]["service"]["port"] == port
         for a in kinds["APIService"])
versions = sorted(a["spec"]["version"] for a in kinds["APIService"])
open(os.path.join(tmp, "apiservices"), "w").write(("ok" if ok else "mismatch") + " " + ",".join(versions) + "\n")
PY
t_ok "ConfigMap rules pass --check-config" "$bin" --config="$tmp/config.yaml" --check-config
mapfile -t args <"$tmp/args"
t_ok "Deployment args are accepted flags" "$bin" "${args[@]}" --check-config
t_eq "APIServices point at the Service" "ok v1beta1,v1beta2" "$(cat "$tmp/apiservices")"
t_summary
