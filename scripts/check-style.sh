#!/usr/bin/env bash
# check-style.sh: the style gates. clang-format (the root .clang-format) and clang-tidy (the root
# .clang-tidy) must be clean on every C file, and every global symbol of the project's libraries
# must start with cma_ (nm), so nothing leaks into the global namespace by accident.
#   scripts/check-style.sh BUILD_DIR     (a configured build with compile_commands.json)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
fail=0
files=$(git ls-files 'src/*.c' 'src/*.h' 'include/*.h' 'tests/unit/*.c' 'tests/unit/*.h' 'tests/fuzz/*.c')
for f in $files; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "clang-format: $f is not formatted (run clang-format -i $f)"
    fail=1
  fi
done
if ! printf '%s\n' $(git ls-files 'src/*.c') | xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet \
    >"$build/clang-tidy.log" 2>&1; then
  grep -E "(error|warning):" "$build/clang-tidy.log" | sort -u | head -50
  echo "clang-tidy: see $build/clang-tidy.log"
  fail=1
fi
bad=$(find "$build/src" -name '*.a' -exec nm -g --defined-only {} + 2>/dev/null |
  awk 'NF == 3 && $2 ~ /[TDBR]/ && $3 !~ /^cma_/ {print $3}' | sort -u)
if [ -n "$bad" ]; then
  echo "global symbols without the cma_ prefix:"; echo "$bad"
  fail=1
fi
[ $fail -eq 0 ] && echo "style: clean"
exit $fail
