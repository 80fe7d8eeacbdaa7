#!/usr/bin/env bash
# overhead.sh: a short A/B of the by-selector overhead (issue 12: p50 over the direct PromQL at
# 10 / 100 / 1,000 pods) on a small dataset, for trying a change before the whole bench/run.sh.
# Each VARIANT is an adapter started on the same Prometheus and fake kube-apiserver as run.sh
# starts them (watch cache on, --metrics-cache-ttl=0, --v=5); the PromQL is captured once, then
# bench/benchclient.py `latency` runs alternate between the variants (A B A B ...), so the
# machine's load falls on all of them alike. Prints, per variant, the median over runs of each
# case's p50s (adapter, direct, paired difference) and of the HTTPS baselines (`latency`'s
# "baseline": /healthz and the discovery document, both answered from memory), with the load
# average.
#
# Usage: bench/overhead.sh 'LABEL=BINARY [ADAPTER FLAG ...]' ...
#   e.g. bench/overhead.sh "before=build-a/custom-metrics-adapter" \
#          "after=build-b/custom-metrics-adapter --some-flag=x"
# Knobs: OVERHEAD_NAMES=10 (metrics of 1,000 pods each: 10k series), OVERHEAD_RUNS=5,
#        OVERHEAD_ROUNDS=200, OVERHEAD_HOLD=0 (seconds to keep everything up afterwards, for
#        strace or perf; the URLs and pids are printed), OVERHEAD_WRK=0 (1: in each run, after
#        the latency rounds, also wrk -t2 -c32 -d10s on each variant's discovery document, with
#        the adapter's CPU per request; OVERHEAD_NAMES=100 gives run.sh's 200-entry document).
#        Raw files: bench/.cache/overhead-last/.
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

ROOT=$CMA_ROOT
CLIENT=(python3 "$ROOT/bench/benchclient.py")
NAMES=${OVERHEAD_NAMES:-10}
RUNS=${OVERHEAD_RUNS:-5}
ROUNDS=${OVERHEAD_ROUNDS:-200}
OUT=$ROOT/bench/.cache/overhead-last
say() { cma_log "overhead: $*"; }
[ $# -ge 1 ] || {
  sed -n '2,17p' "$0" >&2
  exit 2
}
rm -rf "$OUT"
mkdir -p "$OUT"

# The dataset: gen_om.py NAMES 1000 with a sample every 60 s, so that the 2-hour block boundaries
# leave gaps of a minute at most (run.sh's 240 s step waits for them instead: avoid_block_gap).
ds=$ROOT/bench/.cache/overhead-$NAMES
if [ ! -d "$ds/blocks" ] || [ $(($(date +%s) - $(cat "$ds/stamp" 2>/dev/null || echo 0))) -gt 1800 ]; then
  rm -rf "$ds"
  mkdir -p "$ds"
  say "generating $NAMES x 1000 series"
  python3 bench/gen_om.py "$NAMES" 1000 "$ds/ds.om" 60 || exit 1
  if ! promtool tsdb create-blocks-from openmetrics "$ds/ds.om" "$ds/blocks" >"$ds/promtool.log" 2>&1; then
    tail -n 20 "$ds/promtool.log" >&2
    exit 1
  fi
  rm -f "$ds/ds.om"
  date +%s >"$ds/stamp"
fi
dir=$(mktemp -d "$CMA_TMP/prometheus.XXXX")
cp -r "$ds/blocks" "$dir/data"
printf '%s\n' "global:" "  scrape_interval: 15s" >"$dir/prometheus.yml"
port=$(free_port)
_cma_spawn "$dir/prometheus.log" prometheus --config.file="$dir/prometheus.yml" \
  --storage.tsdb.path="$dir/data" --storage.tsdb.retention.time=30d \
  --web.listen-address="127.0.0.1:$port" --log.level=warn
PROM_PID=$_CMA_SPAWNED
PROM_URL=http://127.0.0.1:$port
_cma_wait_ready prometheus "$PROM_PID" "$dir/prometheus.log" "$PROM_URL/-/ready" || exit 1

# The fake kube-apiserver with run.sh's pods, through bench/fake_kube_nodelay.py.
PODS_JSON=$CMA_TMP/bench-pods.json
python3 bench/gen_om.py --kube-pods 1000 "$PODS_JSON.in" &&
  jq '[.[] | .labels.bench1000 = "yes"
       | if (.name | ltrimstr("pod-") | tonumber) >= 100 then del(.labels.bench100) else . end]' \
    "$PODS_JSON.in" >"$PODS_JSON" || exit 1
# shellcheck disable=SC2016 # sed script, not shell
eval "$(declare -f start_fake_kube | sed '1s/start_fake_kube/start_fake_kube_nodelay/;
  s#"\$CMA_LIB/fake_kube_apiserver.py"#"$CMA_ROOT/bench/fake_kube_nodelay.py"#')"
start_fake_kube_nodelay "$PODS_JSON" --watch || exit 1

jq -n '[{name: "10 pods", selector: "bench10=yes", expect_items: 10},
        {name: "100 pods", selector: "bench100=yes", expect_items: 100},
        {name: "1000 pods", selector: "bench1000=yes", expect_items: 1000}]
       | map(. + {path: ("/apis/custom.metrics.k8s.io/v1beta1/namespaces/bench/pods/*/bench_metric_0000?labelSelector=" + .selector)})' \
  >"$CMA_TMP/cases.json"

labels=()
urls=()
pids=()
logs=()
for spec in "$@"; do
  label=${spec%%=*}
  read -r -a cmdline <<<"${spec#*=}"
  port=$(free_port)
  log=$OUT/adapter-$label.log
  mkdir -p "$CMA_TMP/certs-$label"
  _cma_spawn "$log" "${cmdline[0]}" --bind-address=127.0.0.1 "--secure-port=$port" \
    "--cert-dir=$CMA_TMP/certs-$label" "--config=$ROOT/bench/adapter-config.yaml" \
    --metrics-relist-interval=30m --v=5 "--prometheus-url=$PROM_URL" \
    "--lister-kubeconfig=$KUBE_KUBECONFIG" --metrics-cache-ttl=0 "${cmdline[@]:1}"
  pids+=("$_CMA_SPAWNED")
  _cma_wait_ready "adapter $label" "$_CMA_SPAWNED" "$log" "https://127.0.0.1:$port/readyz" -k || exit 1
  labels+=("$label")
  urls+=("https://127.0.0.1:$port")
  logs+=("$log")
  say "$label: pid $_CMA_SPAWNED at https://127.0.0.1:$port"
done
# capture on each (the PromQL of every variant must be the same; the first one's is used)
for i in "${!labels[@]}"; do
  for _ in $(seq 1 60); do
    "${CLIENT[@]}" capture --adapter "${urls[$i]}" --prom "$PROM_URL" --kube "$KUBE_URL" \
      --cases "$CMA_TMP/cases.json" --adapter-log "${logs[$i]}" --kube-log "$KUBE_REQUEST_LOG" \
      --out "$OUT/cases-${labels[$i]}.json" 2>"$OUT/capture-${labels[$i]}.err" && break
    sleep 1 # the first relist may not be done
  done
  [ -s "$OUT/cases-${labels[$i]}.json" ] || {
    say "${labels[$i]}: capture failed: $(cat "$OUT/capture-${labels[$i]}.err")"
    exit 1
  }
  cmp -s <(jq -c 'map(.promql)' "$OUT/cases-${labels[0]}.json") <(jq -c 'map(.promql)' "$OUT/cases-${labels[$i]}.json") ||
    say "${labels[$i]}: its PromQL differs from ${labels[0]}'s"
done

say "load $(cut -d' ' -f1-3 /proc/loadavg) before the runs"
for run in $(seq 1 "$RUNS"); do
  for i in "${!labels[@]}"; do
    "${CLIENT[@]}" latency --adapter "${urls[$i]}" --prom "$PROM_URL" --kube "$KUBE_URL" \
      --cases "$OUT/cases-${labels[0]}.json" --rounds "$ROUNDS" --out "$OUT/latency-${labels[$i]}-$run.json" ||
      say "${labels[$i]} run $run had errors: $(jq -c .errors "$OUT/latency-${labels[$i]}-$run.json")"
  done
  if [ "${OVERHEAD_WRK:-0}" = 1 ]; then
    for i in "${!labels[@]}"; do
      cpu0=$("${CLIENT[@]}" cpu --pid "${pids[$i]}")
      wrk -t2 -c32 -d10s -H 'Accept: application/json' "${urls[$i]}/apis/custom.metrics.k8s.io/v1beta1" \
        >"$OUT/wrk-${labels[$i]}-$run.txt" 2>&1
      cpu1=$("${CLIENT[@]}" cpu --pid "${pids[$i]}")
      awk -v a="$cpu0" -v b="$cpu1" '/requests in/ { n = $1 } /Requests\/sec/ { r = $2 }
        END { if (n) printf "%s %s %s\n", n, b - a, r }' \
        "$OUT/wrk-${labels[$i]}-$run.txt" >"$OUT/wrk-${labels[$i]}-$run.cpu"
    done
  fi
  printf '%s run %s load %s\n' "$(date -u +%H:%M:%S)" "$run" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/load.log"
done
cat "$OUT/load.log" >&2

python3 - "$OUT" "${labels[@]}" <<'EOF'
import json, statistics, sys
out, labels = sys.argv[1], sys.argv[2:]
import glob
print("| variant | what | adapter p50 | direct p50 | paired diff p50 | runs |")
print("| --- | --- | --- | --- | --- | --- |")
for label in labels:
    runs = [json.load(open(f)) for f in sorted(glob.glob("%s/latency-%s-*.json" % (out, label)))]
    for b in ("healthz", "discovery"):
        v = [r["baseline"][b]["p50"] for r in runs]
        print("| %s | %s (baseline) | %.3f (%.3f-%.3f) | | | %d |" % (label, b, statistics.median(v), min(v), max(v), len(v)))
    for case in runs[0]["cases"]:
        a = [r["cases"][case]["adapter"]["p50"] for r in runs]
        d = [r["cases"][case]["direct"]["p50"] for r in runs]
        p = [r["cases"][case]["paired_difference"]["p50"] for r in runs]
        print("| %s | %s | %.3f | %.3f | %.3f (%.3f-%.3f) | %d |" % (label, case, statistics.median(a), statistics.median(d),
              statistics.median(p), min(p), max(p), len(p)))
wrk = {label: [open(f).read().split() for f in sorted(glob.glob("%s/wrk-%s-*.cpu" % (out, label)))] for label in labels}
if any(wrk.values()):
    print()
    print("| variant | discovery under wrk: requests/s | adapter CPU per request (µs) | runs |")
    print("| --- | --- | --- | --- |")
    for label in labels:
        runs = [(float(r), float(c) / int(n) * 1e6) for n, c, r in (x for x in wrk[label] if len(x) == 3)]
        if runs:
            rps, us = [r[0] for r in runs], [r[1] for r in runs]
            print("| %s | %.0f (%.0f-%.0f) | %.1f (%.1f-%.1f) | %d |" % (label, statistics.median(rps), min(rps), max(rps),
                  statistics.median(us), min(us), max(us), len(runs)))
EOF

if [ "${OVERHEAD_HOLD:-0}" -gt 0 ]; then
  say "holding for ${OVERHEAD_HOLD}s: PROM_URL=$PROM_URL (pid $PROM_PID) KUBE_URL=$KUBE_URL; adapters: ${labels[*]} = ${urls[*]} (pids ${pids[*]})"
  printf 'PROM_URL=%s\nPROM_PID=%s\nADAPTER_URLS=(%s)\nADAPTER_PIDS=(%s)\nCASES=%s\n' "$PROM_URL" "$PROM_PID" \
    "${urls[*]}" "${pids[*]}" "$OUT/cases-${labels[0]}.json" >"$OUT/hold.env"
  sleep "$OVERHEAD_HOLD"
fi
