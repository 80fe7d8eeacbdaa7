#!/usr/bin/env bash
# test_metrics.sh: the adapter's self-metrics, request logs and Grafana dashboard end to end.
# A real Prometheus scrapes /metrics over TLS with a bearer token (the recorded TokenReview's
# service account, authorized by a SubjectAccessReview for the non-resource path /metrics) while
# the test sends known traffic; the test then asks that Prometheus: request counts by code equal
# the requests made, the backend counters moved, the relist metrics are there. `promtool check
# metrics` finds no problem in the exposition. Anonymous /metrics is refused (403 Status JSON), a
# rejected token gets 401, and with --authorization-always-allow-paths listing /metrics the
# anonymous scrape is served. Logs: with --logging-format=json every line is a JSON object and
# each request has one "HTTP" line at --v=2 (user, verb, path, code, duration_ms, backend_ms); in
# text a 6,000-byte path is logged whole. Dashboard: every metric name in the PromQL of
# deploy/grafana/custom-metrics-adapter.json is exported, and every expression evaluates.
# The fake kube-apiserver stands in for kube-apiserver's TokenReview and SubjectAccessReview APIs
# (recorded answers); the metrics backend is a real Prometheus with generated DCGM data.
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

DASHBOARD=deploy/grafana/custom-metrics-adapter.json
token_of() { sed -n '/^{/{p;q}' "$CMA_FIXTURES/$1" | jq -r .spec.token; }
TOKEN=$(token_of tokenreview-valid.http)
SA_USER=$(sed -n '/^{"kind":"TokenReview"/p' "$CMA_FIXTURES/tokenreview-valid.http" | jq -r .status.user.username)
kube_control() { curl -s --max-time 10 --cacert "$KUBE_CA" -H "Authorization: Bearer fake-admin" "$@"; }
sar_allow() { kube_control "$KUBE_URL/__fake/sar-allow?users=$1" >/dev/null; }

# call [CURL ARGS...] PATH: sets C_STATUS, C_BODY and C_TYPE.
call() {
  local path=${*: -1} out
  local args=("${@:1:$#-1}")
  out=$(curl -s --max-time 20 --cacert "$ADAPTER_CA" -o "$CMA_TMP/call.body" \
    -w '%{http_code} %{content_type}' "${args[@]}" "$ADAPTER_URL$path")
  C_STATUS=${out%% *}
  C_TYPE=${out#* }
  C_BODY=$(cat "$CMA_TMP/call.body")
}
with_token() { call -H "Authorization: Bearer $TOKEN" "$@"; }
# wait_listed METRIC: until custom.metrics.k8s.io/v1beta1 lists METRIC for the token's user (60 s).
wait_listed() {
  local deadline=$((SECONDS + 60))
  until with_token /apis/custom.metrics.k8s.io/v1beta1 &&
    jq -e --arg m "$1" 'any(.resources[]?; .name | endswith("/" + $m))' <<<"$C_BODY" >/dev/null; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.5
  done
}

# start_scraper: a second Prometheus whose only job scrapes the adapter every second over TLS
# with the bearer token. Exports SCRAPER_URL.
start_scraper() {
  local dir port host=${ADAPTER_URL#https://}
  dir=$(mktemp -d "$CMA_TMP/scraper.XXXX")
  printf '%s' "$TOKEN" >"$dir/token"
  cat >"$dir/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
- job_name: custom-metrics-adapter
  scheme: https
  tls_config:
    ca_file: $ADAPTER_CA
  authorization:
    credentials_file: $dir/token
  static_configs:
  - targets: ['$host']
EOF
  port=$(free_port)
  _cma_spawn "$dir/prometheus.log" prometheus --config.file="$dir/prometheus.yml" \
    --storage.tsdb.path="$dir/data" --web.listen-address="127.0.0.1:$port" --log.level=warn
  _cma_wait_ready scraper "$_CMA_SPAWNED" "$dir/prometheus.log" "http://127.0.0.1:$port/-/ready" ||
    return 1
  export SCRAPER_URL="http://127.0.0.1:$port"
}
scraper_query() { curl -s --max-time 10 -G "$SCRAPER_URL/api/v1/query" --data-urlencode "query=$1"; }
# scraper_value EXPR: the first sample's value, "" when there is none.
scraper_value() { scraper_query "$1" | jq -r '.data.result[0].value[1] // ""'; }
# wait_scraped EXPR WANT: polls the scraper until EXPR's value is WANT (60 s at most).
wait_scraped() {
  local deadline=$((SECONDS + 60)) v
  while :; do
    v=$(scraper_value "$1")
    [ "$v" = "$2" ] && return 0
    [ "$SECONDS" -ge "$deadline" ] && {
      echo "$1 = '$v', wanted '$2'"
      return 1
    }
    sleep 0.5
  done
}

# wait_ge EXPR MIN: polls the scraper until EXPR's value is at least MIN (60 s at most).
wait_ge() {
  local deadline=$((SECONDS + 60)) v
  while :; do
    v=$(scraper_value "$1")
    [ -n "$v" ] && python3 -c "import sys; sys.exit(0 if float('$v') >= $2 else 1)" && return 0
    [ "$SECONDS" -ge "$deadline" ] && {
      echo "$1 = '$v', wanted at least $2"
      return 1
    }
    sleep 0.5
  done
}

gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
sar_allow "$SA_USER"
if ! start_adapter config/gpu-dcgm.yaml --logging-format=json; then
  t_fail "start the adapter (JSON logs)"
  t_summary
  exit 1
fi
t_ok "discovery lists DCGM_FI_DEV_GPU_UTIL" wait_listed DCGM_FI_DEV_GPU_UTIL

# --- who may read /metrics --------------------------------------------------------------------
call /metrics
t_eq "anonymous /metrics: 403" 403 "$C_STATUS"
t_json "anonymous /metrics: Status JSON naming the path" "$C_BODY" '"\(.kind) \(.code) \(.message)"' \
  'Status 403 forbidden: User "system:anonymous" cannot get path "/metrics"'
call -H "Authorization: Bearer garbage.not-a-token" /metrics
t_eq "rejected token /metrics: 401" 401 "$C_STATUS"
t_json "rejected token /metrics: Status JSON" "$C_BODY" '"\(.kind) \(.code) \(.reason)"' "Status 401 Unauthorized"
with_token /metrics
t_eq "service account with the SAR allowed: 200" 200 "$C_STATUS"
t_eq "text exposition format 0.0.4" "text/plain; version=0.0.4; charset=utf-8" "$C_TYPE"
with_token -H "Accept: text/plain" /metrics
t_eq "Accept: text/plain is fine for /metrics" 200 "$C_STATUS"

# --- known traffic -----------------------------------------------------------------------------
start_scraper || {
  t_fail "start the scraping Prometheus"
  t_summary
  exit 1
}
t_ok "the scraper sees the adapter up" wait_scraped 'up{job="custom-metrics-adapter"}' 1
OK_PATH=/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/%2A/DCGM_FI_DEV_GPU_UTIL
MISSING_PATH=/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/%2A/no_such_metric
for _ in 1 2 3 4 5 6 7; do with_token "$OK_PATH"; done
t_eq "the metric answers 200" 200 "$C_STATUS"
for _ in 1 2 3; do with_token "$MISSING_PATH"; done
t_eq "an unknown metric answers 404" 404 "$C_STATUS"
for _ in 1 2; do call "$OK_PATH"; done
t_eq "anonymous metric request: 403" 403 "$C_STATUS"

sel='resource="pods",subresource="DCGM_FI_DEV_GPU_UTIL",group="custom.metrics.k8s.io",version="v1beta1",scope="resource",verb="GET",component="apiserver"'
t_ok "Prometheus: 7 requests with code 200 for the metric" \
  wait_scraped "sum(apiserver_request_total{$sel,code=\"200\"})" 7
t_ok "Prometheus: 3 requests with code 404 for the unknown metric" \
  wait_scraped 'sum(apiserver_request_total{subresource="no_such_metric",code="404"})' 3
t_ok "Prometheus: 403s counted without path-derived labels" \
  wait_ge 'sum(apiserver_request_total{code="403",resource="",subresource="",scope=""})' 3
t_ok "Prometheus: 401s counted" wait_ge 'sum(apiserver_request_total{code="401"})' 1
t_ok "Prometheus: the latency histogram counted the same 7" \
  wait_scraped "sum(apiserver_request_duration_seconds_count{$sel})" 7
t_ok "Prometheus: kube-apiserver's buckets (le=0.005 ... 60)" \
  wait_scraped 'count(count by (le) (apiserver_request_duration_seconds_bucket))' 24
# The query cache (--metrics-cache-ttl) answers repeats, so at least one backend query per metric.
t_ok "Prometheus: backend queries counted (success)" \
  wait_ge 'sum(custom_metrics_adapter_backend_requests_total{endpoint="query",outcome="success"})' 1
v=$(scraper_value 'sum(custom_metrics_adapter_backend_requests_total{endpoint="series",outcome="success"})')
t_ok "Prometheus: relist series calls counted ($v)" test "${v:-0}" -ge 1
v=$(scraper_value 'sum(custom_metrics_adapter_backend_request_duration_seconds_count{endpoint="query"})')
t_ok "Prometheus: backend latency histogram has the queries ($v)" test "${v:-0}" -ge 1
v=$(scraper_value 'custom_metrics_adapter_relist_last_success_timestamp_seconds')
t_ok "Prometheus: last relist success is a recent Unix time ($v)" \
  python3 -c "import sys,time; sys.exit(0 if abs(time.time()-float('$v')) < 600 else 1)"
v=$(scraper_value 'custom_metrics_adapter_relist_total{result="success"}')
t_ok "Prometheus: relists counted ($v)" test "${v:-0}" -ge 1
v=$(scraper_value 'custom_metrics_adapter_relist_series_total')
t_ok "Prometheus: series read by relists ($v)" test "${v:-0}" -gt 0
v=$(scraper_value 'custom_metrics_adapter_catalog_entries{group="custom.metrics.k8s.io"}')
t_ok "Prometheus: catalog entries of custom.metrics.k8s.io ($v)" test "${v:-0}" -gt 0
v=$(scraper_value 'custom_metrics_adapter_watch_cache_objects{resource="pods"}')
t_ok "Prometheus: pod watch cache objects ($v)" test "${v:-0}" -gt 0
v=$(scraper_value 'sum(custom_metrics_adapter_authentication_attempts_total{method="token",result="success"})')
t_ok "Prometheus: token authentications counted ($v)" test "${v:-0}" -ge 10
v=$(scraper_value 'sum(custom_metrics_adapter_auth_cache_requests_total{cache="tokenreview",result="hit"})')
t_ok "Prometheus: TokenReview cache hits ($v)" test "${v:-0}" -ge 1
v=$(scraper_value 'sum(custom_metrics_adapter_authorization_decisions_total{decision="denied"})')
t_ok "Prometheus: denied authorizations ($v)" test "${v:-0}" -ge 3
v=$(scraper_value 'process_resident_memory_bytes')
t_ok "Prometheus: process RSS ($v bytes)" test "${v%.*}" -gt 1000000
v=$(scraper_value 'time() - process_start_time_seconds')
t_ok "Prometheus: process start time in the past hour ($v s)" \
  python3 -c "import sys; sys.exit(0 if 0 <= float('$v') < 3600 else 1)"
v=$(scraper_value 'process_open_fds')
t_ok "Prometheus: open fds ($v)" test "${v:-0}" -gt 3
t_ok "Prometheus: build info" wait_scraped 'custom_metrics_adapter_build_info{version=~"v.+"}' 1

# --- the exposition itself ---------------------------------------------------------------------
with_token /metrics
printf '%s\n' "$C_BODY" >"$CMA_TMP/metrics.txt"
t_ok "promtool check metrics finds no problem" \
  bash -c "out=\$(promtool check metrics <'$CMA_TMP/metrics.txt' 2>&1); echo \"\$out\"; [ -z \"\$out\" ]"
names=$(grep '^# TYPE' "$CMA_TMP/metrics.txt" | awk '{print $3}')
t_eq "families sorted by name" "$(printf '%s\n' "$names" | LC_ALL=C sort)" "$names"
with_token /metrics
t_eq "two scrapes list the same series" \
  "$(sed 's/ [^ ]*$//' "$CMA_TMP/metrics.txt" | grep -v '^process_\|^apiserver_request\|^custom_metrics_adapter_auth')" \
  "$(printf '%s\n' "$C_BODY" | sed 's/ [^ ]*$//' | grep -v '^process_\|^apiserver_request\|^custom_metrics_adapter_auth')"

# --- logs (JSON) -------------------------------------------------------------------------------
json_lines="$CMA_TMP/adapter.json"
grep '^{' "$ADAPTER_LOG" >"$json_lines"
t_ok "every adapter line is a JSON object (--logging-format=json)" \
  bash -c "! grep -v '^===' '$ADAPTER_LOG' | grep -qv '^{' && jq -e . '$json_lines' >/dev/null"
t_json "JSON lines carry ts, level, v and msg" "$(head -n 1 "$json_lines")" \
  '[(.ts|type), (.level|type), (.v|type), (.msg|type)] | join(",")' "number,string,number,string"
n=$(jq -c --arg p "$OK_PATH" 'select(.msg == "HTTP" and .path == $p and .code == 200)' "$json_lines" | wc -l)
t_eq "one HTTP line per request with code 200 for the metric" 7 "$n"
lines=$(jq -c --arg p "$OK_PATH" 'select(.msg == "HTTP" and .path == $p and .code == 200)' "$json_lines")
t_json "HTTP line: user, verb, level, v" "$(tail -n 1 <<<"$lines")" '"\(.user) \(.verb) \(.level) \(.v)"' "$SA_USER GET info 2"
t_json "HTTP lines: the request that went to the backend has backend time, all within duration" \
  "$(jq -s . <<<"$lines")" \
  '(map(.backend_ms) | max > 0) and all(.[]; .duration_ms > 0 and .backend_ms <= .duration_ms)' true
line=$(jq -c 'select(.msg == "HTTP" and .code == 403)' "$json_lines" | tail -n 1)
t_json "HTTP line of a refused request: anonymous, no backend time spent" "$line" \
  '"\(.code) \(.user) \(.backend_ms)"' "403 system:anonymous 0"
stop_adapter

# --- anonymous /metrics through --authorization-always-allow-paths; text logs -------------------
if ! start_adapter config/gpu-dcgm.yaml --authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics; then
  t_fail "start the adapter (always-allow /metrics)"
  t_summary
  exit 1
fi
t_ok "discovery lists DCGM_FI_DEV_GPU_UTIL (second start)" wait_listed DCGM_FI_DEV_GPU_UTIL
n=$(kube_control "$KUBE_URL/__fake/sar-log" | jq length)
call /metrics
t_eq "anonymous /metrics with /metrics always allowed: 200 without a SAR" "200 $n" \
  "$C_STATUS $(kube_control "$KUBE_URL/__fake/sar-log" | jq length)"
t_ok "anonymous /metrics: the exposition" grep -q '^# TYPE apiserver_request_total counter$' "$CMA_TMP/call.body"
t_ok "text log: the HTTP line for /metrics" \
  grep -q ' I HTTP verb="GET" path="/metrics" code=200 user="system:anonymous" duration_ms=' "$ADAPTER_LOG"
long="/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/%2A/$(printf 'x%.0s' $(seq 6000))END"
call -H "Authorization: Bearer $TOKEN" "$long"
t_eq "a 6,000-byte metric name: 404" 404 "$C_STATUS"
t_ok "the 6,000-byte path is logged whole, not cut at 4 KiB" grep -q "xxxxEND\" code=404" "$ADAPTER_LOG"
t_ok "no log line was truncated" bash -c "! grep -q 'truncated:' '$ADAPTER_LOG'"

# --- the Grafana dashboard ---------------------------------------------------------------------
t_ok "the dashboard is JSON with panels" jq -e '.panels | length > 5' "$DASHBOARD"
# Expressions with Grafana's variables given values Prometheus understands.
jq -r '.. | objects | select(has("expr")) | .expr' "$DASHBOARD" |
  sed -e 's/\$__rate_interval/1m/g' -e 's/\$__range/1h/g' -e 's/\$job/custom-metrics-adapter/g' \
    -e 's/\$instance/.*/g' >"$CMA_TMP/exprs.txt"
t_ok "the dashboard has PromQL expressions" test "$(wc -l <"$CMA_TMP/exprs.txt")" -ge 8
used=$(python3 - "$CMA_TMP/exprs.txt" <<'EOF'
import re, sys
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan"}
names = set()
for expr in open(sys.argv[1]):
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)              # string literals
    e = re.sub(r'\{[^}]*\}', '{}', e)                          # label matchers
    e = re.sub(r'\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)', ' ', e)
    e = re.sub(r'\[[^\]]*\]', '', e)                           # range selectors
    for m in re.finditer(r'(?<![\w:.])([A-Za-z_:][\w:]*)\s*(\()?', e):
        if m.group(2) or m.group(1).lower() in KEYWORDS:
            continue                                           # functions, aggregations, keywords
        names.add(m.group(1))
print("\n".join(sorted(names)))
EOF
)
# What the adapter exported after the traffic above (series names: a histogram's _bucket, _sum
# and _count included).
grep -v '^#' "$CMA_TMP/metrics.txt" | sed 's/[{ ].*//' | sort -u >"$CMA_TMP/exported.txt"
missing=$(comm -23 <(printf '%s\n' "$used") "$CMA_TMP/exported.txt")
t_ok "the dashboard uses metrics ($(printf '%s\n' "$used" | wc -l))" test -n "$used"
t_eq "every metric the dashboard uses is exported" "" "$missing"
bad=""
while IFS= read -r expr; do
  st=$(scraper_query "$expr" | jq -r .status)
  [ "$st" = success ] || bad+="$expr"$'\n'
done <"$CMA_TMP/exprs.txt"
t_eq "every dashboard expression evaluates in Prometheus" "" "$bad"
t_summary
