#!/usr/bin/env bash
# tests/cases/record.sh: (re)records the backend answers of cases from a real Prometheus, so that
# nobody writes Prometheus JSON by hand. For each group of cases with the same `recording` line it
# generates that data, backfills it into a real Prometheus (start_prometheus), puts
# tests/lib/replay_prometheus.py --record-upstream in front of it, and for each case starts the
# adapter (the case's rules.yaml and flags) against it and sends the case's request: every
# /api/v1/series and /api/v1/query the adapter sends is answered by Prometheus and saved, keyed
# by its match[] or PromQL, into the case's prometheus.json (replaced whole). The generator's pods
# go to the case's pods.json (the fake kube-apiserver's extra pods). It then prints the answer
# the adapter gave, for the author to check against expected.json (never written here), and
# runs the case once against the recording (tests/e2e/test_cases.sh).
#
# Usage: tests/cases/record.sh CASE...      (a case name or directory; "--all" for every case)
# `recording` (one line): gen_dcgm [GEN_DCGM_FLAGS...] | gen_resource [GEN_RESOURCE_FLAGS...] |
#                         openmetrics FILE   (FILE relative to the repository root)
# shellcheck disable=SC2119 # stop_adapter is called without its optional argument
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh
# shellcheck source=tests/cases/lib.sh
source tests/cases/lib.sh

if [ $# -eq 0 ]; then
  echo "usage: tests/cases/record.sh CASE... | --all" >&2
  exit 2
fi
if [ "$1" = --all ]; then
  list=$(case_list) || exit 2
else
  list=$(case_list "$@") || exit 2
fi
mapfile -t cases <<<"$list"

# prepare_data RECORDING: generates the data of one `recording` line; sets DATA_OM (OpenMetrics
# for promtool) and DATA_PODS (EXTRA_PODS_JSON, "" when the source has no pods).
prepare_data() {
  local kind rest
  read -r kind rest <<<"$1"
  # shellcheck disable=SC2086 # the generator flags are words on purpose
  case $kind in
    gen_dcgm)
      gen_dcgm $rest || return 1
      DATA_OM="$DCGM_DIR/dcgm.om" DATA_PODS="$DCGM_DIR/pods.json"
      ;;
    gen_resource)
      gen_resource $rest || return 1
      DATA_OM="$RES_DIR/resource.om" DATA_PODS="$RES_DIR/pods.json"
      ;;
    openmetrics)
      DATA_OM="$CMA_ROOT/$rest" DATA_PODS=""
      ;;
    *)
      cma_log "unknown recording source '$kind' (want gen_dcgm, gen_resource or openmetrics)"
      return 1
      ;;
  esac
}

# record_case DIR: one case against the recording proxy.
record_case() {
  local dir=$1 name out
  name=$(basename "$dir")
  out="$CMA_TMP/record-$name"
  rm -f "$dir/prometheus.json" "$dir/pods.json"
  [ -n "$DATA_PODS" ] && cp "$DATA_PODS" "$dir/pods.json"
  case_use_kube "$dir" || return 1
  case_start_adapter "$dir" "$REPLAY_URL/$name" || return 1
  case_send "$dir" "$out"
  stop_adapter >/dev/null
  if [ ! -f "$dir/prometheus.json" ]; then
    # a request answered without any backend call still records that nothing was asked
    printf '{"recorded": {"by": "tests/cases/record.sh", "from": "%s"}, "series": [], "query": []}\n' \
      "$recording" >"$dir/prometheus.json"
  fi
  echo "== $name: HTTP $(cat "$out.status") $(cat "$out.ctype")"
  head -c 1500 "$out.body"
  echo
}

mapfile -t recordings < <(for d in "${cases[@]}"; do cat "$d/recording" 2>/dev/null || echo "?"; done | sort -u)
rc=0
for recording in "${recordings[@]}"; do
  if [ "$recording" = "?" ]; then
    cma_log "cases without a recording file are skipped: they cannot be recorded"
    rc=1
    continue
  fi
  prepare_data "$recording" || exit 1
  start_prometheus "$DATA_OM" || exit 1
  start_replay_prometheus "$CASES_DIR" --record-upstream "$PROM_URL" \
    --record-note "$recording, Prometheus $(prometheus --version 2>&1 | head -n 1 | awk '{print $3}')" ||
    exit 1
  for d in "${cases[@]}"; do
    [ "$(cat "$d/recording" 2>/dev/null)" = "$recording" ] || continue
    record_case "$d" || {
      cma_log "recording $(basename "$d") failed"
      rc=1
    }
  done
  cma_stop "$REPLAY_PID" 5
  stop_prometheus
done
[ $rc -eq 0 ] || exit $rc
names=()
for d in "${cases[@]}"; do names+=("$(basename "$d")"); done
echo "== replaying the recordings"
CMA_BIN=${CMA_BIN:-} bash tests/e2e/test_cases.sh "${names[@]}"
