#!/usr/bin/env bash
# test_backends.sh: backends per rule (`backends:` + `backend: NAME`, this project's extension) with real components: two real Prometheus servers with different data (tenant giantswarm: the DCGM GPU series; tenant apps: an application metric), Debian's nginx in front of both as a Mimir-style gateway (a /prometheus prefix, auth_basic with an htpasswd file, routing by X-Scope-OrgID and the basic-auth user: giantswarm -> the first Prometheus, apps -> the second, no tenant -> 401), and VictoriaMetrics with -search.maxQueryLen lowered, all served by one config at once. Checks: seed 000's two GPU thresholds (gpu_utilization_percent, gpu_mem_copy_utilization_percent) come from tenant giantswarm with its basic auth while the application metric comes from tenant apps with its own (nginx's access log shows each tenant with its credentials, all 200); VictoriaMetrics serves an external metric with the backend's extra query parameter on every call; a query over VictoriaMetrics' length limit gets VictoriaMetrics' refusal naming the backend, and one over a backend's maxQueryLength is refused by the adapter before it is sent; a metric two backends serve resolves to the backend defined first, with a warning; when the apps Prometheus stops, its metric stays in discovery (its last good entries) while the GPU metrics keep answering fresh values, and its requests answer a 503 naming the backend; named backends' secrets rotate under a client loop with zero failed requests (mimir-gpu's basicAuth passwordFile by a Secret volume's ..data swap while nginx's htpasswd files accept both passwords; a bearer-token gateway's backend mimir-gpu-bearer, bearerTokenFile replaced by rename, its metric checked against the data and its nginx access log naming tokens by label), each proven by the gateway answering the new secret after the old one is dropped; no password, token, base64 credential or password file content appears in the adapter's log (at --v=8) or /metrics.
# asan: yes
# shellcheck disable=SC2119 # gen_dcgm and stop_adapter are called without their optional args
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

gen_dcgm || exit 1
EXP=$DCGM_DIR/expected.json
# The apps tenant's data: an application gauge per pod (the FB_USED values under another name),
# and nothing of the GPU data, so each metric can come from one Prometheus only.
APPS_OM="$CMA_TMP/apps.om"
{
  echo "# TYPE app_requests_in_flight gauge"
  grep '^DCGM_FI_DEV_FB_USED{' "$DCGM_DIR/dcgm.om" | sed 's/^DCGM_FI_DEV_FB_USED{/app_requests_in_flight{/'
  echo "# EOF"
} >"$APPS_OM"
if ! start_prometheus "$DCGM_DIR/dcgm.om"; then
  t_fail "start the giantswarm Prometheus"
  t_summary
  exit 1
fi
PROM_GPU=$PROM_URL
if ! start_prometheus "$APPS_OM"; then
  t_fail "start the apps Prometheus"
  t_summary
  exit 1
fi
PROM_APPS=$PROM_URL PROM_APPS_PID=$PROM_PID
unset PROM_URL # the flags' backend is VictoriaMetrics under a URL with userinfo (FLAGS_URL, below)
if ! VM_ARGS=-search.maxQueryLen=300 start_victoria_metrics "$DCGM_DIR/dcgm.prom" ||
  ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start VictoriaMetrics and the fake kube-apiserver"
  t_summary
  exit 1
fi
t_eq "the two Prometheus servers hold different data: GPU series only in the first" "1 0" \
  "$(curl -s -G "$PROM_GPU/api/v1/series" --data-urlencode 'match[]=DCGM_FI_DEV_GPU_UTIL' | jq '.data | length > 0 | if . then 1 else 0 end') $(curl -s -G "$PROM_APPS/api/v1/series" --data-urlencode 'match[]=DCGM_FI_DEV_GPU_UTIL' | jq '.data | length')"

# --- the Mimir-style gateway ------------------------------------------------------------------------
# shellcheck disable=SC2016 # a literal dollar sign: the password must survive basic auth as is
GS_USER=gs-metrics-reader GS_PASSWORD='gs:pa ss$w0rd'
APPS_USER=apps-reader APPS_PASSWORD='apps-Secret-4711'
SEC="$CMA_TMP/secrets"
mkdir -p "$SEC"
{
  printf '%s:%s\n' "$GS_USER" "$(openssl passwd -apr1 "$GS_PASSWORD")"
  printf '%s:%s\n' "$APPS_USER" "$(openssl passwd -apr1 "$APPS_PASSWORD")"
} >"$SEC/htpasswd"
printf '%s\n' "$GS_PASSWORD" >"$SEC/gs-password"
printf '%s\n' "$APPS_PASSWORD" >"$SEC/apps-password"
chmod 600 "$SEC/gs-password" "$SEC/apps-password"
# mimir-gpu's password is a Secret volume ($SEC/gs/password -> ..data/password), rotated below
projected_write "$SEC/gs" 2026_01_01_00_00_00.1 password="$SEC/gs-password"
# mimir-gpu-bearer's token (a bearer gateway in front of the GPU Prometheus), rotated by rename
GPU_TOKEN_1='eyJhbGciOiJub25lIn0.gpu-reader-one.c2lnLW9uZQ'
GPU_TOKEN_2='eyJhbGciOiJub25lIn0.gpu-reader-two.c2lnLXR3bw'
printf '%s\n' "$GPU_TOKEN_1" >"$SEC/gpu-token"
PG=$(free_port) PT=$(free_port)
basic() { printf 'Basic %s' "$(printf '%s:%s' "$1" "$2" | base64 -w0)"; }
# $remote_user is parsed from the Authorization header before auth_basic checks the password (the
# rewrite phase runs first), so the map routes on user and tenant and auth_basic then refuses a
# wrong password: each tenant is reachable with its own credentials only.
# GS_NEXT: during a password rotation, a map entry sending the new password's Authorization to a
# second htpasswd file ($SEC/htpasswd-next), so auth_basic accepts the old and the new password.
# GPU_TOKENS: the bearer tokens the bearer gateway ($PT) accepts; its access log names a token by a
# fixed label, never by its value.
GS_NEXT="" GPU_TOKENS="$GPU_TOKEN_1"
write_gateway() {
  local t ok=""
  for t in $GPU_TOKENS; do ok+="\"Bearer $t\" 1; "; done
  cat >"$CMA_TMP/gateway.conf" <<EOF
map_hash_bucket_size 256; # keys as long as an Authorization header
map "\$remote_user|\$http_x_scope_orgid" \$tenant_upstream {
  default "";
  "$GS_USER|giantswarm" "${PROM_GPU#http://}";
  "$APPS_USER|apps" "${PROM_APPS#http://}";
}
map \$http_authorization \$gw_htpasswd { default "$SEC/htpasswd"; $GS_NEXT}
map \$http_authorization \$gpu_bearer_ok { default 0; $ok}
map \$http_authorization \$gpu_bearer_label { default "other";
  "Bearer $GPU_TOKEN_1" "token-1"; "Bearer $GPU_TOKEN_2" "token-2"; }
log_format bearer '\$server_port \$status \$gpu_bearer_label';
server {
  listen 127.0.0.1:$PT;
  access_log $CMA_TMP/bearer-access.log bearer;
  location / {
    if (\$gpu_bearer_ok = 0) { return 401 "bearer token required\n"; }
    proxy_pass $PROM_GPU;
  }
}
server {
  listen 127.0.0.1:$PG;
  location /prometheus/ {
    auth_basic "mimir"; auth_basic_user_file \$gw_htpasswd;
    if (\$http_x_scope_orgid = "") { return 401 "no org id\n"; }
    if (\$tenant_upstream = "") { return 401 "tenant not allowed for this user\n"; }
    rewrite ^/prometheus/(.*)\$ /\$1 break;
    proxy_pass http://\$tenant_upstream;
  }
  location / { return 404 "not found\n"; }
}
EOF
}
write_gateway
if ! start_nginx "$CMA_TMP/gateway.conf"; then
  t_fail "start nginx"
  t_summary
  exit 1
fi
GW="http://127.0.0.1:$PG/prometheus"
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@"; }
Q='/api/v1/query?query=up'
t_eq "gateway: no tenant: 401" 401 "$(code -u "$GS_USER:$GS_PASSWORD" "$GW$Q")"
t_eq "gateway: tenant giantswarm without credentials: 401" 401 "$(code -H 'X-Scope-OrgID: giantswarm' "$GW$Q")"
t_eq "gateway: tenant giantswarm, wrong password: 401" 401 \
  "$(code -u "$GS_USER:wrong" -H 'X-Scope-OrgID: giantswarm' "$GW$Q")"
t_eq "gateway: tenant apps with the giantswarm user: 401" 401 \
  "$(code -u "$GS_USER:$GS_PASSWORD" -H 'X-Scope-OrgID: apps' "$GW$Q")"
t_eq "gateway: tenant giantswarm reaches the GPU Prometheus" 1 \
  "$(curl -s -u "$GS_USER:$GS_PASSWORD" -H 'X-Scope-OrgID: giantswarm' -G "$GW/api/v1/series" \
    --data-urlencode 'match[]=DCGM_FI_DEV_GPU_UTIL' | jq '.data | length > 0 | if . then 1 else 0 end')"
t_eq "gateway: tenant apps reaches the apps Prometheus" 0 \
  "$(curl -s -u "$APPS_USER:$APPS_PASSWORD" -H 'X-Scope-OrgID: apps' -G "$GW/api/v1/series" \
    --data-urlencode 'match[]=DCGM_FI_DEV_GPU_UTIL' | jq '.data | length')"
t_eq "gateway: outside /prometheus: 404" 404 \
  "$(code -u "$GS_USER:$GS_PASSWORD" -H 'X-Scope-OrgID: giantswarm' "http://127.0.0.1:$PG$Q")"
t_eq "bearer gateway: no token, a wrong token, the token not yet accepted: 401 401 401" "401 401 401" \
  "$(code "http://127.0.0.1:$PT$Q") $(code -H 'Authorization: Bearer nope' "http://127.0.0.1:$PT$Q") $(code -H "Authorization: Bearer $GPU_TOKEN_2" "http://127.0.0.1:$PT$Q")"
t_eq "bearer gateway: the accepted token reaches the GPU Prometheus" 200 \
  "$(code -H "Authorization: Bearer $GPU_TOKEN_1" "http://127.0.0.1:$PT$Q")"

# --- one config, every backend ------------------------------------------------------------------------
# A long PromQL (about 400 bytes): over VictoriaMetrics' -search.maxQueryLen=300 and over the
# vm-limited backend's maxQueryLength 200.
PAD=$(for _ in $(seq 1 14); do printf ' + 0 * count(DCGM_FI_DEV_FB_FREE)'; done)
CFG="$CMA_TMP/backends.yaml"
cat >"$CFG" <<EOF
backends:
- name: mimir-gpu
  url: $GW
  headers: {X-Scope-OrgID: giantswarm}
  basicAuth: {username: $GS_USER, passwordFile: secrets/gs/password}
# a bearer token file, rotated under traffic below
- name: mimir-gpu-bearer
  url: http://127.0.0.1:$PT
  bearerTokenFile: secrets/gpu-token
- name: mimir-apps
  url: $GW
  verb: POST
  timeout: 5s
  headers: {X-Scope-OrgID: apps}
  basicAuth: {username: $APPS_USER, passwordFile: secrets/apps-password}
- name: vm
  url: $VM_URL
  queryParameters: {nocache: "1"}
- name: vm-limited
  url: $VM_URL
  maxQueryLength: 200
# credentials in the URL itself (userinfo): they work, and no log, /metrics or explain shows them
- name: mimir-apps-url
  url: http://$APPS_USER:$APPS_PASSWORD@127.0.0.1:$PG/prometheus
  headers: {X-Scope-OrgID: apps}
rules:
# seed 000's two KEDA triggers as Pods metrics, from tenant giantswarm
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  backend: mimir-gpu
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {as: gpu_utilization_percent}
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
- seriesQuery: 'DCGM_FI_DEV_MEM_COPY_UTIL{namespace!="",pod!=""}'
  backend: mimir-gpu
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {as: gpu_mem_copy_utilization_percent}
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
- seriesQuery: 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{namespace!="",pod!=""}'
  backend: mimir-gpu-bearer
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {as: gpu_engine_active}
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
# the application metric, from tenant apps
- seriesQuery: 'app_requests_in_flight{namespace!="",pod!=""}'
  backend: mimir-apps
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
# the same (pods, gpu_utilization_percent) from the apps tenant: mimir-gpu is defined first, wins
- seriesQuery: 'app_requests_in_flight{namespace!="",pod!=""}'
  backend: mimir-apps
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {as: gpu_utilization_percent}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
externalRules:
- seriesQuery: 'DCGM_FI_DEV_FB_USED{namespace!=""}'
  backend: vm
  resources: {namespaced: false}
  name: {as: vm_fb_used_total}
  metricsQuery: sum(DCGM_FI_DEV_FB_USED)
- seriesQuery: 'DCGM_FI_DEV_FB_FREE{namespace!=""}'
  backend: vm
  resources: {namespaced: false}
  name: {as: vm_long_query}
  metricsQuery: sum(DCGM_FI_DEV_FB_FREE)$PAD
- seriesQuery: 'DCGM_FI_DEV_FB_FREE{namespace!=""}'
  backend: vm-limited
  resources: {namespaced: false}
  name: {as: vm_limited_query}
  metricsQuery: sum(DCGM_FI_DEV_FB_FREE)$PAD
- seriesQuery: 'app_requests_in_flight{namespace!=""}'
  backend: mimir-apps-url
  resources: {namespaced: false}
  name: {as: apps_in_flight_total}
  metricsQuery: sum(app_requests_in_flight)
# the flags' backend (--prometheus-url, VictoriaMetrics with userinfo in the URL)
- seriesQuery: 'DCGM_FI_DEV_FB_USED{namespace!=""}'
  resources: {namespaced: false}
  name: {as: flags_fb_used_total}
  metricsQuery: sum(DCGM_FI_DEV_FB_USED)
# metrics.k8s.io from a named backend: the apps tenant's gauge per container as cpu and memory
resourceRules:
  backend: mimir-apps
  cpu:
    containerQuery: sum(app_requests_in_flight{<<.LabelMatchers>>}) by (<<.GroupBy>>)
    nodeQuery: sum(app_requests_in_flight{<<.LabelMatchers>>}) by (<<.GroupBy>>)
    resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}, Hostname: {resource: node}}}
    containerLabel: container
  memory:
    containerQuery: sum(app_requests_in_flight{<<.LabelMatchers>>}) by (<<.GroupBy>>)
    nodeQuery: sum(app_requests_in_flight{<<.LabelMatchers>>}) by (<<.GroupBy>>)
    resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}, Hostname: {resource: node}}}
    containerLabel: container
  window: 5m
EOF
# the flags' backend: VictoriaMetrics (it ignores basic auth) under a URL with userinfo
FLAGS_PASSWORD='flags-Pass-0815'
FLAGS_URL="http://flags-user:$FLAGS_PASSWORD@${VM_URL#http://}"
C=/apis/custom.metrics.k8s.io/v1beta1
E=/apis/external.metrics.k8s.io/v1beta1
SEL="labelSelector=app%3Dbert"
BERT='.labels.namespace == "ml" and (.labels.pod // "" | startswith("bert-"))'
: >"$NGINX_DIR/access.log"
: >"$CMA_TMP/bearer-access.log"
# a short query cache: the cache wraps every backend, and an answer from before the apps
# Prometheus stops is not served after it
if ! PROM_URL=$FLAGS_URL V=8 RELIST=2s start_adapter "$CFG" --metrics-cache-ttl=1s; then
  t_fail "start the adapter with four backends"
  t_summary
  exit 1
fi
t_ok "discovery: the GPU metrics (tenant giantswarm)" wait_discovery gpu_mem_copy_utilization_percent
t_ok "discovery: the application metric (tenant apps)" wait_discovery app_requests_in_flight
t_ok "discovery: the VictoriaMetrics external metric" wait_discovery vm_fb_used_total external.metrics.k8s.io/v1beta1

r=$(adapter_get "$C/namespaces/ml/pods/*/gpu_utilization_percent?$SEL")
t_eq "000 threshold 70: gpu_utilization_percent per pod from tenant giantswarm (and not the apps rule's values)" \
  "$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod "$BERT")" "$(item_values "$r")"
r=$(adapter_get "$C/namespaces/ml/pods/*/gpu_mem_copy_utilization_percent?$SEL")
t_eq "000 threshold 80: gpu_mem_copy_utilization_percent per pod from tenant giantswarm" \
  "$(expected_agg DCGM_FI_DEV_MEM_COPY_UTIL avg pod "$BERT")" "$(item_values "$r")"
r=$(adapter_get "$C/namespaces/ml/pods/*/app_requests_in_flight?$SEL")
want_apps=$(expected_agg DCGM_FI_DEV_FB_USED sum pod "$BERT")
t_eq "the application metric per pod from tenant apps" "$want_apps" "$(item_values "$r")"
t_ok "nginx: tenant giantswarm with its basic auth, answered 200" \
  grep -q "^$PG 200 \"Basic $(printf '%s' "$GS_USER:$GS_PASSWORD" | base64 -w0)\" \"giantswarm\"" "$NGINX_DIR/access.log"
t_ok "nginx: tenant apps with its own basic auth, answered 200" \
  grep -q "^$PG 200 \"Basic $(printf '%s' "$APPS_USER:$APPS_PASSWORD" | base64 -w0)\" \"apps\"" "$NGINX_DIR/access.log"
t_eq "nginx: no call of the adapter was refused or went without a tenant" "" \
  "$(grep -v "^$PG 200 " "$NGINX_DIR/access.log" | head -3)"
r=$(adapter_get "$C/namespaces/ml/pods/*/gpu_engine_active?$SEL")
want_engine=$(expected_agg DCGM_FI_PROF_GR_ENGINE_ACTIVE avg pod "$BERT")
t_eq "bearerTokenFile: gpu_engine_active per pod from the bearer gateway's Prometheus" "$want_engine" "$(item_values "$r")"
t_ok "bearer gateway: the adapter's calls carried the first token, answered 200" \
  grep -q "^$PT 200 token-1\$" "$CMA_TMP/bearer-access.log"
t_ok "the apps backend's queries went as POST (verb: POST), the GPU backend's as GET" \
  bash -c "grep -q 'backend mimir-apps POST .*/prometheus/api/v1/query ' '$ADAPTER_LOG' &&
    grep -q 'backend mimir-gpu GET .*/prometheus/api/v1/query?query=' '$ADAPTER_LOG'"

want_vm=$(jq -r "$CMA_JQ_QUANTITY"'[.series[] | select(.name == "DCGM_FI_DEV_FB_USED") | .value] | add | quantity' "$EXP")
r=$(adapter_get "$E/namespaces/default/vm_fb_used_total")
t_json "VictoriaMetrics: the external metric's value" "$r" '.items | map(.value) | join(" ")' "$want_vm"
t_ok "VictoriaMetrics: every call carried the backend's query parameter nocache=1" \
  bash -c "grep -E 'backend vm (GET|POST) ' '$ADAPTER_LOG' | grep -q . &&
    ! grep -E 'backend vm (GET|POST) ' '$ADAPTER_LOG' | grep -v 'nocache=1' | grep -q ."
adapter_fetch "$E/namespaces/default/vm_long_query"
t_json "VictoriaMetrics refuses the long query: a Status naming the backend and the limit" "$R_BODY" \
  '"\(.code) \(.message | test("backend vm: .*maxQueryLen"))"' "$R_STATUS true"
adapter_fetch "$E/namespaces/default/vm_limited_query"
t_json "maxQueryLength 200: refused by the adapter before sending, naming the backend" "$R_BODY" \
  '.message' "unable to fetch metrics from backend vm-limited: the query is $(($(printf 'sum(DCGM_FI_DEV_FB_FREE)%s' "$PAD" | wc -c))) bytes, over this backend's maxQueryLength 200; shorten the rule's query or raise the limit"
t_ok "two backends serve (pods, gpu_utilization_percent): warned, the backend defined first wins" \
  wait_adapter_log "W .*metric gpu_utilization_percent of pods is served by rules on two backends: backend mimir-gpu \(.*backends.yaml:[0-9]+:3\) wins over backend mimir-apps" 30

# --- credentials in URLs: they work, the URL is shown without them ----------------------------------
t_ok "discovery: the metric of the backend with userinfo in its url" wait_discovery apps_in_flight_total external.metrics.k8s.io/v1beta1
r=$(adapter_get "$E/namespaces/default/apps_in_flight_total")
t_json "userinfo in a backend url: the gateway accepts it (the apps tenant's sum)" "$r" '.items | map(.value) | join(" ")' "$want_vm"
t_ok "discovery: the flags' backend's metric" wait_discovery flags_fb_used_total external.metrics.k8s.io/v1beta1
r=$(adapter_get "$E/namespaces/default/flags_fb_used_total")
t_json "userinfo in --prometheus-url: served" "$r" '.items | map(.value) | join(" ")' "$want_vm"
t_ok "the start-up log shows the backend's url without its userinfo" \
  grep -qF "backend mimir-apps-url: http://127.0.0.1:$PG/prometheus (GET" "$ADAPTER_LOG"
t_ok "the start-up log shows --prometheus-url without its userinfo" \
  grep -qF "backend $VM_URL, kube-apiserver" "$ADAPTER_LOG"

# --- metrics.k8s.io from a named backend -------------------------------------------------------------
# oracle: per Running pod of ml, its container's app_requests_in_flight (the FB_USED values) summed;
# cpu as a DecimalSI count of cores, memory as BinarySI bytes (whole KiB here)
want_res=$(jq -r --slurpfile pods "$DCGM_DIR/pods.json" '
  ($pods[0] | map(select(.phase == "Running") | "\(.namespace)/\(.name)")) as $running
  | [.series[] | select(.name == "DCGM_FI_DEV_FB_USED" and .labels.namespace == "ml" and .labels.pod != null)
     | select(("ml/" + .labels.pod) as $p | $running | index($p))]
  | group_by([.labels.pod, .labels.container])[]
  | (map(.value) | add) as $v
  | "ml/\(.[0].labels.pod) \(.[0].labels.container) \($v) \(if $v % 1024 == 0 then "\($v / 1024)Ki" else "not-whole-KiB" end)"' \
  "$EXP")
t_ok "oracle: pods of ml with whole-KiB integer values" bash -c "test -n '$want_res' && ! grep -q not-whole-KiB <<<'$want_res'"
t_ok "metrics.k8s.io is served once discovery has run" wait_status /apis/metrics.k8s.io/v1beta1/namespaces/ml/pods 200 60
adapter_fetch /apis/metrics.k8s.io/v1beta1/namespaces/ml/pods
t_eq "resourceRules on backend mimir-apps: PodMetricsList of ml, 200" 200 "$R_STATUS"
t_eq "resourceRules on backend mimir-apps: each container's values are the apps tenant's" "$want_res" \
  "$(jq -r '.items[] | .metadata as $m | .containers[] | "\($m.namespace)/\($m.name) \(.name) \(.usage.cpu) \(.usage.memory)"' <<<"$R_BODY")"
t_ok "resourceRules on backend mimir-apps: the queries went to the apps tenant (POST)" \
  grep -q 'backend mimir-apps POST .*/prometheus/api/v1/query ' "$ADAPTER_LOG"

# --- explain uses the rules' own backends ------------------------------------------------------------
# explain_cli PATH: the CLI with the adapter's config and flags; sets X_OUT, X_RC.
explain_cli() {
  # shellcheck disable=SC2086 # CMA_WRAPPER is a command line on purpose
  X_OUT=$(${CMA_WRAPPER:-} "$(cma_adapter_bin)" explain "--config=$CFG" "--prometheus-url=$FLAGS_URL" \
    "--lister-kubeconfig=$KUBE_KUBECONFIG" "$1" 2>"$CMA_TMP/explain.err")
  X_RC=$?
  cat "$CMA_TMP/explain.err" >>"$CMA_TMP/explain.all"
  printf '%s\n' "$X_OUT" >>"$CMA_TMP/explain.all"
}
section() { awk -v h="$1:" '$0 == h {on = 1; next} /^[a-z]/ {on = 0} on' <<<"$X_OUT"; }
AP="$C/namespaces/ml/pods/*/app_requests_in_flight?$SEL"
explain_cli "$AP"
t_eq "explain, a metric of backend mimir-apps: exit 0 (listed from its own backend)" 0 "$X_RC"
t_ok "explain: the report names backend mimir-apps" \
  grep -Eq "^  backend: mimir-apps, instant query at [0-9TZ:-]+: [0-9]+ ms, answered$" <<<"$(section query)"
api=$(adapter_get "$AP")
sent=$(sed -n 's/.*custom metric pods\/app_requests_in_flight: //p' "$ADAPTER_LOG" | tail -n 1)
t_ok "oracle: the adapter logged the PromQL it sent (--v=5)" test -n "$sent"
t_eq "explain: its PromQL is what the adapter sends" "$sent" "$(section query | sed -n 's/^  promql: //p')"
answer=$(sed -n '/^answer: HTTP 200$/{n;p}' <<<"$X_OUT")
no_ts='del(.items[].timestamp)'
t_eq "explain: the answer is the API's (timestamps aside)" "$(jq -cS "$no_ts" <<<"$api")" "$(jq -cS "$no_ts" <<<"$answer")"
t_eq "explain: and the apps tenant's values" "$want_apps" "$(item_values "$answer")"
explain_cli "$E/namespaces/default/apps_in_flight_total"
t_eq "explain, the backend with userinfo in its url: exit 0" 0 "$X_RC"
t_ok "explain: names it by its name" grep -Eq "^  backend: mimir-apps-url, instant query" <<<"$(section query)"
explain_cli "$E/namespaces/default/flags_fb_used_total"
t_eq "explain, the flags' backend: exit 0" 0 "$X_RC"
t_ok "explain: --prometheus-url without its userinfo" grep -Eq "^  backend: $VM_URL, instant query" <<<"$(section query)"

# --- named backends' secrets rotated under traffic ----------------------------------------------------
# A client loop asks for a metric of mimir-gpu (basic auth, password file in a Secret volume) and one
# of mimir-gpu-bearer (bearer token file) continuously. Each rotation: the gateway accepts the old
# and the new secret (reload), the file is swapped atomically, the gateway logs the new secret's
# first use by the adapter (the event waited for, not a time), then accepts only the new one (reload)
# and the loop must go on answering 200.
GPU_PATH="$C/namespaces/ml/pods/*/gpu_utilization_percent?$SEL"
ENG_PATH="$C/namespaces/ml/pods/*/gpu_engine_active?$SEL"
want_gpu=$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod "$BERT")
LOOP_LOG="$CMA_TMP/loop.log"
: >"$LOOP_LOG"
cma_on_exit touch "$CMA_TMP/stop-loop"
(
  while [ ! -e "$CMA_TMP/stop-loop" ]; do
    for a in "G $GPU_PATH" "T $ENG_PATH"; do
      c=$(curl -s -o "$CMA_TMP/loop.body" -w '%{http_code}' --max-time 30 --cacert "$ADAPTER_CA" "$ADAPTER_URL${a#* }")
      v=$(jq -r '.items[] | "\(.describedObject.name) \(.value)"' "$CMA_TMP/loop.body" 2>/dev/null | sort | tr '\n' ';')
      echo "${a%% *} $c $v" >>"$LOOP_LOG"
    done
    sleep 0.05
  done
) &
LOOP_PID=$!
mark() { echo "MARK $1" >>"$LOOP_LOG"; }
# after_mark NAME KEY: 200s of KEY (G or T) after MARK NAME (and before the next mark).
after_mark() {
  awk -v m="MARK $1" -v a="$2" '$0 == m { on = 1; next } /^MARK/ { on = 0 } on && $1 == a && $2 == 200 { n++ } END { print n + 0 }' "$LOOP_LOG"
}
# poll TIMEOUT_S CMD...: until CMD succeeds (false after TIMEOUT_S); for events, not for timing.
poll() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.2
  done
}
at_least_3_after() { [ "$(after_mark "$1" "$2")" -ge 3 ]; }
gateway() { # VAR=VALUE...: rewrite the gateway config and reload nginx (a failed reload fails the test)
  local kv
  for kv in "$@"; do printf -v "${kv%%=*}" '%s' "${kv#*=}"; done
  write_gateway
  reload_nginx || t_fail "nginx reload with ${*%%=*}"
}
t_ok "the loop answers before the rotations" poll 60 bash -c "grep -q '^G 200 ' '$LOOP_LOG' && grep -q '^T 200 ' '$LOOP_LOG'"
# 1. mimir-gpu's basicAuth passwordFile, a Secret volume's ..data swap.
# shellcheck disable=SC2016 # literal dollar signs
GS_PASSWORD_2='gs:n3w pa ss$w0rd#2'
printf '%s:%s\n' "$GS_USER" "$(openssl passwd -apr1 "$GS_PASSWORD_2")" >"$SEC/htpasswd-next"
printf '%s\n' "$GS_PASSWORD_2" >"$SEC/gs-password-2"
chmod 600 "$SEC/gs-password-2"
gateway GS_NEXT="\"$(basic "$GS_USER" "$GS_PASSWORD_2")\" \"$SEC/htpasswd-next\"; "
t_eq "password rotation: the gateway accepts the old and the new password" "200 200" \
  "$(code -u "$GS_USER:$GS_PASSWORD" -H 'X-Scope-OrgID: giantswarm' "$GW$Q") $(code -u "$GS_USER:$GS_PASSWORD_2" -H 'X-Scope-OrgID: giantswarm' "$GW$Q")"
: >"$NGINX_DIR/access.log" # the adapter's calls only from here on
projected_write "$SEC/gs" 2026_01_01_01_00_00.2 password="$SEC/gs-password-2"
t_ok "password rotation: the adapter sends the new password once the Secret volume is swapped" \
  poll 60 grep -qF "$PG 200 \"$(basic "$GS_USER" "$GS_PASSWORD_2")\" \"giantswarm\"" "$NGINX_DIR/access.log"
{
  printf '%s:%s\n' "$GS_USER" "$(openssl passwd -apr1 "$GS_PASSWORD_2")"
  printf '%s:%s\n' "$APPS_USER" "$(openssl passwd -apr1 "$APPS_PASSWORD")"
} >"$SEC/htpasswd.new" && mv -T "$SEC/htpasswd.new" "$SEC/htpasswd"
gateway GS_NEXT=""
mark password
GW_LINES=$(wc -l <"$NGINX_DIR/access.log")
t_eq "password rotation: the gateway refuses the old password now, accepts the new" "401 200" \
  "$(code -u "$GS_USER:$GS_PASSWORD" -H 'X-Scope-OrgID: giantswarm' "$GW$Q") $(code -u "$GS_USER:$GS_PASSWORD_2" -H 'X-Scope-OrgID: giantswarm' "$GW$Q")"
t_ok "password rotation: mimir-gpu's metric answers after the switch (3 requests)" poll 60 at_least_3_after password G
# two_since LINES FILE FIXED: at least two lines of FILE after its first LINES hold FIXED (the
# test's own probe after the switch is one of them, the adapter's calls are the others)
two_since() { [ "$(tail -n "+$(($1 + 1))" "$2" | grep -cF -- "$3")" -ge 2 ]; }
t_ok "password rotation: the gateway answered the adapter's new password after the switch" \
  poll 60 two_since "$GW_LINES" "$NGINX_DIR/access.log" "$PG 200 \"$(basic "$GS_USER" "$GS_PASSWORD_2")\" \"giantswarm\""
# 2. mimir-gpu-bearer's bearerTokenFile, replaced by rename.
gateway GPU_TOKENS="$GPU_TOKEN_1 $GPU_TOKEN_2"
t_eq "token rotation: the bearer gateway accepts both tokens" "200 200" \
  "$(code -H "Authorization: Bearer $GPU_TOKEN_1" "http://127.0.0.1:$PT$Q") $(code -H "Authorization: Bearer $GPU_TOKEN_2" "http://127.0.0.1:$PT$Q")"
printf '%s\n' "$GPU_TOKEN_2" >"$SEC/gpu-token.new" && mv -T "$SEC/gpu-token.new" "$SEC/gpu-token"
t_ok "token rotation: the adapter sends the new token once the file is replaced" \
  poll 60 grep -q "^$PT 200 token-2\$" "$CMA_TMP/bearer-access.log"
gateway GPU_TOKENS="$GPU_TOKEN_2"
mark token
BT_LINES=$(wc -l <"$CMA_TMP/bearer-access.log")
t_eq "token rotation: the bearer gateway refuses the old token now, accepts the new" "401 200" \
  "$(code -H "Authorization: Bearer $GPU_TOKEN_1" "http://127.0.0.1:$PT$Q") $(code -H "Authorization: Bearer $GPU_TOKEN_2" "http://127.0.0.1:$PT$Q")"
t_ok "token rotation: mimir-gpu-bearer's metric answers after the switch (3 requests)" poll 60 at_least_3_after token T
t_ok "token rotation: the bearer gateway answered the adapter's new token after the switch" \
  poll 60 two_since "$BT_LINES" "$CMA_TMP/bearer-access.log" "$PT 200 token-2"
touch "$CMA_TMP/stop-loop"
wait "$LOOP_PID"
total=$(grep -c -v '^MARK' "$LOOP_LOG")
t_ok "the loop made requests all along ($total)" test "$total" -ge 12
t_eq "zero failed requests over the whole loop" "" "$(grep -v '^MARK' "$LOOP_LOG" | grep -v '^[GT] 200 ' | cut -d' ' -f1-2 | sort | uniq -c)"
t_eq "every answer carries the data's values" 0 \
  "$(grep -v '^MARK' "$LOOP_LOG" | grep -v -F -e "G 200 $(tr '\n' ';' <<<"$want_gpu")" -e "T 200 $(tr '\n' ';' <<<"$want_engine")" | grep -c .)"
t_ok "oracle: both metrics were in the loop" bash -c "grep -q '^G 200 ' '$LOOP_LOG' && grep -q '^T 200 ' '$LOOP_LOG'"
# the gateways' own logs: the probes above (old secret after the switch) are the only refusals
t_eq "nginx: the only refusals at the gateway were the test's probes of the old password" 1 \
  "$(grep "^$PG " "$NGINX_DIR/access.log" | grep -vc "^$PG 200 ")"
t_eq "bearer gateway: the only refusal since the adapter started was the test's probe of the old token" 1 \
  "$(grep "^$PT " "$CMA_TMP/bearer-access.log" | grep -vc "^$PT 200 ")"
t_eq "bearer gateway: its log names tokens by label only" 0 \
  "$(grep -cF -e "$GPU_TOKEN_1" -e "$GPU_TOKEN_2" "$CMA_TMP/bearer-access.log")"

# --- a failing backend keeps its own last good entries -------------------------------------------------
cma_stop "$PROM_APPS_PID"
t_ok "the apps relist fails and keeps its entries, the others are relisted" \
  wait_adapter_log "unable to update list of metrics of backend mimir-apps: .*keeping its [1-9][0-9]* custom and 0 external metrics" 60
lines=$(adapter_log_lines)
t_ok "... and the next relist too (the GPU tenant still answers)" \
  bash -c "for i in \$(seq 1 100); do tail -n +$((lines + 1)) '$ADAPTER_LOG' | grep -q 'unable to update list of metrics of backend mimir-apps' && exit 0; sleep 0.2; done; exit 1"
t_ok "discovery still lists the apps tenant's metric" wait_discovery app_requests_in_flight custom.metrics.k8s.io/v1beta1 5
t_ok "discovery still lists the GPU metrics" wait_discovery gpu_utilization_percent custom.metrics.k8s.io/v1beta1 5
t_eq "the adapter did not log 'unable to update list of all metrics' (no whole-catalog failure)" 0 \
  "$(grep -c 'unable to update list of all metrics' "$ADAPTER_LOG")"
r=$(adapter_get "$C/namespaces/ml/pods/*/gpu_mem_copy_utilization_percent?$SEL")
t_eq "the GPU metrics keep answering from tenant giantswarm" \
  "$(expected_agg DCGM_FI_DEV_MEM_COPY_UTIL avg pod "$BERT")" "$(item_values "$r")"
adapter_fetch "$C/namespaces/ml/pods/*/app_requests_in_flight?$SEL"
t_json "the apps metric answers a 503 Status naming its backend" "$R_BODY" \
  '"\(.code) \(.message | startswith("unable to fetch metrics from backend mimir-apps: "))"' "503 true"
t_eq "... whose code is the HTTP status" "$R_STATUS" "$(jq -r .code <<<"$R_BODY")"
adapter_fetch /apis/metrics.k8s.io/v1beta1/namespaces/ml/pods
t_json "resourceRules with backend mimir-apps down: a 503 Status naming the backend" "$R_BODY" \
  '"\(.kind) \(.code) \(.message | test("backend mimir-apps"))"' "Status 503 true"
t_eq "... whose code is the HTTP status" 503 "$R_STATUS"

# --- secrets stay out of logs and /metrics ----------------------------------------------------------
METRICS=$(curl -s --max-time 10 --cacert "$ADAPTER_CA" "$ADAPTER_URL/metrics")
t_ok "/metrics has per-backend request counts labelled by backend name" \
  bash -c "grep -q 'backend=\"mimir-gpu\"' <<<'$(grep -E '^custom_metrics_adapter_backend_requests_total' <<<"$METRICS")' &&
    grep -q 'backend=\"vm\"' <<<'$(grep -E '^custom_metrics_adapter_backend_requests_total' <<<"$METRICS")'"
t_ok "/metrics: the flags' backend is labelled by its URL without userinfo" \
  grep -qE "^custom_metrics_adapter_backend_requests_total\{backend=\"$VM_URL\",endpoint=\"query\"" <<<"$METRICS"
t_ok "/metrics: the backend with userinfo in its url by its name" \
  grep -qE '^custom_metrics_adapter_backend_requests_total\{backend="mimir-apps-url",endpoint="query"' <<<"$METRICS"
# The "=== start_adapter" lines are the test harness's own (the command line it ran), not the adapter's.
for s in "$GS_PASSWORD" "$APPS_PASSWORD" "$FLAGS_PASSWORD" "$(printf '%s' "$GS_USER:$GS_PASSWORD" | base64 -w0)" \
  "$(printf '%s' "$APPS_USER:$APPS_PASSWORD" | base64 -w0)" "$GS_PASSWORD_2" \
  "$(printf '%s' "$GS_USER:$GS_PASSWORD_2" | base64 -w0)" "$GPU_TOKEN_1" "$GPU_TOKEN_2"; do
  t_eq "no secret in the adapter's log (--v=8) (secret ${s:0:3}...)" 0 "$(grep -v '^=== start_adapter ' "$ADAPTER_LOG" | grep -cF -- "$s")"
  t_eq "no secret in /metrics (secret ${s:0:3}...)" 0 "$(grep -cF -- "$s" <<<"$METRICS")"
  t_eq "no secret in explain's reports and log (secret ${s:0:3}...)" 0 "$(grep -cF -- "$s" "$CMA_TMP/explain.all")"
done
t_ok "oracle: the harness's own line does hold the --prometheus-url password (the check can fail)" \
  grep -qF -- "$FLAGS_PASSWORD" "$ADAPTER_LOG"
stop_adapter
t_eq "adapter exits 0 on SIGTERM" 0 "$?"
t_summary
