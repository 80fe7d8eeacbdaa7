#!/usr/bin/env bash
# test_restart.sh: the catalog cache file (--catalog-cache-file) across restarts, with a real Prometheus (synthetic DCGM data) and the fake kube-apiserver: the first relist writes it; the adapter and Prometheus are stopped and the adapter alone restarted: discovery (custom v1beta1/v1beta2, external) answers at once with byte-identical documents although no relist can succeed, metric values answer 503 (nothing made up); a corrupt, a truncated, a foreign file and files from another config or another --metrics-max-age are each ignored with exactly one warning (empty discovery, the adapter keeps running); when Prometheus comes back (with a recording rule that adds a metric) the first relist replaces the loaded catalog and rewrites the file, which the next start loads.
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

gen_dcgm || exit 1
RELIST=2s
export RELIST
CACHE=$CMA_TMP/cache/catalog.cache
mkdir -p "$CMA_TMP/cache"
CONFIG=$CMA_TMP/restart.yaml
cat >"$CONFIG" <<'EOF'
# Two custom rules and one external rule; the first rule also lists cma_restart_marker, the
# recording rule Prometheus gets when it comes back, so a relist after the restart is visible.
rules:
- seriesQuery: '{__name__=~"DCGM_FI_DEV_GPU_UTIL|cma_restart_marker",namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
      Hostname: {resource: node}
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
- seriesQuery: 'DCGM_FI_DEV_FB_USED{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
externalRules:
- seriesQuery: '{__name__="DCGM_FI_DEV_GPU_UTIL",namespace!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>})
EOF

if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
G=/apis/custom.metrics.k8s.io
X=/apis/external.metrics.k8s.io/v1beta1
BERT="$G/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert"
BY_NAME="$G/v1beta1/namespaces/ml/pods/bert-0/DCGM_FI_DEV_GPU_UTIL"
EXTERNAL="$X/namespaces/ml/dcgm_fi_dev_gpu_util"
DOCS=("$G/v1beta1" "$G/v1beta2" "$X")

# docs_snapshot: the three discovery documents as served (each ends with one newline), one per
# line.
docs_snapshot() {
  local d
  for d in "${DOCS[@]}"; do
    printf '%s\n' "$(curl -s --max-time 10 --cacert "$ADAPTER_CA" "$ADAPTER_URL$d")"
  done
}
# warnings_matching ERE: how many lines of the current adapter's log match ERE.
warnings_matching() { adapter_log_since_start | grep -c -E -- "$1"; }
resources_count() { jq '.resources | length' <<<"$R_BODY"; }

# --- 1. first start: the first relist writes the file ---------------------------------------------
if ! start_adapter "$CONFIG" "--catalog-cache-file=$CACHE"; then
  t_fail "start the adapter"
  t_summary
  exit 1
fi
t_eq "first start: no cache file yet, said once" 1 \
  "$(warnings_matching 'catalog cache: .*does not exist yet')"
t_ok "first start: discovery lists DCGM_FI_DEV_GPU_UTIL" wait_discovery DCGM_FI_DEV_GPU_UTIL
t_ok "first start: the first relist writes the cache file" wait_adapter_log 'catalog cache: wrote' 60
t_eq "the cache file starts with its magic line" "cma-catalog-cache	1" "$(head -n 1 "$CACHE" 2>/dev/null)"
t_ok "no temporary file is left next to it" test ! -e "$CACHE.tmp"
before=$(docs_snapshot)
t_json "before: custom discovery lists 5 entries (3 + 2 resources)" "$(sed -n 1p <<<"$before")" '.resources | length' 5
t_json "before: external discovery lists DCGM_FI_DEV_GPU_UTIL" "$(sed -n 3p <<<"$before")" \
  '[.resources[].name] | join(" ")' DCGM_FI_DEV_GPU_UTIL
adapter_fetch "$BERT"
t_eq "before: by-selector answers 200" 200 "$R_STATUS"
want_bert=$(item_values "$R_BODY")
stop_adapter
t_eq "first adapter exits 0" 0 "$?"
cp "$CACHE" "$CMA_TMP/good.cache"

# --- 2. restart with the backend down: discovery from the file at once ---------------------------
stop_prometheus
if ! start_adapter "$CONFIG" "--catalog-cache-file=$CACHE"; then
  t_fail "restart the adapter with Prometheus down"
  t_summary
  exit 1
fi
after=$(docs_snapshot) # the first requests after /healthz answered
t_eq "restart: the three discovery documents are byte-identical to before" "$before" "$after"
t_eq "restart: no relist has succeeded (Prometheus is down)" 0 \
  "$(warnings_matching 'discovery: .* series from')"
t_ok "restart: the log says where the catalog came from" \
  wait_adapter_log 'catalog cache: serving 5 custom and 1 external metrics from .*catalog.cache' 5
adapter_fetch "$BERT"
t_eq "restart: by-selector answers 503 (nothing made up)" 503 "$R_STATUS"
t_json "restart: 503 is a ServiceUnavailable Status naming the backend" "$R_BODY" \
  '"\(.kind) \(.code) \(.reason) \(.message | test("prometheus"; "i"))"' "Status 503 ServiceUnavailable true"
adapter_fetch "$BY_NAME"
t_eq "restart: by-name answers 503" 503 "$R_STATUS"
adapter_fetch "$EXTERNAL"
t_eq "restart: external answers 503" 503 "$R_STATUS"
t_ok "restart: a relist fails, and the log says the cached catalog keeps serving" \
  wait_adapter_log 'unable to update list of all metrics: .*; serving the catalog loaded from the cache file, retrying' 60
t_eq "restart: after a failed relist, discovery is unchanged" "$before" "$(docs_snapshot)"
adapter_fetch /readyz
t_eq "restart: /readyz is ok" "200 ok" "$R_STATUS $R_BODY"
stop_adapter
t_eq "restarted adapter exits 0" 0 "$?"
t_eq "restart: the file was not rewritten while the backend was down" \
  "$(sha256sum <"$CMA_TMP/good.cache")" "$(sha256sum <"$CACHE")"

# --- 3. unusable files are ignored with one warning ----------------------------------------------
# ignored NAME ERE [ADAPTER_FLAGS...]: starts the adapter on $CACHE as it is now; exactly one line
# "catalog cache ignored: ..." matching ERE, nothing served, metric requests 503, still running.
ignored() {
  local name=$1 re=$2
  shift 2
  if ! start_adapter "$CONFIG" "--catalog-cache-file=$CACHE" "$@"; then
    t_fail "$name: the adapter starts"
    return
  fi
  t_eq "$name: one warning" 1 "$(warnings_matching 'catalog cache ignored')"
  t_eq "$name: the warning says why" 1 "$(warnings_matching "catalog cache ignored: .*$re")"
  adapter_fetch "$G/v1beta1"
  t_eq "$name: custom discovery answers 200" 200 "$R_STATUS"
  t_eq "$name: and lists nothing" 0 "$(resources_count)"
  adapter_fetch "$X"
  t_eq "$name: external discovery lists nothing" 0 "$(resources_count)"
  adapter_fetch "$BERT"
  t_eq "$name: by-selector answers 503" 503 "$R_STATUS"
  t_ok "$name: the adapter is still running" _cma_alive "$ADAPTER_PID"
  stop_adapter
  t_eq "$name: adapter exits 0" 0 "$?"
}
python3 - "$CACHE" <<'EOF'
import sys
p = sys.argv[1]
data = bytearray(open(p, "rb").read())
data[len(data) // 2] ^= 0x04  # one flipped bit in the records
open(p, "wb").write(bytes(data))
EOF
ignored "corrupt file" "catalog\\.cache: checksum mismatch: the file is corrupt"
head -c "$(($(stat -c %s "$CMA_TMP/good.cache") / 2))" "$CMA_TMP/good.cache" >"$CACHE"
ignored "truncated file" "catalog\\.cache: truncated \\(no end line\\)"
cp "$CONFIG" "$CACHE"
ignored "foreign file (a YAML config)" "catalog\\.cache:1: not a catalog cache file"
: >"$CACHE"
ignored "empty file" "catalog\\.cache:1: not a catalog cache file"
cp "$CMA_TMP/good.cache" "$CACHE"
cp "$CONFIG" "$CMA_TMP/other.yaml"
echo "# one more comment: other bytes, another config" >>"$CMA_TMP/other.yaml"
OTHER_CONFIG=$CMA_TMP/other.yaml
CONFIG_SAVED=$CONFIG
CONFIG=$OTHER_CONFIG
ignored "file from another config" "catalog\\.cache:2: built from another configuration"
CONFIG=$CONFIG_SAVED
ignored "file from another --metrics-max-age" "catalog\\.cache:2: built from another configuration" \
  --metrics-max-age=1h
t_eq "the ignored good file was left as it was" \
  "$(sha256sum <"$CMA_TMP/good.cache")" "$(sha256sum <"$CACHE")"

# --- 4. the backend comes back: the first relist replaces the loaded catalog ---------------------
if ! start_adapter "$CONFIG" "--catalog-cache-file=$CACHE"; then
  t_fail "start the adapter for the recovery"
  t_summary
  exit 1
fi
t_eq "recovery: serving from the file again" "$before" "$(docs_snapshot)"
cat >"$PROM_DIR/restart-rules.yml" <<'EOF'
groups:
- name: restart
  interval: 1s
  rules:
  - record: cma_restart_marker
    expr: DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}
EOF
printf 'rule_files:\n  - "%s"\n' "$PROM_DIR/restart-rules.yml" >>"$PROM_DIR/prometheus.yml"
if restart_prometheus; then
  t_ok "recovery: the first successful relist replaces the loaded catalog (lists the new metric)" \
    wait_discovery cma_restart_marker custom.metrics.k8s.io/v1beta1 90
  adapter_fetch "$G/v1beta1"
  t_json "recovery: the old entries are still listed next to the new ones" "$R_BODY" \
    "[.resources[].name | select(endswith(\"/cma_restart_marker\") | not)] == $(sed -n 1p <<<"$before" | jq -c '[.resources[].name]')" \
    true
  t_ok "recovery: by-selector answers 200 again" wait_status "$BERT" 200 60
  adapter_fetch "$BERT"
  t_eq "recovery: the same values as before the restart" "$want_bert" "$(item_values "$R_BODY")"
  t_ok "recovery: the file is rewritten" wait_adapter_log 'catalog cache: wrote' 30
  t_ok "recovery: the file lists the new metric" grep -q cma_restart_marker "$CACHE"
  t_ok "recovery: no temporary file is left" test ! -e "$CACHE.tmp"
  stop_adapter
  t_eq "recovery: adapter exits 0" 0 "$?"
  if start_adapter "$CONFIG" "--catalog-cache-file=$CACHE"; then
    t_ok "next start: the rewritten file loads with the new metric" \
      wait_adapter_log 'catalog cache: serving 8 custom and 1 external metrics' 5
    t_eq "next start: no warning about the file" 0 "$(warnings_matching 'catalog cache ignored')"
    stop_adapter
  else
    t_fail "next start"
  fi
else
  t_fail "restart_prometheus"
fi

t_summary
