#!/usr/bin/env bash
# test_reload.sh: config hot reload end to end, with a real Prometheus (synthetic DCGM data) and the
# fake kube-apiserver (it stands in for kube-apiserver's discovery and pod LISTs, replaying
# recorded answers). The config sits in a ConfigMap volume's layout: the directory holds a
# timestamped directory, `..data` links to it and rules.yaml links through `..data`; a change is
# written like kubelet's atomic writer does (a new timestamped directory, `..data_tmp` renamed over
# `..data` with `mv -T`, the old directory removed). Two client loops request metric values
# without a pause during every change, and not one request may fail. Checked: a good change adds a
# metric, which discovery lists after the relist it triggers (the relist interval is 10 minutes, so
# nothing else could list it) while the old metric keeps answering; a bad change (a YAML error) is
# refused with its file:line:column in the log, counted on /metrics
# (custom_metrics_adapter_config_reloads_total{result="failure"}, ..._last_reload_successful 0)
# and shown by /readyz?verbose as "[-]config-reload failed: <file:line:column ...>" while /readyz
# stays 200, and the old metrics keep answering; a fix recovers ([+]config-reload ok, the gauge
# back to 1); SIGHUP re-reads a file changed where the watch does not look; and a second adapter
# with a directory of several files (--strict-config, --catalog-cache-file) reloads when one file
# is added, refuses a config whose only problem is a warning, and writes the catalog cache file
# for the new config (the restarted adapter serves it from the file with Prometheus stopped).
# Backends are fixed at start-up: a reload that changes a backend's url or headers, adds a
# backend or names an undefined one is refused at that backend's file:line:column (naming the
# setting, never its value), counted as a failure, and the old config keeps serving; one that
# keeps the backends is applied.
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

gen_dcgm || exit 1
RELIST=10m
export RELIST
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
G=/apis/custom.metrics.k8s.io/v1beta1
GPU_UTIL="$G/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert"
FB_USED="$G/namespaces/ml/pods/*/DCGM_FI_DEV_FB_USED?labelSelector=app%3Dbert"

# rule SERIES AGG: one custom rule serving SERIES per pod and namespace.
rule() {
  cat <<EOF
- seriesQuery: '$1{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  metricsQuery: $2(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
EOF
}

# cm_init DIR: an empty ConfigMap volume layout.
cm_init() { mkdir -p "$1"; }
# cm_write DIR NAME=CONTENT_FILE...: one atomic update of the volume with exactly these files.
CM_SEQ=0
cm_write() {
  local dir=$1 ts old f name
  shift
  CM_SEQ=$((CM_SEQ + 1))
  ts="..2025_01_01_00_00_$(printf '%02d' "$CM_SEQ").$$"
  old=$(readlink "$dir/..data" 2>/dev/null)
  mkdir "$dir/$ts"
  for f in "$@"; do
    name=${f%%=*}
    cp "${f#*=}" "$dir/$ts/$name"
    [ -L "$dir/$name" ] || ln -s "..data/$name" "$dir/$name"
  done
  ln -sfn "$ts" "$dir/..data_tmp"
  mv -T "$dir/..data_tmp" "$dir/..data"
  [ -n "$old" ] && rm -rf "${dir:?}/$old"
  return 0
}

# metric NAME[{LABELS}]: the adapter's /metrics sample value ("" when absent).
metric() {
  curl -s --max-time 10 --cacert "$ADAPTER_CA" "$ADAPTER_URL/metrics" |
    awk -v m="$1" '$1 == m { print $2; exit }'
}
# wait_log ERE [TIMEOUT_S]: until the adapter log has a line matching ERE (30 s).
wait_log() {
  local deadline=$((SECONDS + ${2:-30}))
  until grep -q -E -- "$1" "$ADAPTER_LOG"; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.2
  done
}
# wait_count ERE N [TIMEOUT_S]: until the adapter log has N lines matching ERE (30 s).
wait_count() {
  local deadline=$((SECONDS + ${3:-30}))
  until [ "$(grep -c -E -- "$1" "$ADAPTER_LOG")" -ge "$2" ]; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.2
  done
}
readyz() { curl -s --max-time 10 --cacert "$ADAPTER_CA" -o "$CMA_TMP/readyz.body" -w '%{http_code}' "$ADAPTER_URL$1"; }

# The client loops: each requests GPU_UTIL and, once it is served, FB_USED, until the stop file
# exists; every answer's HTTP status goes to its own file.
client_loop() {
  local out=$1 path
  while [ ! -e "$CMA_TMP/stop-clients" ]; do
    for path in "$GPU_UTIL" "$FB_USED"; do
      [ "$path" = "$FB_USED" ] && [ ! -e "$CMA_TMP/fb-served" ] && continue
      curl -s --max-time 20 --cacert "$ADAPTER_CA" -o /dev/null -w '%{http_code}\n' \
        "$ADAPTER_URL$path" >>"$out"
    done
  done
}

CM=$CMA_TMP/cm
cm_init "$CM"
{ echo "rules:"; rule DCGM_FI_DEV_GPU_UTIL avg; } >"$CMA_TMP/v1.yaml"
cm_write "$CM" "rules.yaml=$CMA_TMP/v1.yaml"
if ! start_adapter "$CM/rules.yaml" || ! wait_discovery DCGM_FI_DEV_GPU_UTIL; then
  t_fail "adapter starts with the ConfigMap-style config and lists DCGM_FI_DEV_GPU_UTIL"
  t_summary
  exit 1
fi
t_eq "readyz?verbose lists config-reload ok before any reload" 200 "$(readyz '/readyz?verbose')"
t_ok "  ... [+]config-reload ok" grep -qx '\[+\]config-reload ok' "$CMA_TMP/readyz.body"
client_loop "$CMA_TMP/codes.1" &
C1=$!
client_loop "$CMA_TMP/codes.2" &
C2=$!

# 1. A good change adds a metric.
{ echo "rules:"; rule DCGM_FI_DEV_GPU_UTIL avg; rule DCGM_FI_DEV_FB_USED sum; } >"$CMA_TMP/v2.yaml"
cm_write "$CM" "rules.yaml=$CMA_TMP/v2.yaml"
t_ok "good change: DCGM_FI_DEV_FB_USED listed after the relist the reload triggers" \
  wait_discovery DCGM_FI_DEV_FB_USED "" 30
touch "$CMA_TMP/fb-served"
adapter_curl "$FB_USED" >/dev/null
t_eq "good change: the new metric answers" 200 "$(last_status)"
adapter_curl "$GPU_UTIL" >/dev/null
t_eq "good change: the old metric answers" 200 "$(last_status)"
t_eq "reloads_total{result=success} is 1" 1 "$(metric 'custom_metrics_adapter_config_reloads_total{result="success"}')"
t_eq "last_reload_successful is 1" 1 "$(metric custom_metrics_adapter_config_last_reload_successful)"
t_ok "the log says the reload happened" grep -q "config reloaded: $CM/rules.yaml: 2 rules" "$ADAPTER_LOG"

# 2. A bad change (YAML error: line 3, an unclosed flow sequence) is refused.
printf 'rules:\n- seriesQuery: x\n  resources: [\n' >"$CMA_TMP/bad.yaml"
cm_write "$CM" "rules.yaml=$CMA_TMP/bad.yaml"
t_ok "bad change: refused in the log with file:line:column" \
  wait_log "config reload refused, the previous config keeps serving: $CM/rules.yaml:[0-9]+:[0-9]+: "
t_eq "reloads_total{result=failure} is 1" 1 "$(metric 'custom_metrics_adapter_config_reloads_total{result="failure"}')"
t_eq "last_reload_successful is 0" 0 "$(metric custom_metrics_adapter_config_last_reload_successful)"
t_eq "bad change: /readyz?verbose still 200 (the old config serves)" 200 "$(readyz '/readyz?verbose')"
t_ok "  ... [-]config-reload failed: file:line:column" \
  grep -qE "^\[-\]config-reload failed: $CM/rules.yaml:[0-9]+:[0-9]+: " "$CMA_TMP/readyz.body"
t_eq "bad change: /readyz/config-reload answers 500" 500 "$(readyz /readyz/config-reload)"
adapter_curl "$FB_USED" >/dev/null
t_eq "bad change: the metrics of the previous config keep answering" 200 "$(last_status)"
t_ok "bad change: discovery still lists DCGM_FI_DEV_FB_USED" wait_discovery DCGM_FI_DEV_FB_USED "" 5

# 3. A fix recovers.
cm_write "$CM" "rules.yaml=$CMA_TMP/v2.yaml"
t_ok "fix: readyz shows [+]config-reload ok again" bash -c "
  for i in \$(seq 150); do
    curl -s --max-time 5 --cacert '$ADAPTER_CA' '$ADAPTER_URL/readyz?verbose' | grep -qx '\[+\]config-reload ok' && exit 0
    sleep 0.2
  done; exit 1"
t_eq "fix: reloads_total{result=success} is 2" 2 "$(metric 'custom_metrics_adapter_config_reloads_total{result="success"}')"
t_eq "fix: last_reload_successful is 1" 1 "$(metric custom_metrics_adapter_config_last_reload_successful)"

# 4. SIGHUP re-reads: the file is changed inside the timestamped directory, where the watch does
# not look (only `..data` swaps and the directory's own entries count).
{ echo "rules:"; rule DCGM_FI_DEV_GPU_UTIL avg; rule DCGM_FI_DEV_FB_USED sum; rule DCGM_FI_DEV_MEM_COPY_UTIL avg; } \
  >"$CM/..data/rules.yaml"
kill -HUP "$ADAPTER_PID"
t_ok "SIGHUP: DCGM_FI_DEV_MEM_COPY_UTIL listed" wait_discovery DCGM_FI_DEV_MEM_COPY_UTIL "" 30
t_ok "SIGHUP: logged" grep -q "received SIGHUP: reloading the config" "$ADAPTER_LOG"
t_eq "SIGHUP: reloads_total{result=success} is 3" 3 "$(metric 'custom_metrics_adapter_config_reloads_total{result="success"}')"

touch "$CMA_TMP/stop-clients"
wait "$C1" "$C2"
TOTAL=$(cat "$CMA_TMP"/codes.* | wc -l)
FAILED=$(cat "$CMA_TMP"/codes.* | grep -vc '^200$')
cma_log "client loops: $TOTAL requests during the reloads, $FAILED not 200"
t_ok "the client loops made requests during the reloads" test "$TOTAL" -gt 0
t_eq "no request failed during the reloads" 0 "$FAILED"
stop_adapter
t_eq "the adapter stops cleanly" 0 "$?"

# 4b. Backends are created at start-up: a reload that changes a backend's definition, adds one or
# names one that is not defined is refused (counted as a failure; the old config keeps serving),
# without printing the changed values; one that keeps the backends as they are is applied.
CMB=$CMA_TMP/cm-backends
cm_init "$CMB"
# backends_cfg URL HEADER_VALUE [EXTRA_BACKEND_YAML]: one backend "prom" and a rule on it.
backends_cfg() {
  printf 'backends:\n- name: prom\n  url: %s\n  headers: {X-Tenant: %s}\n%s' "$1" "$2" "${3:-}"
  echo "rules:"
  rule DCGM_FI_DEV_GPU_UTIL avg | sed '1a\  backend: prom'
}
backends_cfg "$PROM_URL" t1 >"$CMA_TMP/b1.yaml"
cm_write "$CMB" "rules.yaml=$CMA_TMP/b1.yaml"
: >"$ADAPTER_LOG"
if ! start_adapter "$CMB/rules.yaml" || ! wait_discovery DCGM_FI_DEV_GPU_UTIL; then
  t_fail "adapter starts with a backend \"prom\" and a rule on it"
  t_summary
  exit 1
fi
B_LINE=$(grep -n '^- name: prom$' "$CMA_TMP/b1.yaml" | cut -d: -f1)
t_ok "oracle: the backend item is on a line of the config" test -n "$B_LINE"
refused() { grep -c "config reload refused, the previous config keeps serving" "$ADAPTER_LOG"; }
# A url change (to a port nothing listens on).
backends_cfg "http://127.0.0.1:9" t1 >"$CMA_TMP/b2.yaml"
cm_write "$CMB" "rules.yaml=$CMA_TMP/b2.yaml"
t_ok "backend url changed: refused at the backend, naming what changed" \
  wait_log "config reload refused, the previous config keeps serving: $CMB/rules.yaml:$B_LINE:3: backend \"prom\" changed \(url\): a change to backends needs a restart"
t_eq "backend url changed: reloads_total{result=failure} is 1" 1 \
  "$(metric 'custom_metrics_adapter_config_reloads_total{result="failure"}')"
t_eq "backend url changed: last_reload_successful is 0" 0 "$(metric custom_metrics_adapter_config_last_reload_successful)"
adapter_curl "$GPU_UTIL" >/dev/null
t_eq "backend url changed: the old backend keeps answering" 200 "$(last_status)"
# A header change whose value is a secret: refused, and the value is printed nowhere.
backends_cfg "$PROM_URL" t1-s3cret-4711 >"$CMA_TMP/b3.yaml"
cm_write "$CMB" "rules.yaml=$CMA_TMP/b3.yaml"
t_ok "backend header changed: refused, naming the setting" \
  wait_log "$CMB/rules.yaml:$B_LINE:3: backend \"prom\" changed \(headers\): a change to backends needs a restart"
t_eq "backend header changed: the new value is not in the log" 0 "$(grep -c 's3cret-4711' "$ADAPTER_LOG")"
t_eq "backend header changed: reloads_total{result=failure} is 2" 2 \
  "$(metric 'custom_metrics_adapter_config_reloads_total{result="failure"}')"
# A backend added (no rule uses it yet).
backends_cfg "$PROM_URL" t1 "- name: extra
  url: $PROM_URL
" >"$CMA_TMP/b4.yaml"
X_LINE=$(grep -n '^- name: extra$' "$CMA_TMP/b4.yaml" | cut -d: -f1)
cm_write "$CMB" "rules.yaml=$CMA_TMP/b4.yaml"
t_ok "backend added: refused at the new backend" \
  wait_log "$CMB/rules.yaml:$X_LINE:3: backend \"extra\" is new: a change to backends needs a restart"
t_eq "backend added: reloads_total{result=failure} is 3" 3 \
  "$(metric 'custom_metrics_adapter_config_reloads_total{result="failure"}')"
# A rule naming a backend that is not defined.
backends_cfg "$PROM_URL" t1 | sed 's/^  backend: prom$/  backend: prom-typo/' >"$CMA_TMP/b5.yaml"
cm_write "$CMB" "rules.yaml=$CMA_TMP/b5.yaml"
t_ok "unknown backend: refused, naming it" \
  wait_log "config reload refused, the previous config keeps serving: $CMB/rules.yaml:[0-9]+:[0-9]+: .*backend \"prom-typo\""
t_eq "unknown backend: reloads_total{result=failure} is 4" 4 \
  "$(metric 'custom_metrics_adapter_config_reloads_total{result="failure"}')"
t_eq "four refusals logged" 4 "$(refused)"
t_eq "no reload succeeded" 0 "$(metric 'custom_metrics_adapter_config_reloads_total{result="success"}')"
adapter_curl "$GPU_UTIL" >/dev/null
t_eq "after the refusals: the old config keeps answering" 200 "$(last_status)"
# The same backends, another metric: applied.
{ backends_cfg "$PROM_URL" t1; rule DCGM_FI_DEV_FB_USED sum | sed '1a\  backend: prom'; } >"$CMA_TMP/b6.yaml"
cm_write "$CMB" "rules.yaml=$CMA_TMP/b6.yaml"
t_ok "same backends: the reload is applied (DCGM_FI_DEV_FB_USED listed)" wait_discovery DCGM_FI_DEV_FB_USED "" 30
t_eq "same backends: reloads_total{result=success} is 1" 1 \
  "$(metric 'custom_metrics_adapter_config_reloads_total{result="success"}')"
stop_adapter
t_eq "the adapter stops cleanly" 0 "$?"

# 5. A directory of several files, --strict-config and --catalog-cache-file.
CMD=$CMA_TMP/cm-dir
cm_init "$CMD"
{ echo "rules:"; rule DCGM_FI_DEV_GPU_UTIL avg; } >"$CMA_TMP/a.yaml"
{ echo "rules:"; rule DCGM_FI_DEV_FB_USED sum; } >"$CMA_TMP/b.yaml"
{ echo "rules:"; rule DCGM_FI_DEV_FB_FREE sum; } >"$CMA_TMP/c.yaml"
cm_write "$CMD" "a.yaml=$CMA_TMP/a.yaml" "b.yaml=$CMA_TMP/b.yaml"
CACHE=$CMA_TMP/catalog.cache
if ! start_adapter "$CMD" --strict-config "--catalog-cache-file=$CACHE" ||
  ! wait_discovery DCGM_FI_DEV_FB_USED; then
  t_fail "adapter starts with a directory of two files"
  t_summary
  exit 1
fi
cm_write "$CMD" "a.yaml=$CMA_TMP/a.yaml" "b.yaml=$CMA_TMP/b.yaml" "c.yaml=$CMA_TMP/c.yaml"
t_ok "directory: a third file's metric is listed" wait_discovery DCGM_FI_DEV_FB_FREE "" 30
t_ok "directory: the log names the three files" grep -q "config reloaded: $CMD/a.yaml, $CMD/b.yaml, $CMD/c.yaml: 3 rules" "$ADAPTER_LOG"
t_ok "directory: the catalog cache file is written again for the new config" \
  wait_count "catalog cache: wrote $CACHE" 2
# A warning only (a second YAML document is ignored, as yaml.v2 does): refused with --strict-config.
{ cat "$CMA_TMP/b.yaml"; echo "---"; echo "rules: []"; } >"$CMA_TMP/b-warn.yaml"
cm_write "$CMD" "a.yaml=$CMA_TMP/a.yaml" "b.yaml=$CMA_TMP/b-warn.yaml" "c.yaml=$CMA_TMP/c.yaml"
t_ok "strict: a warning refuses the reload, with its position" \
  wait_log "config reload refused, the previous config keeps serving: $CMD/b.yaml:[0-9]+:[0-9]+: .*--strict-config"
adapter_curl "$G/namespaces/ml/pods/*/DCGM_FI_DEV_FB_FREE?labelSelector=app%3Dbert" >/dev/null
t_eq "strict: the previous config keeps answering" 200 "$(last_status)"
stop_adapter
t_eq "the adapter stops cleanly" 0 "$?"
# The cache file was written for the three-file config: with Prometheus stopped, a restart
# serves its metrics from the file (the reloaded config is the one on disk now; the warning
# file is replaced by the good one first).
cm_write "$CMD" "a.yaml=$CMA_TMP/a.yaml" "b.yaml=$CMA_TMP/b.yaml" "c.yaml=$CMA_TMP/c.yaml"
stop_prometheus
: >"$ADAPTER_LOG"
if start_adapter "$CMD" --strict-config "--catalog-cache-file=$CACHE"; then
  t_ok "restart: the cache file of the reloaded config is loaded" \
    grep -qE "catalog cache: serving [1-9][0-9]* custom .* from $CACHE" "$ADAPTER_LOG"
  t_ok "restart: DCGM_FI_DEV_FB_FREE listed from the file" wait_discovery DCGM_FI_DEV_FB_FREE "" 5
  stop_adapter
else
  t_fail "restart with the catalog cache file"
fi
t_summary
