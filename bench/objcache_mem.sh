#!/usr/bin/env bash
# objcache_mem.sh: memory per pod of the watch cache through the fake kube-apiserver (the figures
# under "Watch cache memory" in docs/benchmarks.md). Builds bench/objcache_mem.c against build/,
# starts the fake with --watch and N extra pods in namespace `bench`, and runs the real cache
# (LIST in pages of 500, then WATCH) against it.  Usage: bench/objcache_mem.sh [N...] (default 10000 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
b=build
cc -std=c17 -O2 -Iinclude bench/objcache_mem.c -o $b/objcache_mem $b/src/clients/libcma_clients.a \
  $b/src/query/libcma_query.a $b/src/rules/libcma_rules.a $b/src/clients/libcma_clients.a \
  $b/src/config/libcma_config.a $b/src/base/libcma_base.a \
  $(pkg-config --libs libcurl jansson yajl yaml-0.1 libpcre2-8) -lpthread -lm
source tests/lib/common.sh
for n in "${@:-10000 100000}"; do
  for count in $n; do
    tmp=$(cma_tmp)
    python3 - "$count" >"$tmp/pods.json" <<'PY'
import json, sys
n = int(sys.argv[1])
print(json.dumps([{"namespace": "bench", "name": "pod-%06d" % i,
                   "labels": {"app": "bench", "bench100": "yes" if i < 100 else "no"}}
                  for i in range(n)]))
PY
    start_fake_kube "$tmp/pods.json" --watch >/dev/null
    CMA_SOURCE_DIR=$PWD timeout 900 $b/objcache_mem --kubeconfig "$KUBE_KUBECONFIG"
    cma_stop 2>/dev/null || true
  done
done
