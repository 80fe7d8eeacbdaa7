#!/usr/bin/env bash
# test_backend_protection.sh: the adapter protects its backend (issue 12, part 4). Against a hung
# Prometheus (tests/lib/slow_backend.py --notice-close: queries hang 30 s, series answer at once,
# a query whose client closes its connection stops, as in Prometheus): (a) with
# --prometheus-max-concurrent-queries=2, two slow requests hold both query slots and two more,
# each with the client-go style ?timeout=2s, never reach the backend (it sees at most 2 queries
# at once) and get 429 TooManyRequests Status JSON with Retry-After and a message naming the flag,
# while the first two get 504 at --prometheus-timeout; (b) with --prometheus-timeout=30s, a client
# that gives up after 1 s (curl --max-time 1) makes the backend query end within a few seconds
# (the backend logs the connection closed and in-flight drops to 0), long before the timeout, and
# the freed slot serves the next request; (c) with --max-requests-inflight=2 and both workers held
# by hung queries, a bearer-token discovery request whose TokenReview and SubjectAccessReview
# answers are cached is answered on the event thread (200, the same document as before, counted in
# apiserver_request_total), while a metric request and a discovery request whose authorization is
# not cached still get 429 (issue 12: before the event-thread fast path all three got 429);
# (d) coalesced requests keep their own deadlines (issue 22, part 6), against a backend whose
# queries answer after 8 s: a request with ?timeout=2s that shares the query of a request that
# allows longer answers 504 at its own deadline, saying the query goes on, while the query is
# still in the backend; the other request gets the answer of that same query (the backend saw one
# query, answered, not cancelled); and when every client of a shared query has gone, the backend
# query is cancelled (it logs the connection closed, in-flight drops to 0).
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
G=/apis/custom.metrics.k8s.io
cat >"$CMA_TMP/slow.yaml" <<'EOF'
# The first rule of config/gpu-dcgm.yaml.
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace:
        resource: namespace
      pod:
        resource: pod
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
EOF
# The slow backend lists what the real Prometheus lists for that rule.
curl -s -G "$PROM_URL/api/v1/series" --data-urlencode 'match[]=DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}' \
  -d "start=$(($(date +%s) - 300))" >"$CMA_TMP/series.json"
t_json "canned series body recorded from Prometheus" "$(cat "$CMA_TMP/series.json")" '.data | length > 0' true
stop_prometheus
if ! start_slow_backend "$CMA_TMP/series.json" --sleep 30 --notice-close; then
  t_fail "start_slow_backend"
  t_summary
  exit 1
fi
in_flight() { curl -s --max-time 5 "$SLOW_URL/debug/in-flight" | jq -r ".$1"; }
pod_path() { printf '%s' "$G/v1beta1/namespaces/ml/pods/bert-$1/DCGM_FI_DEV_GPU_UTIL"; }

# wait_in_flight N SECONDS: until the backend has N queries hanging.
wait_in_flight() {
  local deadline=$((SECONDS + $2))
  while [ "$(in_flight in_flight)" != "$1" ] && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.05
  done
  [ "$(in_flight in_flight)" = "$1" ]
}

# --- (a) at most 2 queries at once; the others get 429 -------------------------------------------
# --prometheus-timeout=12s: the two held queries keep their slots well past the deadlines of the
# two ?timeout=2s requests, even when a loaded machine starts those seconds late
if PROM_URL=$SLOW_URL start_adapter "$CMA_TMP/slow.yaml" --prometheus-max-concurrent-queries=2 \
  --prometheus-timeout=12s; then
  t_ok "discovery works (series answer at once)" wait_discovery DCGM_FI_DEV_GPU_UTIL
  max_file="$CMA_TMP/max_in_flight"
  echo 0 >"$max_file"
  (
    # samples what the backend sees until told to stop
    while [ ! -e "$CMA_TMP/stop_sampling" ]; do
      n=$(in_flight in_flight)
      [ -n "$n" ] && [ "$n" -gt "$(cat "$max_file")" ] && echo "$n" >"$max_file"
      sleep 0.05
    done
  ) &
  sampler=$!
  pids=()
  for i in 1 2; do
    curl -s --max-time 60 --cacert "$ADAPTER_CA" -o "$CMA_TMP/hold$i.body" -w '%{http_code}' \
      "$ADAPTER_URL$(pod_path "$i")" >"$CMA_TMP/hold$i.code" &
    pids+=($!)
  done
  t_ok "(a) two different queries hang in the backend" wait_in_flight 2 30
  for i in 3 4; do
    curl -s --max-time 60 --cacert "$ADAPTER_CA" -D "$CMA_TMP/wait$i.headers" -o "$CMA_TMP/wait$i.body" \
      -w '%{http_code}' "$ADAPTER_URL$(pod_path "$i")?timeout=2s" >"$CMA_TMP/wait$i.code" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p"
  done
  touch "$CMA_TMP/stop_sampling"
  wait "$sampler"
  t_eq "(a) the backend saw at most 2 queries at once" 2 "$(cat "$max_file")"
  t_eq "(a) only the 2 that got a slot reached the backend" 2 "$(in_flight started)"
  t_eq "(a) the two holding a slot: 504 at --prometheus-timeout" "504 504" \
    "$(cat "$CMA_TMP/hold1.code") $(cat "$CMA_TMP/hold2.code")"
  t_eq "(a) the two without a slot: 429" "429 429" \
    "$(cat "$CMA_TMP/wait3.code") $(cat "$CMA_TMP/wait4.code")"
  for i in 3 4; do
    t_json "(a) request $i: Status 429 TooManyRequests" "$(cat "$CMA_TMP/wait$i.body")" \
      '"\(.kind) \(.code) \(.reason)"' "Status 429 TooManyRequests"
    t_json "(a) request $i: the message names the flag" "$(cat "$CMA_TMP/wait$i.body")" \
      '.message | contains("--prometheus-max-concurrent-queries")' true
    t_ok "(a) request $i: Retry-After: 1" grep -qi '^Retry-After: 1' "$CMA_TMP/wait$i.headers"
  done
  stop_adapter
  t_eq "(a) adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "start_adapter with --prometheus-max-concurrent-queries=2"
fi

# --- (b) a client that goes away ends its backend query ------------------------------------------
if PROM_URL=$SLOW_URL start_adapter "$CMA_TMP/slow.yaml" --prometheus-max-concurrent-queries=1 \
  --prometheus-timeout=30s; then
  t_ok "(b) discovery works" wait_discovery DCGM_FI_DEV_GPU_UTIL
  started_before=$(in_flight started)
  t0=$SECONDS
  code=$(curl -s --max-time 1 --cacert "$ADAPTER_CA" -o /dev/null -w '%{http_code}' \
    "$ADAPTER_URL$(pod_path 5)")
  t_eq "(b) the client gave up after 1 s without an answer" 000 "$code"
  t_eq "(b) its query reached the backend" $((started_before + 1)) "$(in_flight started)"
  t_ok "(b) the backend query ends within 5 s of the client leaving (--prometheus-timeout is 30s)" \
    wait_in_flight 0 5
  t_ok "(b) well before the timeout" test $((SECONDS - t0)) -lt 10
  t_ok "(b) the backend saw the adapter close the connection" \
    grep -q '"path": "/api/v1/query", "phase": "closed"' "$SLOW_REQUEST_LOG"
  t_ok "(b) the adapter logged the abandoned query" \
    wait_adapter_log 'abandoned after [0-9]* ms: the client of the request closed its connection' 10
  # the only slot is free again: the next request's query goes out at once
  curl -s --max-time 2 --cacert "$ADAPTER_CA" -o /dev/null "$ADAPTER_URL$(pod_path 6)"
  t_eq "(b) the freed slot served the next request" $((started_before + 2)) "$(in_flight started)"
  stop_adapter
  t_eq "(b) adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "start_adapter with --prometheus-timeout=30s"
fi

# --- (c) every worker busy: discovery with cached authorization still answers --------------------
token_of() { sed -n '/^{/{p;q}' "$CMA_FIXTURES/$1" | jq -r .spec.token; }
TOKEN=$(token_of tokenreview-valid.http)
# disc PATH [CURL ARGS...]: the status code; the body goes to $CMA_TMP/disc.body.
disc() {
  local path=$1
  shift
  curl -s --max-time 10 --cacert "$ADAPTER_CA" -o "$CMA_TMP/disc.body" -w '%{http_code}' "$@" \
    "$ADAPTER_URL$path"
}
requests_total() {
  curl -s --max-time 10 --cacert "$ADAPTER_CA" "$ADAPTER_URL/metrics" |
    awk '/^apiserver_request_total\{/ && /code="200"/ && /subresource="\/apis/ {s += $NF} END {print s + 0}'
}
if PROM_URL=$SLOW_URL start_adapter "$CMA_TMP/slow.yaml" --max-requests-inflight=2 \
  --prometheus-timeout=30s --authentication-token-webhook-cache-ttl=5m \
  --authorization-webhook-cache-authorized-ttl=5m; then
  t_ok "(c) discovery works" wait_discovery DCGM_FI_DEV_GPU_UTIL
  t_eq "(c) token discovery while workers are free: 200" 200 \
    "$(disc "$G/v1beta1" -H "Authorization: Bearer $TOKEN")"
  cp "$CMA_TMP/disc.body" "$CMA_TMP/disc.before"
  before=$(requests_total) # /metrics needs a worker: read while they are free
  pids=()
  for i in 7 8; do
    curl -s --max-time 60 --cacert "$ADAPTER_CA" -o /dev/null "$ADAPTER_URL$(pod_path "$i")" &
    pids+=($!)
  done
  t_ok "(c) two queries hang in the backend: both workers busy" wait_in_flight 2 30
  t_eq "(c) workers busy: token discovery with cached authorization: 200" 200 \
    "$(disc "$G/v1beta1" -H "Authorization: Bearer $TOKEN")"
  t_eq "(c) workers busy: the same document as before" "$(cat "$CMA_TMP/disc.before")" \
    "$(cat "$CMA_TMP/disc.body")"
  t_json "(c) the document lists the metric" "$(cat "$CMA_TMP/disc.body")" \
    'any(.resources[]; .name | endswith("/DCGM_FI_DEV_GPU_UTIL"))' true
  t_eq "(c) workers busy: a metric request: 429" 429 \
    "$(disc "$(pod_path 9)" -H "Authorization: Bearer $TOKEN")"
  t_eq "(c) workers busy: discovery whose authorization is not cached: 429" 429 \
    "$(disc "$G/v1beta2")"
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  t_ok "(c) the held queries end once their clients leave" wait_in_flight 0 10
  t_eq "(c) the inline answer is counted like a worker's (apiserver_request_total, code 200)" \
    $((before + 1)) "$(requests_total)"
  t_eq "(c) workers free again: discovery v1beta2: 200" 200 "$(disc "$G/v1beta2")"
  stop_adapter
  t_eq "(c) adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "start_adapter with --max-requests-inflight=2"
fi

# --- (d) coalesced requests keep their own deadlines --------------------------------------------
if start_slow_backend "$CMA_TMP/series.json" --sleep 8 --notice-close &&
  PROM_URL=$SLOW_URL start_adapter "$CMA_TMP/slow.yaml" --prometheus-timeout=30s \
    --metrics-cache-ttl=0; then
  t_ok "(d) discovery works" wait_discovery DCGM_FI_DEV_GPU_UTIL
  BY_SEL="$G/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert"
  started_before=$(in_flight started)
  curl -s --max-time 60 --cacert "$ADAPTER_CA" -o "$CMA_TMP/long.body" -w '%{http_code}' \
    "$ADAPTER_URL$BY_SEL" >"$CMA_TMP/long.code" &
  long=$!
  t_ok "(d) the long request's query is in the backend" wait_in_flight 1 30
  adapter_fetch "$BY_SEL&timeout=2s"
  t_eq "(d) the ?timeout=2s request that shares it: 504" 504 "$R_STATUS"
  t_json "(d) ... at its own deadline, the query going on for the others" "$R_BODY" \
    '.message | test("did not answer within 2s") and test("goes on")' true
  t_eq "(d) the shared query is still in the backend then" 1 "$(in_flight in_flight)"
  wait "$long"
  t_eq "(d) the request that allows longer gets the answer" 200 "$(cat "$CMA_TMP/long.code")"
  t_json "(d) ... the backend's (an empty vector: no items)" "$(cat "$CMA_TMP/long.body")" \
    '"\(.kind) \(.items | length)"' "MetricValueList 0"
  t_eq "(d) the backend saw one query for both" $((started_before + 1)) "$(in_flight started)"
  t_eq "(d) ... answered, not cancelled" 0 "$(grep -c '"phase": "closed"' "$SLOW_REQUEST_LOG")"
  # every client of a shared query goes: the backend query is cancelled
  started_before=$(in_flight started)
  pids=()
  for i in 1 2; do
    curl -s --max-time 2 --cacert "$ADAPTER_CA" -o /dev/null "$ADAPTER_URL$BY_SEL" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p"
  done
  t_ok "(d) both clients gone: the shared backend query ends (in-flight 0)" wait_in_flight 0 10
  t_ok "(d) the backend saw its connection closed" \
    grep -q '"path": "/api/v1/query", "phase": "closed"' "$SLOW_REQUEST_LOG"
  t_ok "(d) at most one query per client reached the backend" \
    test "$(in_flight started)" -le $((started_before + 2))
  stop_adapter
  t_eq "(d) adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "start the 8 s backend and the adapter"
fi
t_summary
