#!/usr/bin/env bash
# test.sh: the whole test suite from a fresh clone (the README's second command).
#   1. installs missing Debian packages and the pinned kubectl/helm, builds build/ (RelWithDebInfo,
#      gcc) and build-asan/ (Debug, clang, ASan+UBSan), all with -Werror
#   2. the build matrix: Release, RelWithDebInfo and Debug with gcc and clang, warning-free
#   3. style gates; unit tests (cmocka, via ctest) in both builds, fuzz-corpus replays included
#   4. config-error cases (exact "file:line:column: message")
#   5. end-to-end tests against a real Prometheus, VictoriaMetrics, nginx, kubectl, helm, buildah
#      and TLS, with the release binary, then again with the ASan build, and one under valgrind
# Each unit test program and each script counts once. The last line is the only one of the form
# "N passed, M failed" (per-script summaries say "checks: N ok, N not ok"); exits non-zero on any
# failure.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
scripts/setup.sh --asan || {
  echo "setup failed (see the lines above); nothing was tested"
  echo "0 passed, 1 failed"
  exit 1
}

passed=0
failed=0
failures=()
# run NAME CMD...: one step that counts once.
run() {
  local name=$1 t0=$SECONDS rc
  shift
  echo "=== $name"
  "$@"
  rc=$?
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1))
    echo "--- ok: $name ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1))
    failures+=("$name")
    echo "--- FAILED: $name (exit $rc, $((SECONDS - t0)) s)"
  fi
}
# unit NAME BUILD_DIR: ctest in BUILD_DIR; every test program counts once.
unit() {
  local name=$1 dir=$2 t0=$SECONDS log total bad
  echo "=== $name"
  log=$(mktemp)
  ctest --test-dir "$dir" --output-on-failure -j2 >"$log" 2>&1
  total=$(sed -n 's/.*tests failed out of \([0-9][0-9]*\).*/\1/p' "$log")
  bad=$(sed -n 's/.* \([0-9][0-9]*\) tests failed out of.*/\1/p' "$log")
  if [ -z "$total" ] || [ "$total" -eq 0 ]; then
    cat "$log"
    failed=$((failed + 1))
    failures+=("$name: ctest ran no test")
  else
    grep -E '^ *[0-9]+/[0-9]+ Test' "$log" | grep -v ' Passed ' || true
    sed -n '/The following tests FAILED/,$p' "$log"
    [ "$bad" -eq 0 ] || sed -n '/Output from these tests/,$p;/\*\*\*Failed/,+40p' "$log" | head -200
    passed=$((passed + total - bad))
    failed=$((failed + bad))
    [ "$bad" -eq 0 ] || failures+=("$name: $bad of $total programs")
    echo "--- $name: $((total - bad)) of $total programs ok ($((SECONDS - t0)) s)"
  fi
  rm -f "$log"
}
# matrix BUILD_TYPE COMPILER: a warning-free -Werror build of everything (tests included).
matrix() {
  local dir=build-matrix/$1-$2 log
  log=$(mktemp)
  if cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$1" -DCMAKE_C_COMPILER="$2" -DCMA_WERROR=ON \
    >"$log" 2>&1 && cmake --build "$dir" -j2 >>"$log" 2>&1; then
    rm -f "$log"
  else
    grep -E 'warning|error' "$log" | head -30
    rm -f "$log"
    return 1
  fi
}

for bt in Release RelWithDebInfo Debug; do
  for cc in gcc clang; do
    # build/ (RelWithDebInfo, gcc) and build-asan/ (Debug, clang) are built by setup.sh
    if [ "$bt-$cc" != RelWithDebInfo-gcc ]; then run "build $bt ($cc)" matrix "$bt" "$cc"; fi
  done
done
run "style (clang-format, clang-tidy, symbols)" scripts/check-style.sh build
run "structure (stage graph, function size and complexity)" scripts/check-structure.sh
unit "unit tests (RelWithDebInfo, gcc)" build
unit "unit tests (Release, gcc)" build-matrix/Release-gcc
unit "unit tests (asan+ubsan, clang)" build-asan
run "config errors" tests/config-errors/run.sh build/custom-metrics-adapter
for t in tests/e2e/test_*.sh; do
  [ -f "$t" ] || continue
  run "e2e $(basename "$t" .sh)" env CMA_BIN=build/custom-metrics-adapter bash "$t"
done
for t in tests/e2e/test_*.sh; do
  [ -f "$t" ] || continue
  grep -q '^# asan: yes' "$t" || continue
  run "e2e $(basename "$t" .sh) (asan)" env CMA_BIN=build-asan/custom-metrics-adapter bash "$t"
done

echo
[ ${#failures[@]} -eq 0 ] || printf 'failed: %s\n' "${failures[@]}"
echo "test.sh: $((SECONDS - start)) s in all"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
