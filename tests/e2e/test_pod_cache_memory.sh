#!/usr/bin/env bash
# test_pod_cache_memory.sh: the pod watch cache keeps what it packs, not the objects it listed. Two adapters list 3,000 pods from the fake kube-apiserver (tests/lib/gen_many_pods.py): once as the recorded pod cloned (3.6 KB of JSON each: managedFields, spec, status) and once cut down to what the adapter reads (--shape small, 0.3 KB: the same names, namespace, labels and phase, so the same packed cache). What the first one received beyond the second (about 10 MB of JSON, summed from the fake's request log) may move neither its resident anonymous memory once the cache has listed (RssAnon) nor its peak (VmHWM) by more than a small part of it: the LIST is decoded as it streams (src/clients/kube_stream.c). Before that, each 500-pod page's jansson tree raised the peak by about 25 MiB and left about 2 KB a pod resident. The two runs are compared with each other, never with a fixed figure.
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

PODS=3000
# listed_bytes LOG: bytes of the pod LIST pages (not watches) the fake served.
listed_bytes() {
  jq -s 'map(select(.path == "/api/v1/pods" and .params.watch == null and .status == 200) | .bytes) | add // 0' "$1"
}

# run SHAPE: one fake with PODS pods of SHAPE and one adapter (Prometheus unreachable) until its
# pod cache has listed; sets R_N (objects listed), R_BYTES (LIST bytes served), R_ANON and R_HWM
# (the adapter's RssAnon and VmHWM in kB then).
run() {
  local shape=$1 dir deadline
  R_N=0 R_BYTES=0 R_ANON=0 R_HWM=0
  dir=$(mktemp -d "$CMA_TMP/pods-$shape.XXXX")
  python3 tests/lib/gen_many_pods.py "$dir" --pods "$PODS" --others 0 --namespace bench \
    --shape "$shape" --pods-only || return 1
  start_fake_kube "$dir/pods.json" --watch >/dev/null || return 1
  if ! PROM_URL=http://127.0.0.1:9 V=4 CMA_ADAPTER_LOG="$dir/adapter.log" \
    start_adapter bench/adapter-config.yaml >/dev/null; then
    cma_stop "$KUBE_PID" >/dev/null 2>&1
    return 1
  fi
  deadline=$((SECONDS + 300))
  while ! grep -q "cache of pods: listed" "$ADAPTER_LOG" && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.2
  done
  sleep 1
  R_N=$(sed -n 's/.*cache of pods: listed \([0-9]*\) objects.*/\1/p' "$ADAPTER_LOG" | tail -n 1)
  R_ANON=$(awk '/^RssAnon:/ {print $2}' "/proc/$ADAPTER_PID/status")
  R_HWM=$(awk '/^VmHWM:/ {print $2}' "/proc/$ADAPTER_PID/status")
  R_BYTES=$(listed_bytes "$KUBE_REQUEST_LOG")
  stop_adapter >/dev/null 2>&1
  cma_stop "$KUBE_PID" >/dev/null 2>&1
  return 0
}

run small || t_fail "start the fake kube-apiserver and the adapter (small pods)"
small_n=$R_N small_bytes=$R_BYTES small_anon=$R_ANON small_hwm=$R_HWM
run clone || t_fail "start the fake kube-apiserver and the adapter (recorded-shape pods)"
clone_n=$R_N clone_bytes=$R_BYTES clone_anon=$R_ANON clone_hwm=$R_HWM
want=$((PODS + 4)) # and the fake's 4 recorded pods
t_eq "small pods: the cache listed them all" "$want" "$small_n"
t_eq "recorded-shape pods: the cache listed them all" "$want" "$clone_n"
extra=$((clone_bytes - small_bytes))
echo "LIST bytes: small $small_bytes, recorded shape $clone_bytes (extra $extra)"
echo "RssAnon kB: small $small_anon, recorded shape $clone_anon; VmHWM kB: small $small_hwm, recorded shape $clone_hwm"
t_ok "the recorded-shape LIST carried at least 2.5 KB a pod more JSON" test "$extra" -ge $((PODS * 2500))
# ceil: a tenth of the extra JSON, in kB (10 MB → 1 MB: well over run-to-run noise, well under
# what holding or building the pages would cost)
ceil=$((extra / 10 / 1024))
t_ok "resident anonymous memory once listed grows by under a tenth of the extra JSON" \
  test $((clone_anon - small_anon)) -lt "$ceil"
t_ok "the peak (VmHWM) grows by under a tenth of the extra JSON" \
  test $((clone_hwm - small_hwm)) -lt "$ceil"
t_summary
