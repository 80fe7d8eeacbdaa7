#!/usr/bin/env bash
# test_cache.sh: coalescing and the short result cache (--metrics-cache-ttl) end to end, counted on the real Prometheus' own request counter (prometheus_http_requests_total{handler="/api/v1/query"}, read from its /metrics before and after): N concurrent identical HPA-style requests (custom metrics by selector) through the adapter reach Prometheus once with the cache on, and their answers equal the uncached ones; with --metrics-cache-ttl=0 sequential requests each reach it (and concurrent ones at most once each); a cached value is never served past its TTL (a recording rule whose value is the evaluation time shows the new value, and the counter moves). Kube is the fake kube-apiserver (recorded responses); Prometheus, TLS and curl are real.
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

N=20 # concurrent identical requests

gen_dcgm || exit 1
# A series whose value changes every second: the rule's evaluation time, on pod ml/bert-0.
cat >"$CMA_TMP/rules.yaml" <<'EOF'
groups:
- name: cache-test
  interval: 1s
  rules:
  - record: cache_test_clock
    expr: vector(time())
    labels:
      namespace: ml
      pod: bert-0
EOF
cat >"$CMA_TMP/config.yaml" <<'EOF'
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
- seriesQuery: 'cache_test_clock{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  metricsQuery: max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
EOF
if ! start_prometheus "$DCGM_DIR/dcgm.om" "$CMA_TMP/rules.yaml" ||
  ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
G=/apis/custom.metrics.k8s.io/v1beta1
GPU="$G/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert"
CLOCK="$G/namespaces/ml/pods/bert-0/cache_test_clock"

# values JSON...: the answers without their timestamps (an aggregation's sample carries the time it
# was evaluated at, which differs between uncached requests), one compact line each.
values() { jq -c 'del(.items[].timestamp)' "$@"; }

# prom_queries: Prometheus' own count of /api/v1/query requests so far (all status codes).
prom_queries() {
  curl -s --max-time 10 "$PROM_URL/metrics" |
    awk '/^prometheus_http_requests_total\{/ && /handler="\/api\/v1\/query"/ { s += $NF }
         END { printf "%d\n", s }'
}

# parallel_get NAME PATH: N requests for PATH at once; bodies in $CMA_TMP/NAME.<i>, statuses in
# $CMA_TMP/NAME.status (one line each).
parallel_get() {
  local name=$1 path=$2 i pids=()
  for i in $(seq 1 "$N"); do
    curl -s --max-time 60 --cacert "$ADAPTER_CA" -o "$CMA_TMP/$name.$i" -w '%{http_code}\n' \
      "$ADAPTER_URL$path" >"$CMA_TMP/$name.status.$i" &
    pids+=($!)
  done
  wait "${pids[@]}" # only the curls: the servers are this shell's background jobs too
  cat "$CMA_TMP/$name".status.* >"$CMA_TMP/$name.status"
}

# ready: both metrics are discovered (the discovery document asks Prometheus for no query).
ready() {
  wait_discovery DCGM_FI_DEV_GPU_UTIL && wait_discovery cache_test_clock
}

# --- the cache off: every request reaches Prometheus -----------------------------------------
if start_adapter "$CMA_TMP/config.yaml" --metrics-cache-ttl=0 && ready; then
  adapter_fetch "$GPU"
  uncached="$R_BODY"
  t_json "uncached: the bert pods' GPU_UTIL" "$uncached" '[.items[].describedObject.name] | join(",")' \
    "bert-0,bert-1,bert-2"
  before=$(prom_queries)
  for i in 1 2 3 4 5; do
    adapter_fetch "$GPU"
  done
  t_eq "TTL 0: 5 sequential identical requests reach Prometheus 5 times" 5 $(($(prom_queries) - before))
  t_eq "TTL 0: the same values each time" "$(values <<<"$uncached")" "$(values <<<"$R_BODY")"
  before=$(prom_queries)
  parallel_get off "$GPU"
  moved=$(($(prom_queries) - before))
  t_eq "TTL 0: $N concurrent requests all answer 200" "$N" "$(grep -c '^200$' "$CMA_TMP/off.status")"
  t_ok "TTL 0: $N concurrent requests reach Prometheus at least once and at most $N times ($moved)" \
    test "$moved" -ge 1 -a "$moved" -le "$N"
  t_eq "TTL 0: every concurrent answer has the uncached values" "$(values <<<"$uncached")" \
    "$(values "$CMA_TMP"/off.[0-9]* | sort -u)"
  stop_adapter
  t_eq "TTL 0: the adapter exits 0 (with ASan: no leak, no error)" 0 "$?"
else
  t_fail "adapter with --metrics-cache-ttl=0"
fi

# --- the cache on: N concurrent identical requests, one backend query --------------------------
# A TTL far above how long N requests take here, so "once" does not depend on the machine's speed.
if start_adapter "$CMA_TMP/config.yaml" --metrics-cache-ttl=60s && ready; then
  before=$(prom_queries)
  parallel_get on "$GPU"
  t_eq "TTL 60s: $N concurrent identical requests reach Prometheus exactly once" 1 \
    $(($(prom_queries) - before))
  t_eq "TTL 60s: all $N answer 200" "$N" "$(grep -c '^200$' "$CMA_TMP/on.status")"
  t_eq "TTL 60s: all $N answers are the same, timestamps included (one evaluation)" 1 \
    "$(jq -c . "$CMA_TMP"/on.[0-9]* | sort -u | wc -l)"
  t_eq "TTL 60s: with the uncached values" "$(values <<<"$uncached")" "$(values "$CMA_TMP/on.1")"
  # A named request of one pod has other PromQL (pod="bert-0", not a regex of three): its own query.
  before=$(prom_queries)
  adapter_fetch "$G/namespaces/ml/pods/bert-0/DCGM_FI_DEV_GPU_UTIL"
  adapter_fetch "$G/namespaces/ml/pods/bert-0/DCGM_FI_DEV_GPU_UTIL"
  t_eq "TTL 60s: another PromQL is another query, then cached too" 1 $(($(prom_queries) - before))
  t_json "TTL 60s: bert-0 alone" "$R_BODY" '[.items[].describedObject.name] | join(",")' "bert-0"
  # Within the TTL a changing series keeps its first answer (the rule moves every second).
  before=$(prom_queries)
  adapter_fetch "$CLOCK"
  first="$R_BODY"
  sleep 2
  adapter_fetch "$CLOCK"
  t_eq "TTL 60s: within the TTL the clock series reaches Prometheus once" 1 \
    $(($(prom_queries) - before))
  t_eq "TTL 60s: and keeps its first answer" "$first" "$R_BODY"
  stop_adapter
  t_eq "TTL 60s: the adapter exits 0 (with ASan: no leak, no error)" 0 "$?"
else
  t_fail "adapter with --metrics-cache-ttl=60s"
fi

# --- a value older than the TTL is never served --------------------------------------------------
TTL_S=2
if start_adapter "$CMA_TMP/config.yaml" --metrics-cache-ttl=${TTL_S}s && ready; then
  before=$(prom_queries)
  adapter_fetch "$CLOCK"
  first="$R_BODY"
  t_eq "TTL ${TTL_S}s: the first request reaches Prometheus" 1 $(($(prom_queries) - before))
  t_json "TTL ${TTL_S}s: the clock series is served" "$first" '.items[0].describedObject.name' "bert-0"
  # Past the TTL (the rule has been evaluated again meanwhile): a new query and the new value.
  sleep $((TTL_S + 2))
  before=$(prom_queries)
  adapter_fetch "$CLOCK"
  second="$R_BODY"
  t_eq "TTL ${TTL_S}s: after the TTL the next request reaches Prometheus again" 1 \
    $(($(prom_queries) - before))
  t1=$(jq -r '.items[0].timestamp' <<<"$first")
  t2=$(jq -r '.items[0].timestamp' <<<"$second")
  t_ok "TTL ${TTL_S}s: the answer after the TTL is newer ($t1 -> $t2)" test "$t2" '>' "$t1"
  t_ok "TTL ${TTL_S}s: and carries the new value" \
    test "$(jq -r '.items[0].value' <<<"$first")" != "$(jq -r '.items[0].value' <<<"$second")"
  t_ok "the adapter logged the cache settings" wait_adapter_log "query cache: --metrics-cache-ttl=${TTL_S}000ms" 5
  stop_adapter
  t_eq "TTL ${TTL_S}s: the adapter exits 0 (with ASan: no leak, no error)" 0 "$?"
else
  t_fail "adapter with --metrics-cache-ttl=${TTL_S}s"
fi

t_summary
