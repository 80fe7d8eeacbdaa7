#!/usr/bin/env bash
# test_big_answers.sh: bounded memory on big backend answers. A fake Prometheus
# (tests/lib/big_backend.py: a real one cannot cheaply answer one query with 50 MB; the fake
# writes the answer the way Prometheus does) answers every instant query with a ~50 MB vector in
# which only the three pods a request asks about matter, one at the start and two at the very end.
# Checked: the custom-metrics answers are exactly those three values (by selector and by name,
# with Content-Length and chunked); the adapter's peak RSS (VmHWM, reset before each phase) grows
# by at most 16 MiB for one such answer and stays within deploy/base/deployment.yaml's memory
# limit for eight at once; an external metric whose every sample would be kept (a 50 MB answer of
# items) is refused with 413 naming --prometheus-max-bytes-in-flight, memory still bounded; with
# --prometheus-max-response-bytes under the answer's size the answer is refused with 413 at once
# (Content-Length) or as it streams (chunked), and the adapter keeps serving afterwards.
# The fake kube-apiserver (recorded fixtures) holds the three pods.
# shellcheck disable=SC2119 # stop_adapter is called without its optional argument
# asan: no (ASan's shadow memory and quarantine would be measured, not the adapter)
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

tmp=$(cma_tmp)
MIB=$((1024 * 1024))
GROWTH_BOUND=$((16 * MIB))

# deploy/'s memory limit, in bytes (Mi or Gi; read at run time: the chart may change it)
limit_text=$(sed -n 's/.*limits:.*memory: *\([0-9]*[MG]i\).*/\1/p' deploy/base/deployment.yaml | head -n 1)
case $limit_text in
  *Mi) DEPLOY_LIMIT=$((${limit_text%Mi} * MIB)) ;;
  *Gi) DEPLOY_LIMIT=$((${limit_text%Gi} * 1024 * MIB)) ;;
  *) DEPLOY_LIMIT= ;;
esac
t_ok "deploy/base/deployment.yaml sets a memory limit ($limit_text)" test -n "$DEPLOY_LIMIT"

cat >"$tmp/pods.json" <<'EOF'
[{"namespace": "ml", "name": "big-0", "labels": {"app": "big"}},
 {"namespace": "ml", "name": "big-1", "labels": {"app": "big"}},
 {"namespace": "ml", "name": "big-2", "labels": {"app": "big"}}]
EOF
cat >"$tmp/config.yaml" <<'EOF'
rules:
- seriesQuery: 'big_metric{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
externalRules:
- seriesQuery: 'big_metric{namespace!="",pod!=""}'
  name: {matches: "^big_metric$", as: "big_external"}
  resources:
    overrides:
      namespace: {resource: namespace}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (pod)
EOF

dir=$(mktemp -d "$tmp/big-backend.XXXX")
if ! _cma_start_with_port_file big-backend "$dir/big-backend.log" "$dir/port" /debug/counts \
  python3 -u "$CMA_LIB/big_backend.py" --metric big_metric --wanted ml/big-0=11 \
  --wanted ml/big-1=22 --wanted ml/big-2=33 --answer-bytes 50000000 --port 0 \
  --port-file "$dir/port" --request-log "$dir/requests.jsonl" ||
  ! start_fake_kube "$tmp/pods.json"; then
  t_fail "start the big backend and the fake kube-apiserver"
  t_summary
  exit 1
fi
BIG_URL="http://127.0.0.1:$_CMA_PORT"
backend() { curl -s --max-time 10 "$BIG_URL$1"; }
answer_size=$(sed -n 's/^big_backend: answer of \([0-9]*\) bytes.*/\1/p' "$dir/big-backend.log")
t_ok "the backend's query answer is at least 50 MB ($answer_size bytes)" test "${answer_size:-0}" -ge 50000000

PROM_URL=$BIG_URL
if ! start_adapter "$tmp/config.yaml" --prometheus-timeout=120s; then
  t_fail "start the adapter"
  t_summary
  exit 1
fi
t_ok "discovery lists pods/big_metric" wait_discovery big_metric

# status_kib FIELD: a field of /proc/PID/status of the adapter, in KiB ("VmRSS:\t  16572 kB").
status_kib() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$ADAPTER_PID/status"; }
reset_peak() { echo 5 >"/proc/$ADAPTER_PID/clear_refs"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

C=/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods
WANT=$'big-0 11\nbig-1 22\nbig-2 33'

# --- one answer ------------------------------------------------------------------------------
adapter_fetch /healthz >/dev/null
rss_base=$(($(status_kib VmRSS) * 1024))
t_ok "the adapter's VmRSS is readable ($(mib "$rss_base"))" test "$rss_base" -gt $((4 * MIB))
reset_peak
n_before=$(backend /debug/counts | jq .query)
adapter_fetch "$C/%2A/big_metric?labelSelector=app%3Dbig"
peak=$(($(status_kib VmHWM) * 1024))
t_eq "one 50 MB answer, by selector: 200" 200 "$R_STATUS"
t_eq "one 50 MB answer: the three requested pods, values from the start and the end" "$WANT" \
  "$(item_values "$R_BODY")"
t_eq "one 50 MB answer: one backend query" $((n_before + 1)) "$(backend /debug/counts | jq .query)"
growth=$((peak - rss_base))
t_ok "one 50 MB answer: peak RSS grows by $(mib $growth) (bound $(mib $GROWTH_BOUND))" \
  test "$growth" -le "$GROWTH_BOUND"
echo "one answer: base RSS $(mib "$rss_base"), peak $(mib "$peak")"

adapter_fetch "$C/big-2/big_metric"
t_json "one pod by name, its sample at the end of the answer" "$R_BODY" \
  '"\(.items[0].describedObject.name) \(.items[0].value)"' "big-2 33"

# --- eight at once ---------------------------------------------------------------------------
reset_peak
curls=()
for i in 1 2 3 4 5 6 7 8; do
  curl -s --max-time 300 --cacert "$ADAPTER_CA" -o "$tmp/concurrent.$i" -w '%{http_code}' \
    "$ADAPTER_URL$C/%2A/big_metric?labelSelector=app%3Dbig" >"$tmp/concurrent.$i.status" &
  curls+=($!)
done
wait "${curls[@]}" # not a bare `wait`: the servers are children of this shell too
peak8=$(($(status_kib VmHWM) * 1024))
ok=0
for i in 1 2 3 4 5 6 7 8; do
  if [ "$(cat "$tmp/concurrent.$i.status")" = 200 ] &&
    [ "$(item_values "$(cat "$tmp/concurrent.$i")")" = "$WANT" ]; then
    ok=$((ok + 1))
  fi
done
t_eq "eight 50 MB answers at once: all eight right" 8 "$ok"
t_ok "eight at once: peak RSS $(mib "$peak8") within deploy's limit $limit_text" \
  test "$peak8" -le "$DEPLOY_LIMIT"
t_ok "eight at once: peak RSS still grows by at most $(mib $GROWTH_BOUND) over the base ($(mib $((peak8 - rss_base))))" \
  test $((peak8 - rss_base)) -le "$GROWTH_BOUND"
echo "eight answers: peak $(mib "$peak8")"

# --- chunked: no Content-Length ----------------------------------------------------------------
backend "/debug/mode?chunked=1" >/dev/null
adapter_fetch "$C/%2A/big_metric?labelSelector=app%3Dbig"
t_eq "chunked 50 MB answer: 200 and the three values" "200 $WANT" "$R_STATUS $(item_values "$R_BODY")"

# --- an answer whose every sample is needed: refused, memory bounded ---------------------------
reset_peak
adapter_fetch /apis/external.metrics.k8s.io/v1beta1/namespaces/ml/big_external
peak_ext=$(($(status_kib VmHWM) * 1024))
t_eq "external metric over the byte budget: HTTP 413" 413 "$R_STATUS"
t_json "external metric over the byte budget: Status 413 naming the flag" "$R_BODY" \
  '"\(.code) \(.reason) \(.message | test("--prometheus-max-bytes-in-flight"))"' \
  "413 RequestEntityTooLarge true"
# the budget (32 MiB by default) is what it may hold, plus the 16 MiB allowance
t_ok "external metric refused: peak RSS grows by $(mib $((peak_ext - rss_base))) (bound $(mib $((32 * MIB + GROWTH_BOUND))))" \
  test $((peak_ext - rss_base)) -le $((32 * MIB + GROWTH_BOUND))
t_ok "external refusal logged as a 413 with its cause" \
  wait_adapter_log "big_external: 413 .*--prometheus-max-bytes-in-flight" 10
backend "/debug/mode?chunked=0" >/dev/null
adapter_fetch "$C/%2A/big_metric?labelSelector=app%3Dbig"
t_eq "after the refusal: 200 and the three values" "200 $WANT" "$R_STATUS $(item_values "$R_BODY")"

# --- over --prometheus-max-response-bytes: refused early --------------------------------------
stop_adapter
if ! start_adapter "$tmp/config.yaml" --prometheus-timeout=120s \
  --prometheus-max-response-bytes=10000000; then
  t_fail "restart the adapter with --prometheus-max-response-bytes=10000000"
  t_summary
  exit 1
fi
t_ok "discovery lists pods/big_metric again" wait_discovery big_metric
adapter_fetch "$C/%2A/big_metric?labelSelector=app%3Dbig"
t_eq "answer over --prometheus-max-response-bytes: HTTP 413" 413 "$R_STATUS"
t_json "refused from Content-Length, before reading the body" "$R_BODY" '"\(.code) \(.message)"' \
  "413 unable to fetch metrics from prometheus: the prometheus answer to /api/v1/query is $answer_size bytes, over --prometheus-max-response-bytes (10000000 bytes); narrow the query or the selector, or raise the flag"
backend "/debug/mode?chunked=1" >/dev/null
adapter_fetch "$C/%2A/big_metric?labelSelector=app%3Dbig"
t_json "chunked: refused once 10000000 bytes have streamed" "$R_BODY" '"\(.code) \(.message)"' \
  "413 unable to fetch metrics from prometheus: the prometheus answer to /api/v1/query goes over --prometheus-max-response-bytes (10000000 bytes); narrow the query or the selector, or raise the flag"
t_eq "chunked refusal: HTTP 413" 413 "$R_STATUS"
t_ok "the adapter still answers probes" wait_status /healthz 200 10
t_summary
