#!/usr/bin/env bash
# test_promql_oracle.sh: the differential test of our PromQL parser, printer and namespace enforcer
# (src/promql/, driven through the test driver promql_cli) against Debian's Prometheus 2.42
# itself, issue 23. The corpus (tests/lib/promql_corpus.py, seed 23): every query of the rule
# corpus rendered as prometheus-adapter renders it, hand-written cases over the whole grammar, a
# few thousand generated queries in random layouts and a thousand mutated ones. Per query
# (tests/lib/promql_oracle.py syntax): Prometheus' /api/v1/format_query of the original and of our
# printed text are the same; we refuse what Prometheus refuses (documented exceptions in the
# harness: Prometheus 3 syntax we accept, 2.42 bugs we do not copy); the enforced text parses,
# every selector of its canonical form carries namespace="team-a", and it equals the original with
# the matcher inserted into every selector (a scan of canonical text, with its own self-test).
# Then real data (promql_oracle.py gen-data, backfilled with promtool): several namespaces with
# shared metric names, exported_namespace, values that look like other namespaces, series without
# a namespace, keyword-named metrics; one Prometheus holds all of it, a second one only the series
# of team-a (selected in Python, not by PromQL). The adversarial queries and a sample of the
# corpus: the enforced query over everything returns exactly what the original returns over
# team-a alone, and no other namespace's series. The driver is $(dirname $CMA_BIN)/promql_cli
# (built with the tests); a missing driver is a failed check.
# cost: high (about a minute alone: two Prometheus servers and some 20,000 HTTP requests)
# asan: yes (then promql_cli is the ASan+UBSan build: anything on its stderr fails the run)
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

bin=$(cma_adapter_bin)
cli=$(dirname "$bin")/promql_cli
MISMATCHES=${PROMQL_MISMATCHES:-$CMA_TMP/promql-mismatches.txt}
: >"$MISMATCHES"

# show FILE: the first mismatches (not the "info" entries), so that a failure says what differs.
show() { awk '/^== /{info = /^== info:/} !info' "$1" | head -n "${SHOW_LINES:-60}"; }

python3 tests/lib/promql_corpus.py --seed 23 --gen 2500 --fuzz 1500 "$CMA_TMP/corpus.jsonl" >"$CMA_TMP/corpus-counts.json" || exit 1
counts=$(cat "$CMA_TMP/corpus-counts.json")
t_ok "corpus: queries of the rule corpus rendered ($(jq .rules <<<"$counts"))" test "$(jq .rules <<<"$counts")" -ge 150
t_ok "corpus: hand-written grammar cases ($(jq .grammar <<<"$counts"))" test "$(jq .grammar <<<"$counts")" -ge 500
t_eq "corpus: generated queries" 2500 "$(jq .gen <<<"$counts")"
t_eq "corpus: mutated queries" 1500 "$(jq .fuzz <<<"$counts")"
python3 tests/lib/promql_corpus.py --seed 23 --gen 2500 --fuzz 1500 "$CMA_TMP/corpus2.jsonl" >/dev/null
t_ok "corpus: the same seed gives the same corpus" cmp -s "$CMA_TMP/corpus.jsonl" "$CMA_TMP/corpus2.jsonl"

if ! t_ok "the test driver promql_cli is built next to the adapter ($cli)" test -x "$cli"; then
  t_summary
  exit 1
fi

# --- real data: everything in one Prometheus, team-a's series alone in a second ----------------
python3 tests/lib/promql_oracle.py gen-data "$CMA_TMP/data" >"$CMA_TMP/meta.out" || exit 1
start_prometheus "$CMA_TMP/data/only-team-a.om" || exit 1
ONLY_URL=$PROM_URL
start_prometheus "$CMA_TMP/data/full.om" || exit 1
FULL_URL=$PROM_URL
T=$(jq .t_eval "$CMA_TMP/data/meta.json")
# at URL QUERY: the instant query at the data's evaluation time.
at() { curl -s --max-time 30 "$1/api/v1/query" --data-urlencode "query=$2" -d "time=$T"; }
t_json "data: the first server holds every generated series" "$(at "$FULL_URL" 'count({__name__=~".+"})')" \
  '.data.result[0].value[1]' "$(jq .series_full "$CMA_TMP/data/meta.json")"
t_json "data: the second one team-a's alone" "$(at "$ONLY_URL" 'count({__name__=~".+"})')" \
  '.data.result[0].value[1]' "$(jq .series_only "$CMA_TMP/data/meta.json")"
t_json "data: the second one has no other namespace" "$(at "$ONLY_URL" 'count by (namespace) ({__name__=~".+"})')" \
  '[.data.result[].metric.namespace] | join(",")' team-a
t_json "data: at least three namespaces share metric names" \
  "$(at "$FULL_URL" 'count(count by (namespace) (http_requests_total{namespace!=""}))')" '.data.result[0].value[1] | tonumber >= 3' true
t_json "data: there are series without a namespace label, and exported_namespace labels" \
  "$(at "$FULL_URL" 'count(http_requests_total{namespace=""}) + count(queue_length{exported_namespace!=""})')" '.data.result[0].value[1]' 3

t_ok "harness: the scan of canonical text finds every selector of its own test cases" \
  python3 tests/lib/promql_oracle.py selftest "$FULL_URL"

# --- syntax: print and enforce against format_query ----------------------------------------------
out=$(python3 tests/lib/promql_oracle.py syntax "$FULL_URL" "$cli" "$CMA_TMP/corpus.jsonl" "$CMA_TMP/syntax.txt")
rc=$?
cat "$CMA_TMP/syntax.txt" >>"$MISMATCHES"
printf '%s\n' "$out"
if [ -z "$out" ]; then
  t_fail "syntax: the harness ran (exit $rc)"
else
  n() { jq -r --arg k "$1" '.[$k] // 0' <<<"$out"; }
  t_ok "syntax: every corpus query was checked ($(n queries))" test "$(n queries)" -ge 4000
  t_ok "syntax: thousands of queries parse in both ($(n 'both parse'))" test "$(n 'both parse')" -ge 2000
  t_ok "syntax: hundreds of queries are refused by both ($(n 'both refuse'))" test "$(n 'both refuse')" -ge 300
  t_eq "print: our printed text parses in Prometheus" 0 "$(n 'print: our text does not parse in Prometheus')"
  t_eq "print: the same canonical text as the original" 0 "$(n 'print: canonical texts differ')"
  t_eq "print: printing our output again gives the same text" 0 "$(n 'print: printing our output again changes it')"
  t_eq "print: every answer keeps the driver's contract" 0 "$(n "print: answer breaks the driver's contract")"
  t_eq "parse: we accept everything Prometheus 2.42 accepts" 0 "$(n 'parse: we refuse what Prometheus accepts')"
  t_eq "parse: we refuse what 2.42 refuses (Prometheus 3 syntax apart)" 0 "$(n 'parse: we accept what Prometheus refuses')"
  t_eq "parse: our errors say line:col" 0 "$(n 'parse: our error has no line:col position')"
  for tag in enforce enforce-odd-value; do
    t_ok "$tag: queries checked ($(n "$tag: queries"))" test "$(n "$tag: queries")" -ge 1000
    t_eq "$tag: we enforce every query Prometheus parses" 0 "$(n "$tag: we refuse to enforce what Prometheus parses")"
    t_eq "$tag: the enforced text parses in Prometheus" 0 "$(n "$tag: the enforced text does not parse in Prometheus")"
    t_eq "$tag: every selector of the canonical text carries the matcher" 0 "$(n "$tag: a selector without the matcher")"
    t_eq "$tag: the original with the matcher in every selector" 0 "$(n "$tag: differs from the original with the matcher in every selector")"
  done
  t_eq "harness: the scan reads every canonical text" 0 "$(($(n "harness: cannot scan Prometheus' canonical text") + $(n 'harness: the inserted matcher does not parse')))"
  t_eq "syntax: no mismatch of any kind (the harness' exit status)" 0 "$rc"
fi

# --- real data: adversarial queries and a sample of the corpus -----------------------------------
out=$(python3 tests/lib/promql_oracle.py data "$FULL_URL" "$ONLY_URL" "$cli" "$CMA_TMP/data/meta.json" "$CMA_TMP/corpus.jsonl" "$CMA_TMP/data.txt")
rc=$?
cat "$CMA_TMP/data.txt" >>"$MISMATCHES"
printf '%s\n' "$out"
if [ -z "$out" ]; then
  t_fail "data: the harness ran (exit $rc)"
else
  n() { jq -r --arg k "$1" '.[$k] // 0' <<<"$out"; }
  t_ok "data: the adversarial list and a corpus sample ran ($(n 'data: queries'))" test "$(n 'data: queries')" -ge 400
  t_ok "data: hundreds of answers are non-empty ($(n 'data: non-empty and same') same and non-empty)" \
    test "$(n 'data: non-empty and same')" -ge 150
  t_eq "data: we enforce every query Prometheus runs" 0 "$(n 'data: we refuse to enforce a query Prometheus runs')"
  t_eq "data: enforced over all = original over team-a alone" 0 "$(n 'data: enforced result differs from the original over team-a'"'"'s data alone')"
  t_ok "data: range queries too ($(n 'data: range queries'))" test "$(n 'data: range queries')" -ge 250
  t_eq "data: range queries: enforced over all = original over team-a alone" 0 \
    "$(n 'data: range query: enforced differs from the original over team-a alone')"
  t_eq "data: the enforced {__name__=~\".+\"} returns exactly team-a's generated series" 1 "$(n 'data: generated series check ok')"
  t_eq "data: no other namespace's series in an enforced result" 0 "$(n "data: another namespace's series in the enforced result")"
  t_eq "data: selector queries return exactly the original's series of team-a" 0 "$(n "data: enforced result is not the original's series of team-a")"
  t_eq "data: the adversarial queries meant to return data do" 0 "$(n 'data: no data where team-a has some (the test would be vacuous)')"
  t_eq "data: no mismatch of any kind (the harness' exit status)" 0 "$rc"
fi
# --- the harness fails where it should: a driver whose enforcer misses one metric ----------------
broken=$CMA_TMP/broken-promql_cli
printf '#!/bin/sh\nexec python3 %q broken-driver %q "$@"\n' "$CMA_ROOT/tests/lib/promql_oracle.py" "$cli" >"$broken"
chmod +x "$broken"
grep -F secret_tokens "$CMA_TMP/corpus.jsonl" | head -n 200 >"$CMA_TMP/secret.jsonl"
out=$(python3 tests/lib/promql_oracle.py syntax "$FULL_URL" "$broken" "$CMA_TMP/secret.jsonl" "$CMA_TMP/broken-syntax.txt")
k=$(jq -r '.["enforce: a selector without the matcher"] // 0' <<<"$out")
t_ok "harness self-test: with an enforcer that misses secret_tokens, the syntax check fails ($k)" test "$k" -gt 10
: >"$CMA_TMP/empty.jsonl"
out=$(python3 tests/lib/promql_oracle.py data "$FULL_URL" "$ONLY_URL" "$broken" "$CMA_TMP/data/meta.json" "$CMA_TMP/empty.jsonl" "$CMA_TMP/broken-data.txt")
k=$(jq -r '.["data: another namespace'"'"'s series in the enforced result"] // 0' <<<"$out")
t_ok "harness self-test: ... and real data shows another namespace's series ($k)" test "$k" -gt 3
k=$(jq -r '.["data: enforced result differs from the original over team-a'"'"'s data alone"] // 0' <<<"$out")
t_ok "harness self-test: ... and results that differ from team-a's alone ($k)" test "$k" -gt 10

if [ "$T_FAIL" -gt 0 ]; then
  echo "--- first mismatches ($MISMATCHES)"
  show "$MISMATCHES"
fi
t_summary
