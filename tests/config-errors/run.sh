#!/usr/bin/env bash
# Runs every tests/config-errors/<case>/ through the adapter's --check-config: its config.yaml,
# else its config.d/ directory (--config=<case>/config.d), else each file listed in its `configs`
# (one --config flag per line, in order). Several files: see docs/configuration.md.
# A case with expect.error is a config prometheus-adapter refuses too (or, for several files, one
# that cannot be merged): exit status non-zero and stderr's error line (the first one naming a
# file of the case) equal, word for word, to it.
# A case with expect.warning is one prometheus-adapter loads (and fails per request, or never
# lists): exit 0 with that line as the first warning, and exit 1 with it as the first error under
# --strict-config.
set -u
bin=${1:?usage: run.sh ADAPTER_BINARY}
cd "$(dirname "$0")"
pass=0 fail=0
# first_line LEVEL CASE OUTPUT: the first "LEVEL file:line:col: ..." line of OUTPUT naming CASE
first_line() {
  printf '%s\n' "$3" | grep -F " $1 $2/" | head -1 | sed "s/^.* $1 //"
}
check() { # NAME WANT GOT RC WANT_RC
  if [ "$4" -eq "$5" ] && [ "$3" = "$2" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $1 (exit $4, want $5)"; echo "  want: $2"; echo "  got:  $3"
  fi
}
for dir in */; do
  case=${dir%/}
  if [ -f "$case/config.yaml" ]; then
    args=("--config=$case/config.yaml")
  elif [ -d "$case/config.d" ]; then
    args=("--config=$case/config.d")
  elif [ -f "$case/configs" ]; then
    args=()
    while IFS= read -r f; do args+=("--config=$case/$f"); done <"$case/configs"
  else
    continue
  fi
  out=$("../../$bin" "${args[@]}" --check-config 2>&1 >/dev/null)
  rc=$?
  if [ -f "$case/expect.warning" ]; then
    want=$(cat "$case/expect.warning")
    check "$case" "$want" "$(first_line W "$case" "$out")" "$rc" 0
    out=$("../../$bin" "${args[@]}" --check-config --strict-config 2>&1 >/dev/null)
    rc=$?
    check "$case --strict-config" "$want" "$(first_line E "$case" "$out")" "$rc" 1
  else
    want=$(cat "$case/expect.error")
    check "$case" "$want" "$(first_line E "$case" "$out")" "$((rc != 0))" 1
  fi
done
echo "config errors: $pass ok, $fail not ok"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
