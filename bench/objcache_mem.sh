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
    rows.setdefault((kv["build"], kv["shape"], int(kv["n"])), []).append(kv)
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
for (b, shape, n), runs in sorted(rows.items()):
    if n == 0:
        continue
    base = rows.get((b, shape, 0), runs)
    n_pods = med(runs, lambda r: int(r["pods"])) - med(base, lambda r: int(r["pods"]))
    per = lambda f: (med(runs, f) - med(base, f)) / n_pods
    print("| %s | %s | %d | %.1f | %.1f | %.1f | %.0f B | %.0f B | %.0f B | %.0f B |" % (
        b, shape, n_pods, med(runs, rss) / 2**20, med(runs, anon) / 2**20, med(runs, peak) / 2**20,
        per(rss), per(anon), per(heap), per(cache)))
PY
