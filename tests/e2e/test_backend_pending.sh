#!/usr/bin/env bash
# test_backend_pending.sh: answers that say what is wrong (issue 22, parts 4 and 5), with real components: a real Prometheus as the flags' backend (the DCGM GPU series), and a named backend apps-gw behind Debian's nginx as the failing gateway (its upstream is a port nobody listens on, so nginx answers its own HTML 502 page). Checks: while apps-gw has never listed its series, its custom and external metrics (and a metric no rule serves, which may be its) answer 503 ServiceUnavailable naming the backend, saying its series have not been listed yet and since when discovery tries, with the gateway's status line and the page's text but no markup, in at most a few hundred bytes, and /debug/explain says the same; the flags' backend's metric is served meanwhile; once the gateway reaches a Prometheus with the data (nginx reloaded) the metrics are discovered and served with that Prometheus' value; when the gateway fails again after that successful listing the metric stays in discovery (its last good state) and only the value request answers 503, with the gateway's status line and no markup.
# asan: yes
# shellcheck disable=SC2119 # gen_dcgm and stop_adapter are called without their optional args
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

gen_dcgm || exit 1
# The apps data: an application gauge per pod (the FB_USED values under another name).
APPS_OM="$CMA_TMP/apps.om"
{
  echo "# TYPE app_requests_in_flight gauge"
  grep '^DCGM_FI_DEV_FB_USED{' "$DCGM_DIR/dcgm.om" | sed 's/^DCGM_FI_DEV_FB_USED{/app_requests_in_flight{/'
  echo "# EOF"
} >"$APPS_OM"
if ! start_prometheus "$APPS_OM"; then
  t_fail "start the apps Prometheus"
  t_summary
  exit 1
fi
PROM_APPS=$PROM_URL
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start the GPU Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi

# --- the gateway: nginx in front of an upstream nobody listens on (its own 502 page) ----------------
NG=$(free_port)
DEAD=$(free_port)
gateway_to() {
  cat >"$CMA_TMP/gateway.conf" <<EOF
server {
  listen 127.0.0.1:$NG;
  location / { proxy_pass http://$1; proxy_connect_timeout 2s; }
}
EOF
}
gateway_to "127.0.0.1:$DEAD"
if ! start_nginx "$CMA_TMP/gateway.conf"; then
  t_fail "start nginx"
  t_summary
  exit 1
fi
page=$(curl -s "http://127.0.0.1:$NG/api/v1/series")
t_ok "the gateway answers its own HTML error page" grep -q '<title>502 Bad Gateway</title>' <<<"$page"

cat >"$CMA_TMP/pending.yaml" <<EOF
backends:
- name: apps-gw
  url: http://127.0.0.1:$NG
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {as: gpu_util}
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
- seriesQuery: 'app_requests_in_flight{namespace!="",pod!=""}'
  backend: apps-gw
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
externalRules:
- seriesQuery: 'app_requests_in_flight{namespace!=""}'
  backend: apps-gw
  resources: {namespaced: false}
  name: {as: apps_in_flight_total}
  metricsQuery: sum(app_requests_in_flight)
EOF

G=/apis/custom.metrics.k8s.io/v1beta1
E=/apis/external.metrics.k8s.io/v1beta1
APP="$G/namespaces/ml/pods/*/app_requests_in_flight?labelSelector=app%3Dbert"
EXT="$E/namespaces/default/apps_in_flight_total"
# no_markup MESSAGE: true when the message has no tag and at most 600 bytes
no_markup() { ! grep -q '<[a-zA-Z/!]' <<<"$1" && [ "${#1}" -le 600 ]; }

# --metrics-cache-ttl=0: each value request asks the backend (the outage below is seen at once)
if ! RELIST=2s start_adapter "$CMA_TMP/pending.yaml" --enable-explain --metrics-cache-ttl=0 \
  --authorization-always-allow-paths=/healthz,/readyz,/livez,/debug/explain; then
  t_fail "start the adapter"
  t_summary
  exit 1
fi
t_ok "the flags' backend's metric is discovered" wait_discovery gpu_util
adapter_fetch "$G/namespaces/ml/pods/*/gpu_util?labelSelector=app%3Dbert"
t_eq "the flags' backend's metric is served meanwhile" 200 "$R_STATUS"

# --- part 4: a backend that never answered says so -------------------------------------------------
wait_adapter_log "backend apps-gw: .*502 Bad Gateway" 30
adapter_fetch "$APP"
t_eq "never listed: custom metric answers 503 (not 404)" 503 "$R_STATUS"
t_json "never listed: Status ServiceUnavailable, code 503" "$R_BODY" '"\(.kind) \(.code) \(.reason)"' \
  "Status 503 ServiceUnavailable"
msg=$(jq -r .message <<<"$R_BODY")
t_ok "never listed: the message names the backend and says its series were not listed yet" \
  grep -q "backend apps-gw has not listed its series yet (trying since 20[0-9-]*T[0-9:]*Z)" <<<"$msg"
t_ok "never listed: ... for the metric asked" grep -q "the metric app_requests_in_flight for pods" <<<"$msg"
# part 5: the gateway's status line and the page's text, no markup
t_ok "the last error keeps nginx's status line" grep -q "HTTP 502 Bad Gateway" <<<"$msg"
t_ok "the last error carries the page's text" grep -q "502 Bad Gateway nginx" <<<"$msg"
t_ok "no markup, at most a few hundred bytes (${#msg} bytes)" no_markup "$msg"
adapter_fetch "$EXT"
t_eq "never listed: external metric answers 503" 503 "$R_STATUS"
t_ok "never listed: the external message names the backend" \
  grep -q "backend apps-gw has not listed its series yet" <<<"$(jq -r .message <<<"$R_BODY")"
adapter_fetch "$G/namespaces/ml/pods/*/no_such_metric"
t_eq "a metric no rule serves may be the pending backend's: 503 too" 503 "$R_STATUS"
adapter_fetch "/debug/explain?path=$(jq -rn --arg p "$APP" '$p | @uri')"
t_eq "/debug/explain answers" 200 "$R_STATUS"
t_ok "explain says the same (why)" grep -q "^ *backend apps-gw has not listed its series yet" <<<"$R_BODY"
t_ok "explain's answer is the 503" grep -q '^answer: HTTP 503$' <<<"$R_BODY"

# --- the gateway reaches its Prometheus: discovered, served ------------------------------------------
gateway_to "${PROM_APPS#http://}"
t_ok "nginx reloaded towards the apps Prometheus" reload_nginx
t_ok "apps-gw's metric is discovered once it answers" wait_discovery app_requests_in_flight "" 60
adapter_fetch "$APP"
t_eq "listed: custom metric served" 200 "$R_STATUS"
adapter_fetch "$G/namespaces/ml/pods/bert-0/app_requests_in_flight"
want=$(quantity "$(curl -s -G "$PROM_APPS/api/v1/query" \
  --data-urlencode 'query=sum(app_requests_in_flight{namespace="ml",pod="bert-0"})' | jq -r '.data.result[0].value[1]')")
t_json "listed: bert-0's value is the apps Prometheus' (through the gateway)" "$R_BODY" '.items[0].value' "$want"
adapter_fetch "$EXT"
t_eq "listed: external metric served" 200 "$R_STATUS"

# --- an outage after a successful listing: the last good discovery state, 503 on values -------------
gateway_to "127.0.0.1:$DEAD"
t_ok "nginx reloaded towards the dead upstream" reload_nginx
wait_adapter_log "unable to update list of metrics of backend apps-gw: .*502 Bad Gateway" 30
t_ok "after a successful listing the metric stays in discovery" wait_discovery app_requests_in_flight "" 5
adapter_fetch "$APP"
t_eq "outage after listing: the value request answers 503" 503 "$R_STATUS"
msg=$(jq -r .message <<<"$R_BODY")
t_ok "outage after listing: the message names the backend" grep -q "backend apps-gw" <<<"$msg"
t_ok "outage after listing: nginx's status line" grep -q "HTTP 502 Bad Gateway" <<<"$msg"
not_pending() { ! grep -q "has not listed" <<<"$1"; }
t_ok "outage after listing: no 'not listed yet' (it was)" not_pending "$msg"
t_ok "outage after listing: no markup (${#msg} bytes)" no_markup "$msg"
stop_adapter
t_eq "adapter exits 0 on SIGTERM" 0 "$?"
t_summary
