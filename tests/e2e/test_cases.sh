#!/usr/bin/env bash
# test_cases.sh: the data-driven cases of tests/cases/ (format: tests/cases/README.md), each run
# against the real adapter binary: the case's rules file and flags, its recorded Prometheus
# answers served by tests/lib/replay_prometheus.py (it stands in for Prometheus and refuses any
# query the case did not record, so a changed PromQL fails the case and shows it), the fake
# kube-apiserver (recorded fixtures plus the case's pods.json), the case's request, and its
# expected status and body compared semantically (tests/cases/compare.py). One adapter per case,
# CASE_JOBS (3) cases at a time, each with its own log; the fake kube-apiservers are shared.
# Prints one ok/FAIL line per case, in case order, with the diff and the adapter's last log lines
# on failure.
# Usage: tests/e2e/test_cases.sh [CASE...]   (default: every case)
# asan: yes
# shellcheck disable=SC2119 # stop_adapter is called without its optional argument
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh
# shellcheck source=tests/cases/lib.sh
source tests/cases/lib.sh

if ! list=$(case_list "$@") || [ -z "$list" ]; then
  t_fail "find the cases ($*) under tests/cases"
  t_summary
  exit 1
fi
if ! start_replay_prometheus "$CASES_DIR"; then
  t_fail "start the replay backend"
  t_summary
  exit 1
fi
touch "$REPLAY_REQUEST_LOG"

# run_case DIR: one case; passes or fails with the case name.
run_case() {
  local dir=$1 name out misses diff log_mark
  name=$(basename "$dir")
  out="$CMA_TMP/case-$name"
  for f in rules.yaml prometheus.json expected.json; do
    if [ ! -f "$dir/$f" ]; then
      t_fail "case $name" "missing $f (tests/cases/README.md)"
      return
    fi
  done
  if ! case_use_kube "$dir"; then
    t_fail "case $name" "the fake kube-apiserver did not start"
    return
  fi
  log_mark=$(wc -l <"$REPLAY_REQUEST_LOG")
  if ! case_start_adapter "$dir" "$REPLAY_URL/$name"; then
    t_fail "case $name" "the adapter did not start or never became ready" \
      "$(adapter_log_since_start | tail -n 20)"
    [ -n "${ADAPTER_PID:-}" ] && stop_adapter >/dev/null
    return
  fi
  case_send "$dir" "$out"
  stop_adapter >/dev/null
  misses=$(tail -n "+$((log_mark + 1))" "$REPLAY_REQUEST_LOG" 2>/dev/null |
    jq -r --arg c "$name" 'select(.case == $c and .hit == false)
      | "no recorded answer for \(.kind): \(.key | if type == "array" then join(" ") else . end)"')
  diff=$(python3 "$CASES_DIR/compare.py" "$dir/expected.json" "$out.status" "$out.ctype" "$out.body")
  local rc=$?
  if [ $rc -eq 0 ] && [ -z "$misses" ]; then
    t_pass "case $name"
    return
  fi
  local details=()
  [ -n "$misses" ] && details+=("the adapter sent what the case did not record:" "$misses")
  [ $rc -ne 0 ] && details+=("$diff")
  details+=("adapter log:" "$(adapter_log_since_start | tail -n 15)")
  t_fail "case $name" "${details[@]}"
}

mapfile -t cases <<<"$list"
# The fake kube-apiservers first, in this shell, so the cases running at once share them.
for dir in "${cases[@]}"; do
  case_use_kube "$dir" || t_fail "case $(basename "$dir")" "the fake kube-apiserver did not start"
done
JOBS=${CASE_JOBS:-3}
pids=()
for dir in "${cases[@]}"; do
  name=$(basename "$dir")
  (
    T_PASS=0 T_FAIL=0
    # Own log and own --cert-dir: adapters starting at once never share a file they write.
    CMA_ADAPTER_LOG="$CMA_TMP/adapter-$name.log" CMA_CERT_DIR="$CMA_TMP/certs-$name" run_case "$dir"
  ) >"$CMA_TMP/result-$name" 2>&1 &
  pids+=($!)
  if [ ${#pids[@]} -ge "$JOBS" ]; then
    wait "${pids[0]}"
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do
  wait "$p"
done
for dir in "${cases[@]}"; do # each case's result, in case order, counted here
  name=$(basename "$dir")
  cat "$CMA_TMP/result-$name"
  if grep -qx "ok   case $name" "$CMA_TMP/result-$name"; then
    T_PASS=$((T_PASS + 1))
  else
    T_FAIL=$((T_FAIL + 1))
    T_FAILED+=("case $name")
  fi
done
t_summary
