#!/usr/bin/env bash
# fleet.sh: the fleet simulation of issue 12: 10,000 HPAs' worth of requests (about 670/s: the HPA
# controller syncs each HPA every 15 s) for 60 s against the adapter, with a real Prometheus
# holding the fleet's data (bench/gen_fleet.py: 500 namespaces x 20 workloads x 2 pods, three
# metrics each, 60,000 series) and the fake kube-apiserver with --watch (the adapter's pod watch
# cache serves the label selectors, as against a real cluster). Records latency p50/p99, errors,
# Prometheus' own query counter (prometheus_http_requests_total{handler="/api/v1/query"}) before
# and after against the distinct queries per cache window, the adapter's RSS by mapping
# (bench/rss_map.py) idle and after the load, every process's CPU and the machine's load.
# Prints a Markdown section for docs/benchmarks.md; raw results stay in bench/.cache/fleet-last/.
# Figures only: nothing here passes or fails.
#
# Usage: bench/fleet.sh        (needs a built adapter: scripts/setup.sh, or CMA_BIN=...)
# Knobs: FLEET_NS (500), FLEET_APPS (20 per namespace), FLEET_PODS (2 per workload),
#        FLEET_SECONDS (60), FLEET_SYNC (15), FLEET_CONNECTIONS (32), FLEET_CACHE_TTL (5s),
#        FLEET_EXTRA_ARGS (more adapter flags).
#
# Authentication: the client presents a certificate in group system:masters (--client-ca-file),
# which needs no SubjectAccessReview: the Python fake kube-apiserver cannot answer one per request
# at this rate. A real aggregator's requests are authorized by SubjectAccessReview (cached 10 s,
# less than the 15 s sync period): see docs/benchmarks.md, "Fleet simulation".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

NS=${FLEET_NS:-500}
APPS=${FLEET_APPS:-20}
PODS=${FLEET_PODS:-2}
SECONDS_RUN=${FLEET_SECONDS:-60}
SYNC=${FLEET_SYNC:-15}
CONNS=${FLEET_CONNECTIONS:-32}
TTL=${FLEET_CACHE_TTL:-5s}
OUT=bench/.cache/fleet-last
rm -rf "$OUT"
mkdir -p "$OUT"
say() { cma_log "fleet: $*"; }
bin=$(cma_adapter_bin)
[ -x "$bin" ] || {
  echo "fleet.sh: $bin is not built (scripts/setup.sh, or set CMA_BIN)" >&2
  exit 1
}

say "generating $NS namespaces x $APPS workloads x $PODS pods"
python3 bench/gen_fleet.py "$NS" "$APPS" "$PODS" "$CMA_TMP/fleet" || exit 1
say "backfilling Prometheus"
start_prometheus "$CMA_TMP/fleet/fleet.om" || exit 1
start_fake_kube "$CMA_TMP/fleet/pods.json" --watch || exit 1

certs=$CMA_TMP/fleet-certs
mkdir -p "$certs"
make_ca "$certs" fleet-ca || exit 1
printf 'extendedKeyUsage=clientAuth\n' >"$certs/client.ext"
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -subj "/O=system:masters/CN=fleet-bench" -keyout "$certs/client.key" -out "$certs/client.csr" \
  >/dev/null 2>&1 &&
  openssl x509 -req -in "$certs/client.csr" -CA "$certs/fleet-ca.crt" -CAkey "$certs/fleet-ca.key" \
    -CAcreateserial -days 2 -extfile "$certs/client.ext" -out "$certs/client.crt" >/dev/null 2>&1 ||
  exit 1

RELIST=10m
export RELIST
# shellcheck disable=SC2086 # FLEET_EXTRA_ARGS is a list of flags on purpose
start_adapter bench/adapter-config.yaml "--client-ca-file=$certs/fleet-ca.crt" \
  "--metrics-cache-ttl=$TTL" ${FLEET_EXTRA_ARGS:-} || exit 1
wait_discovery fleet_queue_depth custom.metrics.k8s.io/v1beta1 300 >/dev/null || {
  say "discovery did not list the fleet's metrics"
  exit 1
}
# Steady state first: one request starts the pod watch cache if nothing has yet, then wait until
# it has applied its first LIST (custom_metrics_adapter_watch_cache_synced). Until then label
# selectors are resolved by live LISTs, which the Python fake kube-apiserver answers far slower
# than kube-apiserver; the fleet runs against a synced cache, as in a cluster that has been up.
adapter_metric() {
  curl -s --max-time 10 --cacert "$ADAPTER_CA" --cert "$certs/client.crt" --key "$certs/client.key" \
    "$ADAPTER_URL/metrics" | awk -v m="$1" 'index($0, m) == 1 {print $NF; exit}'
}
sync_t0=$EPOCHREALTIME
curl -s -o /dev/null --max-time 60 --cacert "$ADAPTER_CA" --cert "$certs/client.crt" --key "$certs/client.key" \
  "$ADAPTER_URL/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns-000/pods/*/fleet_queue_depth?labelSelector=app%3Dapp-00"
deadline=$((SECONDS + 180))
until [ "$(adapter_metric 'custom_metrics_adapter_watch_cache_synced{group="",version="v1",resource="pods"}')" = 1 ]; do
  [ "$SECONDS" -lt "$deadline" ] || {
    say "the pod watch cache did not sync in 180 s"
    exit 1
  }
  sleep 0.2
done
cache_sync_s=$(echo "$EPOCHREALTIME - $sync_t0" | bc)
say "pod watch cache synced in ${cache_sync_s} s: $(adapter_metric 'custom_metrics_adapter_watch_cache_objects{group="",version="v1",resource="pods"}') pods"
sleep 2
python3 bench/rss_map.py "$ADAPTER_PID" --label "idle, 60,000 series listed, 20,000 pods cached" \
  --json "$OUT/rss-idle.json" >"$OUT/rss-idle.md"

# Prometheus' own counter, from its /metrics (it scrapes nothing, itself included).
prom_queries() {
  curl -s --max-time 10 "$PROM_URL/metrics" |
    awk '/^prometheus_http_requests_total\{/ && /handler="\/api\/v1\/query"/ {s += $NF} END {print s + 0}'
}
kube_requests() { wc -l <"$KUBE_REQUEST_LOG"; }
# Seconds Prometheus spent answering /api/v1/query, its own histogram's sum.
prom_query_seconds() {
  curl -s --max-time 10 "$PROM_URL/metrics" |
    awk '/^prometheus_http_request_duration_seconds_sum\{/ && /handler="\/api\/v1\/query"/ {s += $NF} END {printf "%.3f", s}'
}
cpu_s() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$1/stat"; }
adapter_backend_queries() {
  curl -s --max-time 10 --cacert "$ADAPTER_CA" --cert "$certs/client.crt" --key "$certs/client.key" \
    "$ADAPTER_URL/metrics" |
    awk '/^custom_metrics_adapter_backend_requests_total\{.*endpoint="query"/ {s += $NF} END {print s + 0}'
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
q0=$(prom_queries)
s0=$(prom_query_seconds)
k0=$(kube_requests)
a0=$(adapter_backend_queries)
cpu_a0=$(cpu_s "$ADAPTER_PID") cpu_p0=$(cpu_s "$PROM_PID") cpu_k0=$(cpu_s "$KUBE_PID")
profiler=""
say "replaying $((NS * APPS)) HPAs for ${SECONDS_RUN}s"
if [ "${FLEET_PROFILE:-1}" = 1 ] && command -v perf >/dev/null 2>&1; then
  # where the adapter's CPU goes, sampled for 10 s in the middle of the run
  (sleep $((SECONDS_RUN / 2)) && perf record -q -F 499 -g -p "$ADAPTER_PID" -o "$OUT/perf.data" \
    -- sleep 10 >/dev/null 2>&1) &
  profiler=$!
fi
python3 bench/fleet_client.py --url "$ADAPTER_URL" --hpas "$CMA_TMP/fleet/hpas.json" \
  --cert "$certs/client.crt" --key "$certs/client.key" --sync "$SYNC" --seconds "$SECONDS_RUN" \
  --connections "$CONNS" --out "$OUT/client.json" >/dev/null || exit 1
q1=$(prom_queries)
s1=$(prom_query_seconds)
k1=$(kube_requests)
a1=$(adapter_backend_queries)
cpu_a1=$(cpu_s "$ADAPTER_PID") cpu_p1=$(cpu_s "$PROM_PID") cpu_k1=$(cpu_s "$KUBE_PID")
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 bench/rss_map.py "$ADAPTER_PID" --label "after the fleet load" --json "$OUT/rss-after.json" \
  >"$OUT/rss-after.md"
vmhwm=$(awk '/^VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$ADAPTER_PID/status")

# The adapter's own time per metric request, from its access log (arrival to answer, backend part)
own=$(grep 'path="/apis/custom.metrics' "$ADAPTER_LOG" | grep -o 'duration_ms=[0-9.]* backend_ms=[0-9.]*' |
  sed 's/duration_ms=//; s/backend_ms=//' | python3 -c '
import json, sys
rows = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
def pct(v, p):
    v = sorted(v)
    return round(v[min(len(v) - 1, int(len(v) * p))], 1) if v else None
d, b = [r[0] for r in rows], [r[1] for r in rows]
print(json.dumps({"n": len(rows), "p50": pct(d, .5), "p90": pct(d, .9), "p99": pct(d, .99),
                  "backend_p50": pct(b, .5), "backend_p99": pct(b, .99)}))')
jq -n --slurpfile c "$OUT/client.json" --argjson own "${own:-null}" --arg sync "$cache_sync_s" --arg q0 "$q0" --arg q1 "$q1" --arg a0 "$a0" --arg a1 "$a1" --arg k "$((k1 - k0))" \
  --arg ps "$(echo "$s1 - $s0" | bc)" \
  --arg cpu_a "$(echo "$cpu_a1 - $cpu_a0" | bc)" --arg cpu_p "$(echo "$cpu_p1 - $cpu_p0" | bc)" \
  --arg cpu_k "$(echo "$cpu_k1 - $cpu_k0" | bc)" --arg lb "$load_before" --arg la "$load_after" \
  --arg hwm "$vmhwm" --arg ttl "$TTL" '$c[0] + {
    prom_queries: (($q1 | tonumber) - ($q0 | tonumber)), kube_requests: ($k | tonumber),
    prom_query_seconds: ($ps | tonumber),
    adapter_backend_queries: (($a1 | tonumber) - ($a0 | tonumber)),
    cpu_adapter_s: ($cpu_a | tonumber), cpu_prometheus_s: ($cpu_p | tonumber),
    cpu_fake_kube_s: ($cpu_k | tonumber), load_before: $lb, load_after: $la,
    vmhwm_mib: ($hwm | tonumber), cache_ttl: $ttl, adapter_own_ms: $own,
    pod_cache_sync_s: ($sync | tonumber)}' >"$OUT/fleet.json"
[ -n "${profiler:-}" ] && wait "$profiler"
stop_adapter >/dev/null
cp "$ADAPTER_LOG" "$OUT/adapter.log"
profile=""
if [ -s "$OUT/perf.data" ]; then
  profile=$(perf report -i "$OUT/perf.data" --no-children -g none --sort dso,symbol --stdio 2>/dev/null |
    grep -E '^ +[0-9]' | head -n 12 | sed 's/^ */    /')
fi

r=$OUT/fleet.json
f() { jq -r "$1" "$r"; }
cat <<EOF
| figure | value |
| --- | --- |
| HPAs, sync period, duration | $(f .hpas) HPAs, every $(f .sync_s) s, $(f .seconds) s ($(f .scheduled_rate_per_s | xargs printf '%.0f') requests/s scheduled, open loop, $(f .connections) keep-alive TLS connections) |
| requests answered, rate | $(f .requests) ($(f .rate_per_s | xargs printf '%.0f')/s) |
| errors (non-200) | $(f .errors) $(f '.statuses | tostring') |
| latency p50 / p90 / p99 / max (ms, from the scheduled time) | $(f '[.p50_ms, .p90_ms, .p99_ms, .max_ms] | map(. * 10 | round / 10) | join(" / ")') |
| client send lag p50 / p99 (ms) | $(f '[.send_lag_p50_ms, .send_lag_p99_ms] | map(. * 10 | round / 10) | join(" / ")') |
| the adapter's own time per request p50 / p90 / p99 (ms, its access log: arrival to answer), of which the backend p50 / p99 | $(f '.adapter_own_ms | "\(.p50) / \(.p90) / \(.p99), backend \(.backend_p50) / \(.backend_p99)"') |
| pod watch cache: first sync before the load (s, 20,000 pods from the Python fake) | $(f '.pod_cache_sync_s * 10 | round / 10') |
| distinct queries per 5 s window (min-max) | $(f '.distinct_per_5s_window | "\(min)-\(max)"') |
| backend queries, Prometheus' own counter (/api/v1/query) | $(f .prom_queries) in $(f .seconds) s: $(f '.prom_queries / .seconds | round') /s, $(f '.prom_queries / .seconds * 5 | round') per 5 s window (--metrics-cache-ttl=$(f .cache_ttl)) |
| backend queries, the adapter's custom_metrics_adapter_backend_requests_total | $(f .adapter_backend_queries) |
| Prometheus' mean time per /api/v1/query (its own histogram, ms) | $(f '.prom_query_seconds / .prom_queries * 1e4 | round / 10') |
| requests to the (fake) kube-apiserver during the run | $(f .kube_requests) |
| CPU during the run: adapter / Prometheus / fake kube-apiserver / client (s) | $(f '[.cpu_adapter_s, .cpu_prometheus_s, .cpu_fake_kube_s, (.client_cpu_s * 100 | round / 100)] | join(" / ")') |
| adapter CPU per request (µs) | $(f '.cpu_adapter_s / .requests * 1e6 | round') |
| adapter VmHWM after the run (MiB) | $(f .vmhwm_mib) |
| load average (1/5/15 min) | $(f .load_before) before, $(f .load_after) after |

RSS by mapping (MiB; bench/rss_map.py):

| state | VmRSS | private anonymous | private file-backed | shared file-backed (libraries, binary) | Pss |
| --- | --- | --- | --- | --- | --- |
$(head -n 1 "$OUT/rss-idle.md")
$(head -n 1 "$OUT/rss-after.md")

$(sed -n 2p "$OUT/rss-idle.md" | sed 's/^/Idle, /')

Adapter CPU profile (perf, 10 s in the middle of the run, self time by library and symbol):

$profile
EOF
