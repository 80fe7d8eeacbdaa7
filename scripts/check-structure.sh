#!/usr/bin/env bash
# check-structure.sh: the guards that keep the architecture true (docs/architecture.md).
#   1. Stage order: every src/<stage>/ file includes only headers of its own or an earlier stage,
#      and every stage library links only to earlier stages (cma_add_stage LIBS and any
#      target_link_libraries in src/<stage>/CMakeLists.txt), so the graph has no cycle.
#      A header include/cma/X.h belongs to the stage with src/<stage>/X.c, or to src/X/ when that
#      directory exists, or to the stage named by a "stage: NAME" comment in the header.
#   2. Function size: no function over 80 lines or with a cyclomatic complexity over 15
#      (pmccabe's traditional McCabe number) unless scripts/structure-exceptions.txt names it with
#      a reason; an exception that is no longer needed is reported too, so the list only shrinks.
#   3. Unit tests: every module src/<stage>/<name>.c (and src/main.c) has its own
#      tests/unit/<name>_test.c, declared by a cma_unit_test() in src/*/CMakeLists.txt, or a line
#      "src/<stage>/<name>.c <test file> <reason>" in scripts/module-tests.txt naming the test that
#      exercises it and how. A listed test file that does not exist, a line for a module that is
#      gone or has its own <name>_test.c now (stale), a second line for a module and a line
#      without a reason are findings too.
# Usage: scripts/check-structure.sh          (prints each finding; exits 1 if there is any)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

# The stages in data-flow order (each may use the ones before it); main is src/main.c.
STAGES=(base model promql config clients rules query encode catalog http auth api main)
MAX_LINES=80
MAX_COMPLEXITY=15
EXCEPTIONS=scripts/structure-exceptions.txt
MODULE_TESTS=scripts/module-tests.txt
fail=0

rank() {
  local i
  for i in "${!STAGES[@]}"; do
    [ "${STAGES[$i]}" = "$1" ] && {
      echo "$i"
      return 0
    }
  done
  echo -1
}

header_stage() {
  local name=$1 f
  for f in src/*/"$name".c; do
    [ -e "$f" ] && {
      basename "$(dirname "$f")"
      return 0
    }
  done
  [ -d "src/$name" ] && {
    echo "$name"
    return 0
  }
  sed -n 's/.*stage: *\([a-z]*\).*/\1/p' "include/cma/$name.h" | head -n 1
}

# 1a. includes
declare -A hstage
for h in include/cma/*.h; do
  name=$(basename "$h" .h)
  s=$(header_stage "$name")
  if [ -z "$s" ] || [ "$(rank "$s")" -lt 0 ]; then
    echo "structure: $h: no stage (no src/<stage>/$name.c, no src/$name/, no \"stage: NAME\" comment)"
    fail=1
    continue
  fi
  hstage[$name]=$s
done
while IFS= read -r f; do
  case $f in
    src/main.c) stage=main ;;
    include/cma/*) stage=${hstage[$(basename "$f" .h)]:-} ;;
    *) stage=$(echo "$f" | cut -d/ -f2) ;;
  esac
  [ -n "$stage" ] || continue
  r=$(rank "$stage")
  while IFS=: read -r line inc; do
    s=${hstage[$inc]:-}
    [ -n "$s" ] || continue
    if [ "$(rank "$s")" -gt "$r" ]; then
      echo "structure: $f:$line: stage $stage includes cma/$inc.h of the later stage $s"
      fail=1
    fi
  done < <(grep -n '^#include "cma/[a-z_0-9]*\.h"' "$f" | sed 's/^\([0-9]*\):#include "cma\/\([a-z_0-9]*\)\.h".*/\1:\2/')
done < <(git ls-files --cached --others --exclude-standard 'src/*.c' 'src/*.h' 'include/cma/*.h')

# 1b. links
for d in src/*/; do
  stage=$(basename "$d")
  r=$(rank "$stage")
  [ "$r" -ge 0 ] || {
    echo "structure: $d is not a known stage (add it to STAGES in $0 and to docs/architecture.md)"
    fail=1
    continue
  }
  libs=$(tr '\n' ' ' <"$d/CMakeLists.txt" |
    grep -oE '(cma_add_stage\([^)]*\)|target_link_libraries\(cma_[a-z]+ [^)]*\))' |
    grep -oE 'cma_[a-z]+' | grep -v "^cma_$stage\$" | sort -u)
  for lib in $libs; do
    s=${lib#cma_}
    case $s in add | stage) continue ;; esac
    if [ "$(rank "$s")" -ge "$r" ]; then
      echo "structure: $d/CMakeLists.txt: stage $stage links $lib, which is not an earlier stage"
      fail=1
    fi
  done
done

# 2. function size and complexity
if ! command -v pmccabe >/dev/null; then
  echo "structure: pmccabe is not installed (scripts/setup.sh installs it)"
  exit 1
fi
declare -A allowed
if [ -f "$EXCEPTIONS" ]; then
  while read -r file func reason; do
    case $file in '' | '#'*) continue ;; esac
    if [ -z "$reason" ]; then
      echo "structure: $EXCEPTIONS: $file $func has no reason"
      fail=1
    fi
    allowed["$file $func"]=1
  done <"$EXCEPTIONS"
fi
declare -A seen
# shellcheck disable=SC2046 # one word per file
while read -r _ mccabe _ _ lines where; do
  file=${where%%(*}
  func=${where##*: }
  key="$file $func"
  if [ "$mccabe" -gt $MAX_COMPLEXITY ] || [ "$lines" -gt $MAX_LINES ]; then
    seen[$key]=1
    if [ -z "${allowed[$key]:-}" ]; then
      echo "structure: $where: $lines lines, complexity $mccabe (limits $MAX_LINES and $MAX_COMPLEXITY; split it, or name it in $EXCEPTIONS with a reason)"
      fail=1
    fi
  fi
done < <(pmccabe $(git ls-files --cached --others --exclude-standard 'src/*.c') 2>/dev/null)
for key in "${!allowed[@]}"; do
  if [ -z "${seen[$key]:-}" ]; then
    echo "structure: $EXCEPTIONS: $key is within the limits now; remove it from the list"
    fail=1
  fi
done

# 3. unit tests per module
declare -A mapped
if [ -f "$MODULE_TESTS" ]; then
  while read -r module test reason; do
    case $module in '' | '#'*) continue ;; esac
    own=tests/unit/$(basename "$module" .c)_test.c
    if [ -z "$reason" ]; then
      echo "structure: $MODULE_TESTS: $module $test has no reason (how that test exercises it)"
      fail=1
    fi
    if [ -n "${mapped[$module]:-}" ]; then
      echo "structure: $MODULE_TESTS: $module is listed twice"
      fail=1
    fi
    mapped[$module]=$test
    if [ ! -e "$module" ]; then
      echo "structure: $MODULE_TESTS: $module does not exist; remove its line"
      fail=1
    elif [ -e "$own" ]; then
      echo "structure: $MODULE_TESTS: $module has its own $own now; remove its line"
      fail=1
    fi
    if [ ! -e "$test" ]; then
      echo "structure: $MODULE_TESTS: $module: $test does not exist"
      fail=1
    fi
  done <"$MODULE_TESTS"
fi
declared=$(cat src/*/CMakeLists.txt | grep -oE 'cma_unit_test\( *[a-z_0-9]+' | sed 's/.*( *//')
while IFS= read -r f; do
  name=$(basename "$f" .c)
  own=tests/unit/${name}_test.c
  if [ -e "$own" ]; then
    if ! grep -qx "${name}_test" <<<"$declared"; then
      echo "structure: $own: no cma_unit_test(${name}_test ...) in src/*/CMakeLists.txt declares it, so it never runs"
      fail=1
    fi
  elif [ -z "${mapped[$f]:-}" ]; then
    echo "structure: $f: no unit test (write $own and declare it with cma_unit_test(), or name the test that exercises it in $MODULE_TESTS with a reason)"
    fail=1
  fi
done < <(git ls-files --cached --others --exclude-standard 'src/*.c')

[ $fail -eq 0 ] && echo "structure: clean"
exit $fail
