#!/usr/bin/env bash
# objcache_mem.sh: memory per pod of the watch cache through the fake kube-apiserver (the figures
# under "Watch cache memory at real cluster sizes" in docs/benchmarks.md). Builds
# bench/objcache_mem.c against each build dir given, starts the fake with --watch and N extra pods
# in namespace `bench` (tests/lib/gen_many_pods.py --shape small|real), and runs the real cache
# (LIST in pages of 500, then WATCH) in a fresh process per run, alternating the builds.
#
# Usage: bench/objcache_mem.sh [N...]                      (default 5000 50000)
# Environment: BUILDS="build-mem-rel"   build dirs (Release) whose libraries are measured; a dir
#                                        may hold a copy of another tree's libraries (the figure
#                                        before a change: see docs/benchmarks.md)
#              SHAPES="small real"      pod shapes (gen_many_pods.py --shape)
#              RUNS=3                   runs of each (build, shape, N); medians are printed
#              ADAPTERS="BIN..."        also run these adapter binaries (e.g. a Release build
#                                        before and after a change) against the same fake, with
#                                        Prometheus unreachable: VmRSS/RssAnon/VmHWM 2 s after
#                                        its pod cache listed (log line at --v=4)
# Every (build, shape) is also run with no extra pods (the 4 recorded ones): the per-pod figures
# are (held with N pods - held with none) / N, so the fixed costs (curl, TLS, the thread) drop out.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILDS=${BUILDS:-build-mem-rel}
SHAPES=${SHAPES:-small real}
RUNS=${RUNS:-3}
counts=("${@:-5000 50000}")
# shellcheck disable=SC2206
counts=(${counts[*]})
for b in $BUILDS; do
  cc -std=c17 -O2 -Iinclude bench/objcache_mem.c -o "$b/objcache_mem" "$b/src/clients/libcma_clients.a" \
    "$b/src/model/libcma_model.a" "$b/src/config/libcma_config.a" "$b/src/base/libcma_base.a" \
    $(pkg-config --libs libcurl jansson yajl yaml-0.1 libpcre2-8 libssl libcrypto) -lpthread -lm
done
export CMA_START_TIMEOUT=${CMA_START_TIMEOUT:-600} # 50,000 cloned pods take the fake a while
source tests/lib/common.sh
out=$(cma_tmp)

# adapter_once BIN: one adapter (Prometheus unreachable, the fake's pods) until its pod cache has
# listed, then its memory as key=value pairs.
adapter_once() {
  local bin=$1 port log pid status n deadline
  port=$(free_port)
  log=$(mktemp "$out/adapter.XXXX")
  mkdir -p "$out/certs"
  _cma_spawn "$log" "$bin" --bind-address=127.0.0.1 "--secure-port=$port" "--cert-dir=$out/certs" \
    --config=bench/adapter-config.yaml --prometheus-url=http://127.0.0.1:9 \
    "--lister-kubeconfig=$KUBE_KUBECONFIG" --v=4
  pid=$_CMA_SPAWNED
  deadline=$((SECONDS + 600))
  while ! grep -q "cache of pods: listed" "$log" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
  sleep 2
  n=$(sed -n 's/.*cache of pods: listed \([0-9]*\) objects.*/\1/p' "$log" | tail -n 1)
  status=$(awk '/^(VmRSS|RssAnon|VmHWM):/ {printf "%s=%s ", $1, $2}' "/proc/$pid/status" | tr -d :)
  cma_stop "$pid" >/dev/null 2>&1 || true
  echo "pods=${n:-0} $status"
}
echo "# $(date -u +%FT%TZ) $(uname -r) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/results.txt"
for shape in $SHAPES; do
  for count in 0 "${counts[@]}"; do
    dir=$(mktemp -d "$out/pods.XXXX")
    if [ "$count" -gt 0 ]; then
      python3 tests/lib/gen_many_pods.py "$dir" --pods "$count" --others 0 --namespace bench \
        --shape "$shape" --pods-only
    else
      echo '[]' >"$dir/pods.json"
    fi
    start_fake_kube "$dir/pods.json" --watch >/dev/null
    for run in $(seq "$RUNS"); do
      for b in $BUILDS; do
        line=$(CMA_SOURCE_DIR=$PWD timeout 900 "$b/objcache_mem" --kubeconfig "$KUBE_KUBECONFIG")
        echo "build=$b shape=$shape n=$count run=$run $line" | tee -a "$out/results.txt"
      done
      for bin in ${ADAPTERS:-}; do
        echo "adapter=$bin shape=$shape n=$count run=$run $(adapter_once "$bin")" | tee -a "$out/results.txt"
      done
    done
    cma_stop "$KUBE_PID" || true
  done
done
echo "# end $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/results.txt"
python3 - "$out/results.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
    who = kv["build"] if "build" in kv else "adapter:" + kv["adapter"]
    rows.setdefault((who, kv["shape"], int(kv["n"])), []).append(kv)
def med(runs, f):
    return statistics.median(f(r) for r in runs)
rss = lambda r: (int(r["rss"]) - int(r["rss0"])) * 1024
anon = lambda r: (int(r["anon"]) - int(r["anon0"])) * 1024
peak = lambda r: (int(r["hwm"]) - int(r["rss0"])) * 1024
heap = lambda r: int(r["heap_used"])
cache = lambda r: int(r["cache_bytes"])
print("| build | shape | pods | VmRSS held (MiB) | RssAnon held (MiB) | peak VmHWM over start (MiB) "
      "| per pod: VmRSS | RssAnon | heap in use | cache's own bytes |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
adapters = {}
for key, runs in list(rows.items()):
    if key[0].startswith("adapter:"):
        adapters[key] = rows.pop(key)
for (b, shape, n), runs in sorted(rows.items()):
    if n == 0:
        continue
    base = rows.get((b, shape, 0), runs)
    n_pods = med(runs, lambda r: int(r["pods"])) - med(base, lambda r: int(r["pods"]))
    per = lambda f: (med(runs, f) - med(base, f)) / n_pods
    print("| %s | %s | %d | %.1f | %.1f | %.1f | %.0f B | %.0f B | %.0f B | %.0f B |" % (
        b, shape, n_pods, med(runs, rss) / 2**20, med(runs, anon) / 2**20, med(runs, peak) / 2**20,
        per(rss), per(anon), per(heap), per(cache)))
if adapters:
    print()
    print("| adapter | shape | pods | VmRSS (MiB) | RssAnon (MiB) | VmHWM (MiB) | per pod: VmRSS | RssAnon |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    kb = lambda f: (lambda r: int(r[f]) * 1024)
    for (b, shape, n), runs in sorted(adapters.items()):
        base = adapters.get((b, shape, 0), runs)
        n_pods = med(runs, lambda r: int(r["pods"])) - med(base, lambda r: int(r["pods"]))
        per = lambda f: (med(runs, kb(f)) - med(base, kb(f))) / n_pods if n_pods else 0
        cells = ("%.0f B" % per("VmRSS"), "%.0f B" % per("RssAnon")) if n else ("(base)", "")
        print("| %s | %s | %d | %.1f | %.1f | %.1f | %s | %s |" % (
            b[len("adapter:"):], shape, med(runs, lambda r: int(r["pods"])),
            med(runs, kb("VmRSS")) / 2**20, med(runs, kb("RssAnon")) / 2**20,
            med(runs, kb("VmHWM")) / 2**20, *cells))
PY
