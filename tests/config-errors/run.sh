#!/usr/bin/env bash
# Runs every tests/config-errors/<case>/config.yaml through the adapter's --config check and
# compares stderr's error line, word for word, with <case>/expect.error. The error line is the
# one starting with the config path. Exit status must be non-zero.
set -u
bin=${1:?usage: run.sh ADAPTER_BINARY}
cd "$(dirname "$0")"
pass=0 fail=0
for dir in */; do
  case=${dir%/}
  [ -f "$case/config.yaml" ] || continue
  out=$("../../$bin" --config="$case/config.yaml" --check-config 2>&1 >/dev/null)
  rc=$?
  want=$(cat "$case/expect.error")
  got=$(printf '%s\n' "$out" | grep -F "$case/config.yaml:" | head -1 | sed 's/^.* E //')
  if [ $rc -ne 0 ] && [ "$got" = "$want" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $case (exit $rc)"; echo "  want: $want"; echo "  got:  $got"
  fi
done
echo "config errors: $pass ok, $fail not ok"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
