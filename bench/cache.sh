#!/usr/bin/env bash
# cache.sh: what coalescing and the result cache (--metrics-cache-ttl) save the backend (the
# figures under "Query cache" in docs/benchmarks.md). Starts a real Prometheus with the synthetic
# DCGM data and the fake kube-apiserver once; then for each TTL a fresh adapter, discovery listed,
# and wrk fires one identical by-selector request (what every HPA of one workload sends) over
# CONNS keep-alive TLS connections for DURATION seconds. Prometheus' own counter
# prometheus_http_requests_total{handler="/api/v1/query"} (its /metrics, before and after) gives
# the backend queries. Prints one Markdown table row per TTL and the machine's load.
#
# Usage: bench/cache.sh                  (needs a built adapter: scripts/setup.sh, or CMA_BIN=...)
# Knobs: TTLS ("0 5s"), DURATION (10), CONNS (16), REQUEST_PATH (a by-selector GPU_UTIL request),
#        CMA_BIN (build/custom-metrics-adapter).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

TTLS=${TTLS:-0 5s}
DURATION=${DURATION:-10}
CONNS=${CONNS:-16}
REQUEST_PATH=${REQUEST_PATH:-/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert}
bin=$(cma_adapter_bin)
[ -x "$bin" ] || {
  echo "cache.sh: $bin is not built (scripts/setup.sh, or set CMA_BIN)" >&2
  exit 1
}
command -v wrk >/dev/null || {
  echo "cache.sh: wrk is not installed" >&2
  exit 1
}

gen_dcgm >/dev/null || exit 1
start_prometheus "$DCGM_DIR/dcgm.om" || exit 1
start_fake_kube "$DCGM_DIR/pods.json" --watch || exit 1 # the watch cache: no LIST per request

prom_queries() {
  curl -s --max-time 10 "$PROM_URL/metrics" |
    awk '/^prometheus_http_requests_total\{/ && /handler="\/api\/v1\/query"/ { s += $NF }
         END { printf "%d\n", s }'
}

echo "| --metrics-cache-ttl | client requests/s | non-2xx | backend queries/s | client requests per backend query |"
echo "| --- | --- | --- | --- | --- |"
for ttl in $TTLS; do
  start_adapter config/gpu-dcgm.yaml "--metrics-cache-ttl=$ttl" >/dev/null 2>&1 &&
    wait_discovery DCGM_FI_DEV_GPU_UTIL >/dev/null 2>&1 || {
    echo "cache.sh: the adapter with --metrics-cache-ttl=$ttl did not start" >&2
    exit 1
  }
  before=$(prom_queries)
  out=$(wrk -t 2 -c "$CONNS" -d "${DURATION}s" "$ADAPTER_URL$REQUEST_PATH" 2>&1)
  after=$(prom_queries)
  stop_adapter >/dev/null 2>&1
  requests=$(awk '/requests in/ { print $1 }' <<<"$out")
  non2xx=$(awk '/Non-2xx/ { print $NF }' <<<"$out")
  awk -v r="$requests" -v q=$((after - before)) -v d="$DURATION" -v t="$ttl" -v n="${non2xx:-0}" \
    'BEGIN { printf "| %s | %.0f | %d | %.1f | %.0f |\n", t, r / d, n, q / d, q ? r / q : 0 }'
done
echo
echo "Load: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) on $(nproc) cores; $CONNS connections, ${DURATION}s per row."
