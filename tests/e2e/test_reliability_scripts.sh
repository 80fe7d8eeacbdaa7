#!/usr/bin/env bash
# test_reliability_scripts.sh: the long-running reliability tools, briefly, so they keep working from a clean clone: scripts/fuzz.sh builds the fuzz targets with clang (build-fuzz/), fuzzes persist_fuzz for 5 s on a copy of tests/fuzz (--data-dir: the repo is not touched), merges what it found into the copy and reports no finding; with --seconds 0 it replays a regression input harmlessly; bench/soak.sh runs 16 s of mixed traffic (all kinds of request, good and bad) against the adapter under test, writes a CSV row every 2 s and gets every answer it expected. (The hour-long soak and the long fuzz runs are not part of the test command: docs/benchmarks.md.)
# cost: high (about a minute alone: scripts/test.sh starts it early)
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

# --- scripts/fuzz.sh ----------------------------------------------------------------------------
DATA=$CMA_TMP/fuzzdata
mkdir -p "$DATA/corpus" "$DATA/regressions/persist_fuzz"
cp -r tests/fuzz/corpus/persist_fuzz "$DATA/corpus/"
repo_before=$(find tests/fuzz/corpus/persist_fuzz -type f | sort | xargs sha256sum | sha256sum)
repo_regressions_before=$(find tests/fuzz/regressions -type f 2>/dev/null | sort | xargs -r sha256sum)
seeds=$(find "$DATA/corpus/persist_fuzz" -type f | wc -l)
scripts/fuzz.sh --seconds 5 --data-dir "$DATA" persist_fuzz >"$CMA_TMP/fuzz.out" 2>&1
t_eq "fuzz.sh: exit 0 (no finding in 5 s)" 0 "$?"
t_ok "fuzz.sh: the summary line names the target, its time and no finding" \
  grep -qE '^persist_fuzz: 5s, corpus [0-9]+ -> [0-9]+ files, findings 0 ' "$CMA_TMP/fuzz.out"
t_ok "fuzz.sh: libFuzzer really ran (a status line with executions)" \
  grep -qE '^persist_fuzz: .*#[0-9]+: cov: [0-9]+' "$CMA_TMP/fuzz.out"
after=$(find "$DATA/corpus/persist_fuzz" -type f | wc -l)
t_ok "fuzz.sh: the copied corpus kept its $seeds inputs or grew ($after)" test "$after" -ge "$seeds"
t_ok "fuzz.sh: every hand-written seed is still there" \
  test "$(find "$DATA/corpus/persist_fuzz" -name 'records-*' -o -name 'file-*' | wc -l)" \
  -eq "$(find tests/fuzz/corpus/persist_fuzz -name 'records-*' -o -name 'file-*' | wc -l)"
t_eq "fuzz.sh: the repository's corpus is untouched" "$repo_before" \
  "$(find tests/fuzz/corpus/persist_fuzz -type f | sort | xargs sha256sum | sha256sum)"
t_eq "fuzz.sh: nothing was written under the repository's tests/fuzz/regressions" \
  "$repo_regressions_before" \
  "$(find tests/fuzz/regressions -type f 2>/dev/null | sort | xargs -r sha256sum)"
cp tests/fuzz/corpus/persist_fuzz/file-corrupt.cache "$DATA/regressions/persist_fuzz/crash-0000"
scripts/fuzz.sh --seconds 0 --no-build --data-dir "$DATA" persist_fuzz >"$CMA_TMP/fuzz0.out" 2>&1
t_eq "fuzz.sh --seconds 0: a harmless regression input is no finding (exit 0)" 0 "$?"
t_ok "fuzz.sh --seconds 0: it ran the corpus and the regression input once" \
  grep -qE "^persist_fuzz: 0s, .*findings 0 .*DONE" "$CMA_TMP/fuzz0.out"
scripts/fuzz.sh --seconds x >/dev/null 2>&1
t_eq "fuzz.sh: a bad --seconds is a usage error (exit 2)" 2 "$?"

# --- bench/soak.sh ------------------------------------------------------------------------------
bin=$(cma_adapter_bin)
CMA_BIN=$bin bench/soak.sh --no-build --seconds 16 --sample-seconds 2 --rate 10 --workers 2 \
  --out "$CMA_TMP/soak" >"$CMA_TMP/soak.out" 2>&1
rc=$?
t_ok "soak.sh: exit 0 or 1 (1: not flat, which 16 s cannot decide), not a setup failure" \
  test "$rc" -le 1
csv=$CMA_TMP/soak/soak.csv
t_eq "soak.sh: the CSV header" \
  "elapsed_s,rss_kb,rss_min_kb,rss_max_kb,hwm_kb,fds,fds_idle,threads,requests,unexpected" \
  "$(head -n 1 "$csv" 2>/dev/null)"
t_ok "soak.sh: a row at start, after the warm-up and every 2 s (>= 8 rows)" \
  test "$(($(wc -l <"$csv") - 1))" -ge 8
json=$(cat "$CMA_TMP/soak/soak.json" 2>/dev/null)
t_json "soak.sh: every answer had its expected status" "$json" '.unexpected' 0
t_json "soak.sh: every kind of request was sent" "$json" '.by_kind | keys | join(" ")' \
  "bad by-name discovery external garbage resource selector"
t_json "soak.sh: bad requests got 400, 404, 405 and 406" "$json" '.by_kind.bad | keys | join(" ")' \
  "400 404 405 406"
t_json "soak.sh: at least 10 req/s for the 12 s after the warm-up burst (>= 100 requests)" \
  "$json" '.requests >= 100' true
t_json "soak.sh: the adapter was alive at the end, RSS and fds recorded" "$json" \
  '.adapter_alive and .verdict.rss_kb.max > 0 and .verdict.fds_idle_end > 0' true
t_ok "soak.sh: the RSS verdict is printed" \
  grep -qE '^RSS floor slope: .*: (FLAT|GROWING|UNDECIDED)$' "$CMA_TMP/soak.out"
t_ok "soak.sh: the fd verdict is printed" \
  grep -qE '^fds under load: .*idle .*: (FLAT|GROWING)$' "$CMA_TMP/soak.out"
t_eq "soak.sh: its exit status follows the verdict" \
  "$(jq -r 'if .unexpected == 0 and .verdict.rss_verdict == "flat" and .verdict.fds_flat then 0 else 1 end' \
    "$CMA_TMP/soak/soak.json")" "$rc"

t_summary
