#!/usr/bin/env bash
# test_outage.sh: backend failures: (a) Prometheus stopped after discovery gives 503 ServiceUnavailable naming the problem, the last catalog keeps serving across failed relists, and requests recover once Prometheus is back on the same port; (b) a hung backend (tests/lib/slow_backend.py, queries sleep 30 s) with --prometheus-timeout=3s gives 504 Timeout, and while 4 such requests hang, health probes and discovery answer first; (c) with --max-requests-inflight=2 and two requests hanging, a third gets 429 TooManyRequests Status JSON with Retry-After at once, probes still answer, and requests are handled again once the hanging ones end.
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

gen_dcgm || exit 1
RELIST=2s
export RELIST
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json" ||
  ! start_adapter config/gpu-dcgm.yaml; then
  t_fail "start Prometheus, fake kube-apiserver and adapter"
  t_summary
  exit 1
fi
G=/apis/custom.metrics.k8s.io
BERT="$G/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert"
want_bert=$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod '.labels.namespace == "ml" and (.labels.pod // "" | startswith("bert-"))')

# --- (a) Prometheus goes away and comes back -------------------------------------------------------
t_ok "discovery before the outage" wait_discovery DCGM_FI_DEV_GPU_UTIL
discovery_before=$(curl -s --cacert "$ADAPTER_CA" "$ADAPTER_URL$G/v1beta1" | jq -c '[.resources[].name] | sort')
adapter_fetch "$BERT"
t_eq "before the outage: by-selector answers 200" 200 "$R_STATUS"

prom_port=${PROM_URL##*:}
stop_prometheus
sleep 6 # answers from before the outage may be served until --metrics-cache-ttl (5s) has passed
adapter_fetch "$BERT"
t_eq "Prometheus down: 503" 503 "$R_STATUS"
t_eq "Prometheus down: Content-Type" application/json "$R_CTYPE"
t_json "Prometheus down: Status ServiceUnavailable" "$R_BODY" '"\(.kind) \(.code) \(.reason)"' \
  "Status 503 ServiceUnavailable"
t_json "Prometheus down: the message names the backend and its address" "$R_BODY" \
  ".message | test(\"prometheus\"; \"i\") and contains(\"127.0.0.1:$prom_port\")" true
adapter_fetch "$G/v1beta1/namespaces/ml/pods/bert-0/DCGM_FI_DEV_GPU_UTIL"
t_eq "Prometheus down: by-name is 503 too (not a 404)" 503 "$R_STATUS"

t_ok "Prometheus down: a relist fails and the adapter keeps the previous catalog" \
  wait_adapter_log 'unable to update list of all metrics: .*keeping the previous catalog' 60
failed_before=$(grep -c 'keeping the previous catalog' "$ADAPTER_LOG")
# One more failed relist after the first, so the catalog has survived at least two.
deadline=$((SECONDS + 60))
while [ "$(grep -c 'keeping the previous catalog' "$ADAPTER_LOG")" -le "$failed_before" ] && [ "$SECONDS" -lt "$deadline" ]; do
  sleep 0.2
done
t_ok "Prometheus down: at least two failed relists" \
  test "$(grep -c 'keeping the previous catalog' "$ADAPTER_LOG")" -gt "$failed_before"
adapter_fetch "$G/v1beta1"
t_eq "Prometheus down: discovery still answers 200" 200 "$R_STATUS"
t_eq "Prometheus down: discovery still lists every metric" "$discovery_before" \
  "$(jq -c '[.resources[].name] | sort' <<<"$R_BODY")"
t_json "Prometheus down: discovery is not empty" "$R_BODY" '.resources | length' 12
adapter_fetch /readyz
t_eq "Prometheus down: /readyz stays ok (discovery has run)" "200 ok" "$R_STATUS $R_BODY"

relists_before=$(grep -c 'discovery: .* series from' "$ADAPTER_LOG")
if restart_prometheus; then
  t_eq "Prometheus restarted on the same port" "$prom_port" "${PROM_URL##*:}"
  t_ok "after the restart: by-selector answers 200 again" wait_status "$BERT" 200 60
  adapter_fetch "$BERT" # t_ok ran wait_status in a subshell
  t_eq "after the restart: the same values as before" "$want_bert" "$(item_values "$R_BODY")"
  deadline=$((SECONDS + 60))
  while [ "$(grep -c 'discovery: .* series from' "$ADAPTER_LOG")" -le "$relists_before" ] && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.2
  done
  t_ok "after the restart: a relist succeeds again" \
    test "$(grep -c 'discovery: .* series from' "$ADAPTER_LOG")" -gt "$relists_before"
else
  t_fail "restart_prometheus on port $prom_port"
fi
stop_adapter
t_eq "(a) adapter exits 0 on SIGTERM" 0 "$?"

# --- (b) a hung backend --------------------------------------------------------------------------
# The slow backend lists the series Prometheus itself lists for the rule below, then hangs on queries.
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
      Hostname:
        resource: node
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
EOF
curl -s -G "$PROM_URL/api/v1/series" --data-urlencode 'match[]=DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}' \
  -d "start=$(($(date +%s) - 300))" >"$CMA_TMP/series.json"
t_json "canned series body recorded from Prometheus" "$(cat "$CMA_TMP/series.json")" '.data | length' \
  "$(jq '[.series[] | select(.name == "DCGM_FI_DEV_GPU_UTIL" and .labels.pod != null)] | length' "$DCGM_DIR/expected.json")"

if ! start_slow_backend "$CMA_TMP/series.json" --sleep 30; then
  t_fail "start_slow_backend"
  t_summary
  exit 1
fi
in_flight() { curl -s --max-time 5 "$SLOW_URL/debug/in-flight" | jq -r ".$1"; }

if PROM_URL=$SLOW_URL start_adapter "$CMA_TMP/slow.yaml" --prometheus-timeout=3s; then
  t_ok "hung backend: discovery works (series answer at once)" wait_discovery DCGM_FI_DEV_GPU_UTIL
  adapter_fetch "$BERT"
  t_eq "hung backend: 504" 504 "$R_STATUS"
  t_eq "hung backend: Content-Type" application/json "$R_CTYPE"
  t_json "hung backend: Status Timeout" "$R_BODY" '"\(.kind) \(.code) \(.reason)"' "Status 504 Timeout"
  t_json "hung backend: the message says the backend did not answer in 3s" "$R_BODY" \
    '.message | test("prometheus"; "i") and test("3s")' true
  t_ok "hung backend: the query is still hanging in the backend (the adapter gave up on its own)" \
    test "$(in_flight in_flight)" -ge 1

  order="$CMA_TMP/order.log"
  : >"$order"
  started_before=$(in_flight started)
  slow_pids=()
  for i in 1 2 3 4; do
    (
      code=$(curl -s --max-time 60 --cacert "$ADAPTER_CA" -o "$CMA_TMP/slow$i.body" -w '%{http_code}' \
        "$ADAPTER_URL$G/v1beta1/namespaces/ml/pods/bert-$i/DCGM_FI_DEV_GPU_UTIL")
      echo "slow$i $code" >>"$order"
    ) &
    slow_pids+=($!)
  done
  # Wait (with a deadline) until all four queries hang in the backend (four different objects:
  # identical queries in flight would be coalesced into one).
  deadline=$((SECONDS + 60))
  while [ "$(in_flight started)" -lt $((started_before + 4)) ] && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.05
  done
  t_eq "hung backend: four queries reached the backend concurrently" $((started_before + 4)) "$(in_flight started)"
  # One curl, one TLS connection, three probes: healthz, readyz and the discovery document.
  curl -s --max-time 30 --cacert "$ADAPTER_CA" -o /dev/null -o /dev/null -o "$CMA_TMP/disc.json" \
    -w '%{url_effective} %{http_code}\n' \
    "$ADAPTER_URL/healthz" "$ADAPTER_URL/readyz" "$ADAPTER_URL$G/v1beta1" |
    sed "s|^$ADAPTER_URL|probe |" >>"$order"
  t_ok "hung backend: the probes ran while the four queries were still hanging in the backend" \
    test "$(in_flight in_flight)" -ge 4
  for p in "${slow_pids[@]}"; do
    wait "$p"
  done
  t_eq "hung backend: order of completion: probes first, then the four slow requests, all 504" \
    "probe /healthz 200|probe /readyz 200|probe $G/v1beta1 200|slow 504|slow 504|slow 504|slow 504" \
    "$(sed 's/^slow[0-9]/slow/' "$order" | paste -sd'|')"
  t_json "hung backend: the discovery document answered in full meanwhile" "$(cat "$CMA_TMP/disc.json")" \
    '[.resources[].name] | sort | join(" ")' \
    "namespaces/DCGM_FI_DEV_GPU_UTIL nodes/DCGM_FI_DEV_GPU_UTIL pods/DCGM_FI_DEV_GPU_UTIL"
  t_json "hung backend: each slow request got a Timeout Status" \
    "$(jq -s -c 'map(.reason)' "$CMA_TMP"/slow[1-4].body)" 'join(" ")' "Timeout Timeout Timeout Timeout"
  t_ok "hung backend: the adapter gave up before the backend answered (queries still in flight)" \
    test "$(in_flight in_flight)" -ge 4
  t_ok "hung backend: /healthz still answers" wait_status /healthz 200 10
  stop_adapter
  t_eq "(b) adapter exits 0 on SIGTERM with the backend still hanging" 0 "$?"
else
  t_fail "start_adapter against the slow backend"
fi

# (c) Every handler busy: with --max-requests-inflight=2 and two requests hanging in the backend,
# a third metric request is refused at once with kube-apiserver's 429 (Status JSON, Retry-After),
# while probes still answer; once the hanging ones time out, requests are served again.
if PROM_URL=$SLOW_URL start_adapter "$CMA_TMP/slow.yaml" --prometheus-timeout=4s --max-requests-inflight=2; then
  t_ok "busy: discovery works" wait_discovery DCGM_FI_DEV_GPU_UTIL
  started_before=$(in_flight started)
  busy_pids=()
  for i in 1 2; do
    curl -s --max-time 60 --cacert "$ADAPTER_CA" -o /dev/null \
      "$ADAPTER_URL$G/v1beta1/namespaces/ml/pods/bert-$i/DCGM_FI_DEV_GPU_UTIL" &
    busy_pids+=($!)
  done
  deadline=$((SECONDS + 30))
  while [ "$(in_flight started)" -lt $((started_before + 2)) ] && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.05
  done
  t_eq "busy: two queries hang in the backend" $((started_before + 2)) "$(in_flight started)"
  t0=$(date +%s%N)
  adapter_fetch "$BERT"
  t1=$(date +%s%N)
  t_eq "busy: a third request gets 429" 429 "$R_STATUS"
  t_eq "busy: Content-Type" application/json "$R_CTYPE"
  t_json "busy: Status TooManyRequests, code equal to the HTTP status" "$R_BODY" \
    '"\(.kind) \(.code) \(.reason) \(.details.retryAfterSeconds)"' "Status 429 TooManyRequests 1"
  t_eq "busy: Retry-After header" 1 "$(sed -n 's/^[Rr]etry-[Aa]fter: *\([0-9]*\).*/\1/p' "$CMA_TMP/fetch.headers")"
  t_ok "busy: refused at once, not after the backend timeout ($(((t1 - t0) / 1000000)) ms)" \
    test $(((t1 - t0) / 1000000)) -lt 3000
  t_eq "busy: the refused request never reached the backend" $((started_before + 2)) "$(in_flight started)"
  t_ok "busy: /healthz answers meanwhile" wait_status /healthz 200 5
  for p in "${busy_pids[@]}"; do
    wait "$p"
  done
  adapter_fetch "$BERT"
  t_eq "busy: once the hanging requests ended (504), the next one is handled again (504 from the hung backend, not 429)" \
    504 "$R_STATUS"
  stop_adapter
  t_eq "(c) adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "start_adapter with --max-requests-inflight=2"
fi

t_summary
