#!/usr/bin/env bash
# test.sh: the whole test suite from a fresh clone (the README's second command).
#   1. installs missing Debian packages and the pinned kubectl/helm, builds build/ (RelWithDebInfo,
#      gcc), then (as the first step) build-asan/ (Debug, clang, ASan+UBSan), all with -Werror
#   2. the build matrix: Release, RelWithDebInfo and Debug with gcc and clang, warning-free, and an
#      arm64 cross build (cmake/aarch64-linux-gnu.cmake) whose unit tests run under qemu. The unit
#      tests and fuzz replays are built (-Werror) where they run: build/ (gcc, RelWithDebInfo),
#      build-asan/ (clang, Debug), Release (gcc) and arm64 (cross gcc); Debug gcc builds the
#      adapter and its libraries only (CMA_BUILD_TESTS=OFF); clang Release and RelWithDebInfo are
#      checked by clang's front end on every file, tests included (scripts/frontend-check.py: all
#      of clang's warnings, no code generated). The run is CPU-bound on 2 cores: "cpu" after each
#      step's time is what its processes used
#   3. style gates; unit tests (cmocka, via ctest) in three builds, fuzz-corpus replays included
#   4. config-error cases (exact "file:line:column: message")
#   5. end-to-end tests against a real Prometheus, VictoriaMetrics, nginx, kubectl, helm, buildah
#      and TLS, with the release binary, then again with the ASan build, and one under valgrind
# Each unit test program and each script counts once. The last line is the only one of the form
# "N passed, M failed" (per-script summaries say "checks: N ok, N not ok"); exits non-zero on any
# failure.
#
# Steps run side by side, CMA_TEST_JOBS at a time (default 3; 1 runs them one after the other),
# one more once the heavy steps have all ended. At most one "heavy" step (a build, clang-tidy, a
# ctest run: each uses every core) runs at once; the other slots take end-to-end scripts, which
# mostly wait on servers. Scripts tagged
# "# cost: high" in their header start first, so the longest ones do not end the run alone. Every
# e2e script uses its own temp dir and free ports (tests/lib/common.sh), so they can share the
# machine. A step's output is printed whole when it ends, never interleaved with another's.
# Heavy steps start in table order: first the builds other steps wait for (asan, arm64), so the
# end-to-end scripts fill the light slots from the start. test_image.sh and test_arm64.sh get one
# CMA_IMAGE_SHARE value: each image variant is built once a run and checked by both
# (tests/lib/image.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
start=$SECONDS
scripts/setup.sh || {
  echo "setup failed (see the lines above); nothing was tested"
  echo "0 passed, 1 failed"
  exit 1
}

steps_start=$SECONDS
jobs_max=${CMA_TEST_JOBS:-3}
case $jobs_max in
  '' | *[!0-9]* | 0)
    echo "test.sh: CMA_TEST_JOBS must be a positive integer, not '$jobs_max'"
    echo "0 passed, 1 failed"
    exit 1
    ;;
esac
logs=$(mktemp -d "${TMPDIR:-/tmp}/cma-test.XXXXXX") || exit 1
trap 'rm -rf "$logs"' EXIT

# unit DIR: ctest in DIR; writes "passed failed" (test programs) to $res, failure lines to $fail.
unit() {
  local dir=$1 log total bad
  log=$(mktemp "$logs/ctest.XXXXXX")
  ctest --test-dir "$dir" --output-on-failure -j2 >"$log" 2>&1
  total=$(sed -n 's/.*tests failed out of \([0-9][0-9]*\).*/\1/p' "$log")
  bad=$(sed -n 's/.* \([0-9][0-9]*\) tests failed out of.*/\1/p' "$log")
  if [ -z "$total" ] || [ "$total" -eq 0 ]; then
    cat "$log"
    echo "0 1" >"$res"
    echo "ctest ran no test" >"$fail"
    return 1
  fi
  grep -E '^ *[0-9]+/[0-9]+ Test' "$log" | grep -v ' Passed ' || true
  sed -n '/The following tests FAILED/,$p' "$log"
  [ "$bad" -eq 0 ] || sed -n '/Output from these tests/,$p;/\*\*\*Failed/,+40p' "$log" | head -200
  echo "$((total - bad)) $bad" >"$res"
  [ "$bad" -eq 0 ] || echo "$bad of $total programs" >"$fail"
  echo "$((total - bad)) of $total programs ok"
  [ "$bad" -eq 0 ]
}
# matrix BUILD_TYPE COMPILER TESTS: a warning-free -Werror build of the adapter, with the unit
# tests and fuzz replays when TESTS is ON.
matrix() {
  local dir=build-matrix/$1-$2 log
  log=$(mktemp "$logs/build.XXXXXX")
  if cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$1" -DCMAKE_C_COMPILER="$2" -DCMA_WERROR=ON \
    -DCMA_BUILD_TESTS="$3" >"$log" 2>&1 && cmake --build "$dir" -j2 >>"$log" 2>&1; then
    return 0
  fi
  grep -E 'warning|error' "$log" | head -30
  return 1
}
# frontend BUILD_TYPE: clang's diagnostics for BUILD_TYPE on every file the build compiles (the
# adapter, the unit tests and the fuzz replays), from a configured tree's compile commands run with
# -fsyntax-only (scripts/frontend-check.py says why that is the whole of clang's warnings).
frontend() {
  local dir=build-matrix/$1-clang log
  log=$(mktemp "$logs/build.XXXXXX")
  if cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$1" -DCMAKE_C_COMPILER=clang -DCMA_WERROR=ON \
    -DCMA_BUILD_TESTS=ON >"$log" 2>&1 && python3 scripts/frontend-check.py "$dir" >>"$log" 2>&1; then
    tail -n 1 "$log"
    return 0
  fi
  grep -E 'warning|error|exit|frontend-check' "$log" | head -30
  return 1
}
# asan: build-asan/ (Debug, clang, ASan+UBSan, -Werror), as `scripts/setup.sh --asan` makes it.
asan() {
  local log
  log=$(mktemp "$logs/build.XXXXXX")
  if cmake -S . -B build-asan -DCMA_WERROR=ON -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
    -DCMA_SANITIZE=address,undefined >"$log" 2>&1 && cmake --build build-asan -j2 >>"$log" 2>&1; then
    return 0
  fi
  grep -E 'warning|error' "$log" | head -30
  return 1
}
# cross TRIPLET: the same -Werror build for another architecture with Debian's cross toolchain
# (cmake/TRIPLET.cmake) in build-matrix/TRIPLET; its unit tests run under qemu (ctest's emulator).
cross() {
  local dir=build-matrix/$1 log
  log=$(mktemp "$logs/build.XXXXXX")
  if cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_TOOLCHAIN_FILE="cmake/$1.cmake" \
    -DCMA_WERROR=ON >"$log" 2>&1 && cmake --build "$dir" -j2 >>"$log" 2>&1; then
    return 0
  fi
  grep -E 'warning|error' "$log" | head -30
  return 1
}

# The step table: name, class (heavy or light), the index of a step that must end first (or -),
# and the command.
names=() classes=() afters=() cmds=()
# add NAME CLASS AFTER CMD...: queues a step; prints nothing. $last is its index.
add() {
  names+=("$1")
  classes+=("$2")
  afters+=("$3")
  shift 3
  cmds+=("$(printf '%q ' "$@")")
  last=$((${#names[@]} - 1))
}

# e2e_order: the image tests first (the longest light steps: image builds), then the other
# high-cost scripts, then the rest, each group in name order.
e2e_order() {
  local t images=" tests/e2e/test_image.sh tests/e2e/test_arm64.sh "
  for t in $images; do [ -f "$t" ] && echo "$t"; done
  for t in tests/e2e/test_*.sh; do
    [[ $images != *" $t "* ]] && grep -q '^# cost: high' "$t" && echo "$t"
  done
  for t in tests/e2e/test_*.sh; do grep -q '^# cost: high' "$t" || echo "$t"; done
}
# first: the asan unit tests and end-to-end runs wait for it
add "build asan+ubsan (clang)" heavy - asan
asan_build=$last
# next: its unit tests under emulation and test_arm64.sh (a long script) wait for it
add "build arm64 (cross gcc)" heavy - cross aarch64-linux-gnu
arm64_build=$last
add "style (clang-format, clang-tidy, symbols)" heavy - scripts/check-style.sh build
add "structure (stage graph, function size and complexity)" light - scripts/check-structure.sh
add "unit tests (RelWithDebInfo, gcc)" heavy - unit build
add "unit tests (asan+ubsan, clang)" heavy "$asan_build" unit build-asan
add "config errors" light - tests/config-errors/run.sh build/custom-metrics-adapter
add "unit tests (arm64, qemu)" heavy "$arm64_build" unit build-matrix/aarch64-linux-gnu
for bt in Release RelWithDebInfo Debug; do
  for cc in gcc clang; do
    case $bt-$cc in
      RelWithDebInfo-gcc | Debug-clang) ;; # build/ (setup.sh) and build-asan/: every target
      Release-gcc)
        add "build $bt ($cc)" heavy - matrix "$bt" "$cc" ON
        add "unit tests (Release, gcc)" heavy "$last" unit build-matrix/Release-gcc
        ;;
      *-gcc) add "build $bt ($cc, adapter only)" heavy - matrix "$bt" "$cc" OFF ;;
      *) add "warnings $bt ($cc front end, every target)" heavy - frontend "$bt" ;;
    esac
  done
done
image_share=run$$-$RANDOM # tests/lib/image.sh: the image tests of this run share their builds
while read -r t; do
  after=- # test_arm64.sh runs the arm64 build's binary
  [ "$t" != tests/e2e/test_arm64.sh ] || after=$arm64_build
  add "e2e $(basename "$t" .sh)" light "$after" env CMA_BIN=build/custom-metrics-adapter \
    CMA_ARM64_BIN=build-matrix/aarch64-linux-gnu/custom-metrics-adapter \
    CMA_IMAGE_SHARE="$image_share" bash "$t"
  if grep -q '^# asan: yes' "$t"; then
    add "e2e $(basename "$t" .sh) (asan)" light "$asan_build" \
      env CMA_BIN=build-asan/custom-metrics-adapter bash "$t"
  fi
done < <(e2e_order)

# launch I: runs step I in the background; its output, result and failure text go to $logs/I.*.
launch() {
  local i=$1
  (
    res="$logs/$i.res" fail="$logs/$i.fail"
    t0=$SECONDS
    eval "${cmds[$i]}"
    rc=$?
    [ -s "$res" ] || { if [ $rc -eq 0 ]; then echo "1 0"; else echo "0 1"; fi; } >"$res"
    # CPU seconds (user + system) of the processes the step waited for: the run is CPU-bound on
    # 2 cores, so these, not the wall times, say where its time goes.
    # (`times` is redirected, not piped: a pipeline's subshell has no children of its own)
    times >"$logs/$i.times"
    cpu=$(awk 'NR == 2 { for (f = 1; f <= 2; f++) { split($f, a, /[ms]/); t[f] = a[1] * 60 + a[2] }
      printf "%d %d", t[1], t[2] }' "$logs/$i.times")
    echo "$rc $((SECONDS - t0)) ${cpu:-0 0} $((t0 - start))" >"$logs/$i.rc"
  ) >"$logs/$i.out" 2>&1 &
  pids[i]=$!
}

passed=0
failed=0
cpu_total=0
failures=()
# collect I: prints step I's output and adds its counts.
collect() {
  local i=$1 rc secs user sys at cpu p f
  read -r rc secs user sys at <"$logs/$i.rc"
  cpu="$((user + sys)) s (user $user, sys $sys)"
  cpu_total=$((cpu_total + user + sys))
  read -r p f <"$logs/$i.res"
  passed=$((passed + p))
  failed=$((failed + f))
  echo "=== ${names[$i]}"
  cat "$logs/$i.out"
  if [ "$rc" -eq 0 ] && [ "$f" -eq 0 ]; then
    echo "--- ok: ${names[$i]} ($secs s from +$at s, cpu $cpu)"
  else
    if [ -s "$logs/$i.fail" ]; then
      failures+=("${names[$i]}: $(cat "$logs/$i.fail")")
    else
      failures+=("${names[$i]}")
    fi
    echo "--- FAILED: ${names[$i]} (exit $rc, $secs s from +$at s, cpu $cpu)"
  fi
}

declare -A state=() # index -> running | finished (absent: waiting)
pids=()
n=${#names[@]}
ndone=0
while [ "$ndone" -lt "$n" ]; do
  running=0 heavy=0 limit=$jobs_max
  for i in "${!state[@]}"; do
    [ "${state[$i]}" = running ] || continue
    running=$((running + 1))
    [ "${classes[$i]}" = heavy ] && heavy=$((heavy + 1))
  done
  # Once every heavy step has ended, one more end-to-end script at a time: they mostly wait on
  # servers, and a CPU the builds no longer use would otherwise idle through the run's tail.
  if [ "$jobs_max" -gt 1 ]; then
    for ((i = 0; i < n; i++)); do
      [ "${classes[$i]}" = heavy ] && [ "${state[$i]:-}" != finished ] && break
    done
    [ "$i" -lt "$n" ] || limit=$((jobs_max + 1))
  fi
  for ((i = 0; i < n && running < limit; i++)); do
    [ -z "${state[$i]:-}" ] || continue
    [ "${afters[$i]}" = - ] || [ "${state[${afters[$i]}]:-}" = finished ] || continue
    if [ "${classes[$i]}" = heavy ]; then
      [ "$heavy" -eq 0 ] || continue
      heavy=1
    fi
    launch "$i"
    state[$i]=running
    running=$((running + 1))
  done
  wait -n 2>/dev/null
  for i in "${!state[@]}"; do
    if [ "${state[$i]}" = running ] && [ -e "$logs/$i.rc" ]; then
      wait "${pids[$i]}" 2>/dev/null
      collect "$i"
      state[$i]=finished
      ndone=$((ndone + 1))
    fi
  done
done

echo
[ ${#failures[@]} -eq 0 ] || printf 'failed: %s\n' "${failures[@]}"
echo "test.sh: $((SECONDS - start)) s in all ($jobs_max steps at a time; steps' cpu: $cpu_total s; setup: $((steps_start - start)) s)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
