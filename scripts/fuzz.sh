#!/usr/bin/env bash
# fuzz.sh: routine fuzzing. Builds every libFuzzer target of tests/fuzz/ with clang
# (-DCMA_FUZZ=ON: ASan + UBSan + coverage, in build-fuzz/), runs each for a given time starting from
# its corpus and its regression inputs, merges what it found into tests/fuzz/corpus/<target>/ and
# copies every crash, leak, timeout and out-of-memory input into tests/fuzz/regressions/<target>/,
# which the test command replays (ctest <target>_replay): a finding keeps failing the tests until
# it is fixed, which is the point.
#
#   scripts/fuzz.sh [--seconds N] [--max-corpus N] [--minimize] [--no-build] [target...]
#     --seconds N     fuzzing time per target (default 60; 0 = no fuzzing: only merge, minimize and
#                     check the regressions)
#     --max-corpus N  a corpus with more files than this after the merge is minimized (default 300)
#     --minimize      minimize every corpus: keep the hand-written seeds (any name that is not a
#                     40-hex SHA-1) and only the generated inputs that add coverage to them
#                     (without it, inputs with new coverage are added to the corpus as it is)
#     --no-build      use build-fuzz/ as it is
#     --data-dir DIR  read and write corpus/ and regressions/ under DIR instead of tests/fuzz/
#                     (a test of this script runs on a copy)
#     target          e.g. persist_fuzz (default: every tests/fuzz/*_fuzz.c)
#
# DESIGN: libFuzzer's fork mode (-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1) keeps
# fuzzing after a finding, so one run collects every finding of its time budget; -merge=1 adds to
# the repo corpus only inputs that bring new coverage, counted in edges (-use_counters=0: hit-count
# buckets would keep hundreds of near-duplicates), so the committed corpora stay small. Each
# finding is replayed once to print its report (error, first frames in src/ and tests/); findings
# with the same report are kept once, the smallest input. Exit status: 0 when no target found
# anything, 1 when some target did (its inputs are in tests/fuzz/regressions/), 2 on a usage or
# build error. Needs clang and libclang-rt (scripts/setup.sh installs them).
set -uo pipefail
CALLER_DIR=$PWD
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
SECONDS_PER_TARGET=60
MAX_CORPUS=300
MINIMIZE=0
BUILD=1
DATA=$ROOT/tests/fuzz
TARGETS=()
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) SECONDS_PER_TARGET=${2:-}; shift 2 ;;
    --seconds=*) SECONDS_PER_TARGET=${1#*=}; shift ;;
    --max-corpus) MAX_CORPUS=${2:-}; shift 2 ;;
    --max-corpus=*) MAX_CORPUS=${1#*=}; shift ;;
    --minimize) MINIMIZE=1; shift ;;
    --no-build) BUILD=0; shift ;;
    --data-dir) DATA=${2:-}; shift 2 ;;
    --data-dir=*) DATA=${1#*=}; shift ;;
    -h | --help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
case $SECONDS_PER_TARGET in '' | *[!0-9]*) echo "fuzz.sh: --seconds needs a number" >&2; exit 2 ;; esac
case $DATA in /*) ;; *) DATA=$CALLER_DIR/$DATA ;; esac
case $MAX_CORPUS in '' | *[!0-9]*) echo "fuzz.sh: --max-corpus needs a number" >&2; exit 2 ;; esac
if [ ${#TARGETS[@]} -eq 0 ]; then
  for f in tests/fuzz/*_fuzz.c; do
    TARGETS+=("$(basename "$f" .c)")
  done
fi
BUILD_DIR=$ROOT/build-fuzz
WORK=$BUILD_DIR/fuzz-work
say() { printf '%s fuzz: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [ "$BUILD" = 1 ]; then
  command -v clang >/dev/null 2>&1 || { say "clang is missing (scripts/setup.sh installs it)"; exit 2; }
  say "building the fuzz targets with clang in build-fuzz/"
  mkdir -p "$BUILD_DIR"
  if ! CC=clang cmake -S "$ROOT" -B "$BUILD_DIR" -DCMA_FUZZ=ON -DCMA_BUILD_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$BUILD_DIR/fuzz-build.log" 2>&1 ||
    ! cmake --build "$BUILD_DIR" -j2 --target "${TARGETS[@]}" >>"$BUILD_DIR/fuzz-build.log" 2>&1; then
    say "build failed; last lines of build-fuzz/fuzz-build.log:"
    tail -n 30 "$BUILD_DIR/fuzz-build.log" >&2
    exit 2
  fi
fi

# report TARGET INPUT: replays one finding; prints the sanitizer's error and summary lines and the
# first frames in this repository's code (src/, tests/), addresses stripped.
report() {
  "$BUILD_DIR/tests/fuzz/$1" -runs=1 -timeout=30 -rss_limit_mb=2048 "$2" 2>&1 |
    awk -v root="$ROOT/" '
      /ERROR: |runtime error|^SUMMARY|ALARM/ { sub(/^==[0-9]+==/, ""); print; next }
      /^ *#[0-9]+ / && (index($0, root "src/") || index($0, root "tests/")) && n < 6 {
        sub(/^ *#[0-9]+ 0x[0-9a-f]+ /, "  "); gsub(root, ""); print; n++ }'
}

total_findings=0
summary=()
for t in "${TARGETS[@]}"; do
  bin=$BUILD_DIR/tests/fuzz/$t
  if [ ! -x "$bin" ]; then
    say "$t: not built (is it listed in tests/fuzz/CMakeLists.txt?)"
    exit 2
  fi
  corpus=$DATA/corpus/$t
  regress=$DATA/regressions/$t
  dir=$WORK/$t
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts" "$corpus"
  cp "$corpus"/* "$dir/corpus/" 2>/dev/null
  [ -d "$regress" ] && cp "$regress"/* "$dir/corpus/" 2>/dev/null
  before=$(find "$corpus" -type f | wc -l)
  dict=()
  [ -f "$ROOT/tests/fuzz/$t.dict" ] && dict=("-dict=$ROOT/tests/fuzz/$t.dict")
  if [ "$SECONDS_PER_TARGET" -gt 0 ]; then
    say "$t: fuzzing for ${SECONDS_PER_TARGET}s from $before corpus inputs"
    (cd "$dir" && "$bin" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
      -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
      -artifact_prefix="$dir/artifacts/" -print_final_stats=1 "${dict[@]}" "$dir/corpus" \
      >"$dir/fuzz.log" 2>&1)
  else
    # no fuzzing: run the corpus and the regressions once (a finding leaves an artifact)
    (cd "$dir" && "$bin" -runs=0 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$dir/artifacts/" "$dir/corpus" >"$dir/fuzz.log" 2>&1)
  fi
  # The last status line of fork mode: "#N: cov: C ft: F corp: K exec/s: E oom/timeout/crash: ..."
  stats=$(grep -E '^#[0-9]+: cov:' "$dir/fuzz.log" | tail -n 1)
  [ -n "$stats" ] || stats=$(grep -E '^#[0-9]+.*(cov|DONE)' "$dir/fuzz.log" | tail -n 1)
  # merge into the repo corpus: only inputs that add coverage
  "$bin" -merge=1 -use_counters=0 -timeout=10 -rss_limit_mb=2048 "$corpus" "$dir/corpus" \
    >"$dir/merge.log" 2>&1 ||
    say "$t: merge failed (see $dir/merge.log)"
  after=$(find "$corpus" -type f | wc -l)
  if [ "$MINIMIZE" = 1 ] || [ "$after" -gt "$MAX_CORPUS" ]; then
    # the seeds, then the fewest generated inputs that add coverage to them
    rm -rf "$dir/min" && mkdir -p "$dir/min"
    find "$corpus" -type f -regextype posix-extended ! -regex '.*/[0-9a-f]{40}' \
      -exec cp {} "$dir/min/" \;
    if "$bin" -merge=1 -use_counters=0 -timeout=10 -rss_limit_mb=2048 "$dir/min" "$corpus" \
      "$dir/corpus" \
      >"$dir/minimize.log" 2>&1; then
      find "$corpus" -type f -delete
      cp "$dir/min"/* "$corpus/"
      say "$t: minimized the corpus from $after to $(find "$corpus" -type f | wc -l) files"
    else
      say "$t: minimizing failed (see $dir/minimize.log); the corpus is left merged"
    fi
    after=$(find "$corpus" -type f | wc -l)
    [ "$after" -le "$MAX_CORPUS" ] ||
      say "$t: the minimal corpus still has $after files (over $MAX_CORPUS)"
  fi
  # Findings: one input per distinct report (the same bug is usually hit many times), smallest
  # input first.
  findings=0
  dups=0
  declare -A seen=()
  while IFS= read -r a; do
    [ -n "$a" ] || continue
    text=$(report "$t" "$a")
    sig=$(printf '%s\n' "$text" | grep -v -E '^SUMMARY|leaked in' | head -n 3 | md5sum | cut -c1-12)
    if [ -n "${seen[$sig]:-}" ]; then
      dups=$((dups + 1))
      continue
    fi
    seen[$sig]=1
    mkdir -p "$regress"
    name=$(basename "$a")
    cp "$a" "$regress/$name"
    findings=$((findings + 1))
    say "$t: FINDING $regress/$name ($(stat -c %s "$a") bytes)"
    printf '%s\n' "$text" | sed 's/^/    /' >&2
  done < <(find "$dir/artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) -printf '%s %p\n' | sort -n | cut -d' ' -f2-)
  unset seen
  total_findings=$((total_findings + findings))
  summary+=("$t: ${SECONDS_PER_TARGET}s, corpus $before -> $after files, findings $findings (+$dups duplicates); ${stats:-no stats}")
done

say "done"
printf '%s\n' "${summary[@]}"
if [ "$total_findings" -gt 0 ]; then
  echo "$total_findings finding(s) saved under $DATA/regressions/: ctest's <target>_replay fails until they are fixed"
  exit 1
fi
exit 0
