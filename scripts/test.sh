#!/usr/bin/env bash
# test.sh: the whole test suite from a fresh clone (the README's second command).
#   1. installs missing Debian packages and builds (release and ASan+UBSan builds)
#   2. unit tests (cmocka, via ctest) in both builds, fuzz-corpus replays included
#   3. config-error cases (exact "file:line:column: message")
#   4. end-to-end tests against a real Prometheus, VictoriaMetrics, kubectl and TLS,
#      with the release binary, then again with the ASan build, and one under valgrind
# Prints a final "N passed, N failed" line and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --asan || { echo "setup failed"; exit 1; }

passed=0
failed=0
failures=()
run() { # name, command...
  local name=$1; shift
  echo "=== $name"
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$name"); fi
}

run "style (clang-format, clang-tidy, symbols)" scripts/check-style.sh build
run "unit tests (release)" ctest --test-dir build --output-on-failure -j2
run "unit tests (asan+ubsan)" ctest --test-dir build-asan --output-on-failure -j2
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
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
