#!/usr/bin/env bash
# Runs every tests/config-errors/<case>/config.yaml through the adapter's --check-config.
# A case with expect.error is a config prometheus-adapter refuses too: exit status non-zero and
# stderr's error line (the first one naming the config path) equal, word for word, to it.
# A case with expect.warning is one prometheus-adapter loads (and fails per request, or never
# lists): exit 0 with that line as the first warning, and exit 1 with it as the first error under
# --strict-config.
set -u
bin=${1:?usage: run.sh ADAPTER_BINARY}
cd "$(dirname "$0")"
pass=0 fail=0
# first_line LEVEL CASE OUTPUT: the first "LEVEL file:line:col: ..." line of OUTPUT naming CASE
first_line() {
  printf '%s\n' "$3" | grep -F "$2/config.yaml:" | grep " $1 " | head -1 | sed "s/^.* $1 //"
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
  [ -f "$case/config.yaml" ] || continue
  out=$("../../$bin" --config="$case/config.yaml" --check-config 2>&1 >/dev/null)
  rc=$?
  if [ -f "$case/expect.warning" ]; then
    want=$(cat "$case/expect.warning")
    check "$case" "$want" "$(first_line W "$case" "$out")" "$rc" 0
    out=$("../../$bin" --config="$case/config.yaml" --check-config --strict-config 2>&1 >/dev/null)
    rc=$?
    check "$case --strict-config" "$want" "$(first_line E "$case" "$out")" "$rc" 1
  else
    want=$(cat "$case/expect.error")
    check "$case" "$want" "$(first_line E "$case" "$out")" "$((rc != 0))" 1
  fi
done
echo "config errors: $pass ok, $fail not ok"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
