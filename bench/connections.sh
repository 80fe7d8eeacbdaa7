#!/usr/bin/env bash
# connections.sh: the adapter's memory while it holds many concurrent keep-alive TLS connections
# (the figures under "Connection memory" in docs/benchmarks.md). Starts a real Prometheus with the
# synthetic DCGM data and the fake kube-apiserver once, then for each --max-request-header-bytes
# value and each run: a fresh adapter, discovery listed, VmRSS at rest, then tests/lib/slowloris.py
# opens COUNT TLS connections (100 per source address, 127.0.0.2 up: the default per-client limit),
# sends one discovery request on each, keeps all of them open, and VmRSS is read again. Prints one
# Markdown table row per setting: medians over the runs, the range in brackets, the machine's load.
#
# Usage: bench/connections.sh            (needs a built adapter: scripts/setup.sh, or CMA_BIN=...)
# Knobs: RUNS (5), COUNT (1000), HEADER_BYTES ("16384 8192 4096"), REQUEST_PATH
#        (/apis/custom.metrics.k8s.io/v1beta1), CMA_BIN (build/custom-metrics-adapter).
#        MASSIF=1: run the adapter under valgrind's massif and, while the connections are held, take
#        a heap snapshot (vgdb detailed_snapshot) and print where the heap bytes per connection go
#        (bench/massif_split.py); VmRSS figures under valgrind are not comparable, read only the split.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

RUNS=${RUNS:-5}
COUNT=${COUNT:-1000}
HEADER_BYTES=${HEADER_BYTES:-16384 8192 4096}
REQUEST_PATH=${REQUEST_PATH:-/apis/custom.metrics.k8s.io/v1beta1}
if [ "${MASSIF:-0}" = 1 ]; then
  export CMA_WRAPPER="valgrind --tool=massif --vgdb=yes --massif-out-file=/dev/null"
fi
ulimit -n $((COUNT * 2 + 1024)) 2>/dev/null || ulimit -n "$(ulimit -Hn)"
bin=$(cma_adapter_bin)
[ -x "$bin" ] || {
  echo "connections.sh: $bin is not built (scripts/setup.sh, or set CMA_BIN)" >&2
  exit 1
}
last_source=$((2 + (COUNT + 99) / 100 - 1))
[ "$last_source" -le 254 ] || {
  echo "connections.sh: COUNT $COUNT needs more than 253 source addresses" >&2
  exit 1
}

gen_dcgm >/dev/null || exit 1
start_prometheus "$DCGM_DIR/dcgm.om" || exit 1
start_fake_kube "$DCGM_DIR/pods.json" || exit 1

kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
mib() { awk -v v="$1" 'BEGIN { printf "%.1f", v / 1024 }'; }
# median_range V...: "MEDIAN (MIN–MAX)" of the values, in MiB (values in kB).
median_range() {
  printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
    printf "%.1f (%.1f–%.1f)", m / 1024, v[1] / 1024, v[NR] / 1024 }'
}
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
rows=() splits=() maps=() # maps: bench/rss_map.py rows of each setting's last run
for hb in $HEADER_BYTES; do
  rest=() held=() anon=() threads=() perconn=()
  for run in $(seq 1 "$RUNS"); do
    if ! start_adapter config/gpu-dcgm.yaml --v=0 --max-connections=$((COUNT + 200)) \
      --max-request-header-bytes="$hb" >/dev/null || ! wait_discovery DCGM_FI_DEV_GPU_UTIL custom.metrics.k8s.io/v1beta1 60; then
      echo "connections.sh: the adapter did not start (run $run, $hb bytes)" >&2
      exit 1
    fi
    sleep 2
    r0=$(kb "$ADAPTER_PID" VmRSS)
    [ "$run" = "$RUNS" ] && maps+=("$(python3 bench/rss_map.py "$ADAPTER_PID" --label "$hb, at rest" | head -n 1)")
    [ "${MASSIF:-0}" = 1 ] && vgdb --pid="$ADAPTER_PID" detailed_snapshot "$CMA_TMP/massif-rest.$hb.$run" >/dev/null 2>&1
    ready="$CMA_TMP/ready.$hb.$run"
    python3 tests/lib/slowloris.py --port "${ADAPTER_URL##*:}" --sources "127.0.0.2-127.0.0.$last_source" \
      --per-source 100 --max-seconds 300 keepalive --count "$COUNT" --path "$REQUEST_PATH" --hold 60 \
      --ready-file "$ready" >"$CMA_TMP/ka.$hb.$run.json" 2>&1 &
    client=$!
    deadline=$((SECONDS + 240))
    while [ ! -s "$ready" ] && [ "$SECONDS" -lt "$deadline" ] && kill -0 "$client" 2>/dev/null; do sleep 0.2; done
    opened=$(jq -r .ok "$ready" 2>/dev/null)
    if [ "$opened" != "$COUNT" ]; then
      echo "connections.sh: only ${opened:-0} of $COUNT connections answered 200 (run $run, $hb bytes)" >&2
      kill "$client" 2>/dev/null
      exit 1
    fi
    sleep 2 # let the last answers go out
    r1=0
    for _ in 1 2 3; do # the highest of three samples half a second apart
      v=$(kb "$ADAPTER_PID" VmRSS)
      [ "$v" -gt "$r1" ] && r1=$v
      sleep 0.5
    done
    a1=$(kb "$ADAPTER_PID" RssAnon)
    [ "$run" = "$RUNS" ] &&
      maps+=("$(python3 bench/rss_map.py "$ADAPTER_PID" --label "$hb, $COUNT connections" | head -n 1)")
    if [ "${MASSIF:-0}" = 1 ]; then
      snap="$CMA_TMP/massif.$hb.$run"
      vgdb --pid="$ADAPTER_PID" detailed_snapshot "$snap" >/dev/null 2>&1
      splits+=("--max-request-header-bytes=$hb, run $run:"$'\n'"$(python3 bench/massif_split.py "$CMA_TMP/massif-rest.$hb.$run" "$snap" "$COUNT")")
    fi
    t1=$(kb "$ADAPTER_PID" Threads)
    kill "$client" 2>/dev/null
    wait "$client" 2>/dev/null
    stop_adapter >/dev/null
    rest+=("$r0") held+=("$r1") anon+=("$a1") threads+=("$t1")
    perconn+=("$(((r1 - r0) * 1024 / COUNT))")
    echo "run $run, --max-request-header-bytes=$hb: at rest $(mib "$r0") MiB, with $COUNT connections $(mib "$r1") MiB (anonymous $(mib "$a1")), $t1 threads" >&2
  done
  rows+=("| $hb | $(median_range "${rest[@]}") | **$(median_range "${held[@]}")** | $(median_range "${anon[@]}") | $(median "${perconn[@]}") | $(median "${threads[@]}") |")
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

echo "Measured $started by \`bench/connections.sh\` (RUNS=$RUNS, COUNT=$COUNT, request \`$REQUEST_PATH\`) on $(nproc) cores, load average $load_start at start and $load_end at end; libmicrohttpd $(dpkg-query -W -f '${Version}' libmicrohttpd12 2>/dev/null), GnuTLS $(dpkg-query -W -f '${Version}' libgnutls30 2>/dev/null); binary $(realpath --relative-to=. "$bin")."
echo
echo "| \`--max-request-header-bytes\` | VmRSS at rest (MiB) | VmRSS with $COUNT keep-alive TLS connections (MiB) | of which anonymous (MiB) | bytes per connection | threads |"
echo "| --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
echo
echo "Where the resident memory is, by mapping (bench/rss_map.py, the last run of each setting; MiB):"
echo
echo "| \`--max-request-header-bytes\`, state | VmRSS | private anonymous | private file-backed | shared file-backed (libraries, binary) | Pss |"
echo "| --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${maps[@]}"
if [ "${MASSIF:-0}" = 1 ]; then
  echo
  echo "Heap per connection (massif snapshot while the $COUNT connections were held; VmRSS above is valgrind's):"
  printf '%s\n' "${splits[@]}"
fi
