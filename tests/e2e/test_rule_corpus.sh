#!/usr/bin/env bash
# test_rule_corpus.sh: every real prometheus-adapter rule file of tests/fixtures/rule-corpus/ (at least 20, from public repositories: Helm values rendered by the chart's logic, kube-prometheus, OpenShift, MetalK8s, prometheus-adapter's docs and manifests, blog and tutorial repositories) does what its .expect says under --check-config: loads, loads with exactly the listed file:line:column warnings (prometheus-adapter loads those too and fails their requests or relists), or is rejected with the listed error and the reason prometheus-adapter gives; --strict-config turns the warnings into exit 1. Then the files that load with warnings run against a real Prometheus and the fake kube-apiserver (standing in for kube-apiserver: recorded discovery documents): the broken rule's metric is still listed, a request for it gets a 500 Status naming the rule's position and what is wrong, and the other rules of the same file serve values; a rule with an empty seriesQuery does not stop discovery. docs/migration.md's worked example (rule file, flags) stays true.
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

CORPUS=tests/fixtures/rule-corpus
bin=$(cma_adapter_bin)

# expect_field FILE KEY: the values of "KEY: value" lines of FILE, one per line, in order.
expect_field() { sed -n "s/^$2: //p" "$1"; }

# levelled LEVEL TEXT: the "LEVEL file:line:col: ..." lines of a log, without timestamp and level.
levelled() { printf '%s\n' "$2" | sed -n "s/^[^ ]* $1 //p"; }

# --- the corpus itself --------------------------------------------------------------------------
n_files=0
for yaml in "$CORPUS"/*.yaml; do
  name=$(basename "$yaml" .yaml)
  n_files=$((n_files + 1))
  exp="$CORPUS/$name.expect"
  if [ ! -f "$exp" ]; then
    t_fail "$name: has $name.expect"
    continue
  fi
  t_ok "$name: the header names the source repository, path and commit" \
    grep -qE '^#   \(repository [^ ]+/[^ ]+, path .+, commit [0-9a-f]{40}\)$|^# Source: kubernetes-sigs/prometheus-adapter .* at [0-9a-f]{8}' "$yaml"
  result=$(expect_field "$exp" result)
  out=$(cd "$CORPUS" && "$bin" --config="$name.yaml" --check-config 2>"$CMA_TMP/err")
  rc=$?
  err=$(cat "$CMA_TMP/err")
  case $result in
    loads | warns)
      t_eq "$name: --check-config exits 0" 0 "$rc"
      t_eq "$name: the summary line" "$(expect_field "$exp" summary)" "$out"
      t_eq "$name: the warnings, in order" "$(expect_field "$exp" line)" "$(levelled W "$err")"
      (cd "$CORPUS" && "$bin" --config="$name.yaml" --check-config --strict-config >/dev/null 2>"$CMA_TMP/err")
      rc=$?
      if [ "$result" = loads ]; then
        t_eq "$name: loads without a warning, so --strict-config exits 0" 0 "$rc"
      else
        t_eq "$name: --strict-config exits 1" 1 "$rc"
        t_eq "$name: --strict-config logs the first warning as the first error" \
          "$(expect_field "$exp" line | head -n 1)" "$(levelled E "$(cat "$CMA_TMP/err")" | head -n 1)"
      fi
      ;;
    rejected)
      t_eq "$name: rejected: exit 1" 1 "$rc"
      t_eq "$name: nothing on stdout" "" "$out"
      t_eq "$name: the error, file:line:column" "$(expect_field "$exp" line)" "$(levelled E "$err" | head -n 1)"
      reason=$(expect_field "$exp" reason)
      t_ok "$name: the same reason as prometheus-adapter's ('$reason')" \
        bash -c '[ -n "$1" ] && grep -qF -- "$1" <<<"$2" && grep -qF -- "$1" <<<"$3"' _ \
        "$reason" "$(expect_field "$exp" line)" "$(expect_field "$exp" upstream)"
      ;;
    *) t_fail "$name: result is loads, warns or rejected (got '$result')" ;;
  esac
  t_ok "$name: says what prometheus-adapter does" test -n "$(expect_field "$exp" upstream)"
done
t_ok "the corpus has at least 20 rule files (it has $n_files)" test "$n_files" -ge 20
t_ok "every .expect has its rule file" bash -c \
  'for e in "$1"/*.expect; do [ -f "${e%.expect}.yaml" ] || exit 1; done' _ "$CORPUS"

# --- docs/migration.md's worked example stays true ------------------------------------------------
python3 - docs/migration.md "$CMA_TMP/migration" <<'PY'
import os, re, sys
text, out = open(sys.argv[1]).read(), sys.argv[2]
os.makedirs(out, exist_ok=True)
blocks = re.findall(r"```(yaml|sh)\n(.*?)```", text, re.S)
n = 0
for lang, body in blocks:
    if lang == "yaml" and re.match(r"(rules|externalRules|resourceRules):", body):
        n += 1
        open(os.path.join(out, "rules-%d.yaml" % n), "w").write(body)
    elif lang == "sh" and "custom-metrics-adapter" in body:
        flags = sorted(set(re.findall(r"(--[a-z0-9-]+)", body)))
        open(os.path.join(out, "flags.txt"), "a").write("\n".join(flags) + "\n")
PY
help=$("$(cma_adapter_bin)" --help)
t_ok "docs/migration.md: has a rule file example" test -f "$CMA_TMP/migration/rules-1.yaml"
for f in "$CMA_TMP"/migration/rules-*.yaml; do
  t_ok "docs/migration.md: $(basename "$f") passes --check-config --strict-config" \
    "$(cma_adapter_bin)" --config="$f" --check-config --strict-config
done
t_eq "docs/migration.md: the worked example's rule is config/seed-000-external.yaml's" \
  "$(grep -v '^#' config/seed-000-external.yaml)" "$(cat "$CMA_TMP/migration/rules-1.yaml")"
while read -r flag; do
  [ -n "$flag" ] || continue
  t_ok "docs/migration.md: $flag is a flag (--help lists it)" grep -qE -- "(^|[ ,])$flag( |$)" <<<"$help"
done <"$CMA_TMP/migration/flags.txt"

# --- loads with a warning, fails per request: live ----------------------------------------------
# One Prometheus for every run: the queues of prometheus-adapter's sample config (an external rule
# that cannot name the namespace next to a namespaced: false one), a GPU gauge whose rule has no
# metricsQuery (k8s-gpu-hpa-values) and a counter the chart's default rules serve.
python3 - "$CMA_TMP/corpus.om" <<'EOF'
import sys, time
now = int(time.time())
stamps = range(now - 1800, now + 3600, 30)
series = [("queue_consumer_lag", 'name="orders",namespace="shop"', 7),
          ("queue_depth", 'name="orders",topic="orders"', 42),
          ("dcgm_gpu_utilization", 'namespace="ml",pod="bert-0"', 55),
          ("http_requests_total", 'namespace="ml",pod="bert-0"', 1000)]
with open(sys.argv[1], "w") as out:
    for name, labels, value in series:
        out.write("# TYPE %s gauge\n" % name)
        out.writelines("%s{%s} %d %d\n" % (name, labels, value, t) for t in stamps)
    out.write("# EOF\n")
EOF
if ! start_prometheus "$CMA_TMP/corpus.om" || ! start_fake_kube; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
E=/apis/external.metrics.k8s.io/v1beta1
C=/apis/custom.metrics.k8s.io/v1beta1

# broken_status NAME WARNING: the last adapter_fetch is a 500 Status whose message carries WARNING.
broken_status() {
  t_eq "$1: HTTP 500" 500 "$R_STATUS"
  t_json "$1: a Status, InternalError" "$R_BODY" '"\(.kind) \(.code) \(.reason)"' "Status 500 InternalError"
  t_json "$1: the message says what is wrong with the rule, with its position" "$R_BODY" .message \
    "the rule of this metric cannot be served: $2"
}

cfg=$CORPUS/sample-config-quotes-fixed.yaml
warning="$CORPUS/$(expect_field "$CORPUS/sample-config-quotes-fixed.expect" line | head -n 1)"
if start_adapter "$cfg" && wait_discovery queue_depth external.metrics.k8s.io/v1beta1; then
  t_ok "sample config: the warning is in the log" grep -qF "W $warning" "$ADAPTER_LOG"
  adapter_fetch "$E"
  t_json "sample config: both external metrics are listed, as upstream" "$R_BODY" \
    '[.resources[].name] | sort | join(",")' "queue_consumer_lag,queue_depth"
  adapter_fetch "$E/namespaces/shop/queue_depth"
  t_eq "sample config: the sound rule serves (200)" 200 "$R_STATUS"
  t_json "sample config: queue_depth's value" "$R_BODY" '[.items[].value] | join(",")' "42"
  adapter_fetch "$E/namespaces/shop/queue_consumer_lag"
  broken_status "sample config: queue_consumer_lag" "$warning"
  adapter_fetch "$E/namespaces/shop/queue_depth"
  t_eq "sample config: still serving after the failed request" 200 "$R_STATUS"
  stop_adapter
  t_eq "sample config: the adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "sample config: start the adapter and list queue_depth"
fi

cfg=$CORPUS/k8s-gpu-hpa-values.yaml
warning="$CORPUS/$(expect_field "$CORPUS/k8s-gpu-hpa-values.expect" line | head -n 1)"
if start_adapter "$cfg" && wait_discovery dcgm_gpu_utilization && wait_discovery http_requests; then
  adapter_fetch "$C/namespaces/ml/pods/bert-0/dcgm_gpu_utilization"
  broken_status "rule without metricsQuery: dcgm_gpu_utilization" "$warning"
  adapter_fetch "$C/namespaces/ml/pods/bert-0/http_requests"
  t_eq "rule without metricsQuery: the chart's default rules serve (200)" 200 "$R_STATUS"
  t_json "rule without metricsQuery: http_requests of bert-0 (a constant counter: rate 0)" \
    "$R_BODY" '[.items[] | "\(.describedObject.name) \(.value)"] | join(",")' "bert-0 0"
  stop_adapter
else
  t_fail "rule without metricsQuery: start the adapter and list its metrics"
fi

cfg=$CORPUS/config-walkthrough-first-block.yaml
if start_adapter "$cfg"; then
  # prometheus-adapter sends match[]= and every relist fails; here the rule is left out, the
  # relist succeeds (with nothing to list) and the adapter becomes ready.
  WAIT_PID=$ADAPTER_PID wait_http "$ADAPTER_URL/readyz" 60 --cacert "$ADAPTER_CA"
  t_eq "empty seriesQuery: /readyz turns 200 (the relist succeeded)" 0 "$?"
  if adapter_log_since_start | grep -q "unable to update list of all metrics"; then
    t_fail "empty seriesQuery: no relist failed" "$(adapter_log_since_start | tail -n 5)"
  else
    t_pass "empty seriesQuery: no relist failed"
  fi
  stop_adapter
else
  t_fail "empty seriesQuery: start the adapter"
fi

t_ok "no sanitizer report in the adapter logs" \
  bash -c '! grep -Eqs "AddressSanitizer|LeakSanitizer|runtime error" "$1"' _ "$CMA_TMP/adapter.log"

t_summary
