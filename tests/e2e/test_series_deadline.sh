#!/usr/bin/env bash
# test_series_deadline.sh: a series listing has one deadline, --prometheus-series-timeout
# (default 30s, shown by --help), and a hung backend never stalls discovery beyond it. A fake
# Prometheus (tests/lib/big_backend.py, small answers here) lists series at once until told to
# hang them: stands in for a Prometheus whose index lookups are stuck (an overloaded TSDB, a
# network path that drops packets after the connection was set up); a real Prometheus cannot be
# made to hang on /api/v1/series alone. With --prometheus-series-timeout=2s and a 1 s relist:
# the hung relist fails with "did not answer within 2s" (the deadline in force, not a multiple of
# --prometheus-timeout), the warning says the previous catalog is kept, discovery and metric
# values keep being served from it, each relist makes exactly one series call, and once the
# backend answers again the next relist succeeds.
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

tmp=$(cma_tmp)
bin=$(cma_adapter_bin)
help=$("$bin" --help 2>&1)
t_ok "--help documents --prometheus-series-timeout with its default (30s)" \
  grep -Eq -- '--prometheus-series-timeout duration +.*\(default 30s\)' <<<"$help"

cat >"$tmp/pods.json" <<'EOF2'
[{"namespace": "ml", "name": "big-0", "labels": {"app": "big"}}]
EOF2
cat >"$tmp/config.yaml" <<'EOF2'
rules:
- seriesQuery: 'big_metric{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
EOF2
dir=$(mktemp -d "$tmp/big-backend.XXXX")
if ! _cma_start_with_port_file big-backend "$dir/big-backend.log" "$dir/port" /debug/counts \
  python3 -u "$CMA_LIB/big_backend.py" --metric big_metric --wanted ml/big-0=11 \
  --answer-bytes 1000 --port 0 --port-file "$dir/port" --request-log "$dir/requests.jsonl" ||
  ! start_fake_kube "$tmp/pods.json"; then
  t_fail "start the fake backend and the fake kube-apiserver"
  t_summary
  exit 1
fi
BIG_URL="http://127.0.0.1:$_CMA_PORT"
backend() { curl -s --max-time 10 "$BIG_URL$1"; }
PROM_URL=$BIG_URL
if ! RELIST=1s start_adapter "$tmp/config.yaml" --prometheus-series-timeout=2s \
  --prometheus-timeout=10s; then
  t_fail "start the adapter"
  t_summary
  exit 1
fi
t_ok "discovery lists pods/big_metric" wait_discovery big_metric
P=/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/big-0/big_metric
adapter_fetch "$P"
t_json "the metric is served" "$R_BODY" '.items[0].value' "11"

mark=$(adapter_log_lines)
backend "/debug/hang-series?on=1" >/dev/null
# generous polling deadline; the message itself says which deadline ended the call
deadline=$((SECONDS + 60))
until adapter_log_after "$mark" | grep -q "unable to update list of all metrics"; do
  [ "$SECONDS" -ge "$deadline" ] && break
  sleep 0.2
done
warn=$(adapter_log_after "$mark" | grep -m1 "unable to update list of all metrics")
t_ok "the hung relist fails with the series deadline: $warn" \
  grep -q "unable to fetch metrics for query big_metric{namespace!=\"\",pod!=\"\"}: prometheus did not answer within 2s; keeping the previous catalog" <<<"$warn"
adapter_fetch /apis/custom.metrics.k8s.io/v1beta1
t_json "discovery still lists pods/big_metric from the last good catalog" "$R_BODY" \
  '[.resources[].name] | index("pods/big_metric") != null' true
adapter_fetch "$P"
t_eq "the metric is still served while series hang" "200 11" "$R_STATUS $(jq -r '.items[0].value' <<<"$R_BODY")"
# the next relists fail the same way, one series call each
failed_relists() { adapter_log_after "$mark" | grep -c "did not answer within 2s; keeping the previous catalog"; }
deadline=$((SECONDS + 60))
until [ "$(failed_relists)" -ge 3 ] || [ "$SECONDS" -ge "$deadline" ]; do
  sleep 0.2
done
warnings=$(failed_relists)
t_ok "three relists in a row end at the deadline ($warnings so far)" test "$warnings" -ge 3
hung=$(backend /debug/counts | jq .series_hanging)
t_ok "one series call per relist attempt ($hung hung calls, $warnings failed relists)" \
  test "$hung" -ge "$warnings" -a "$hung" -le $((warnings + 1))
backend "/debug/hang-series?on=0" >/dev/null
mark=$(adapter_log_lines)
deadline=$((SECONDS + 60))
until adapter_log_after "$mark" | grep -q "discovery: 1 series from 1 queries"; do
  [ "$SECONDS" -ge "$deadline" ] && break
  sleep 0.2
done
t_ok "once the backend answers again, the next relist succeeds" \
  grep -q "discovery: 1 series from 1 queries" <<<"$(adapter_log_after "$mark")"
t_summary
