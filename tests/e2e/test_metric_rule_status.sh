#!/usr/bin/env bash
# A MetricRule's status, written as the controller will write it (issue 23 part 4;
# docs/metric-rules.md, "Status"), against the fake kube-apiserver serving the CRD
# (tests/lib/fake_kube_apiserver.py --metric-rules: the status subresource applies a merge patch,
# checks the result against the CRD's schema, skips no-op writes). The driver
# $(dirname $CMA_BIN)/metricrule_status_cli reads the object, builds its status from an outcome
# (src/rules/metricrule_status.c), compares it with the stored one ignoring lastTransitionTime
# and writes it only when it differs (src/clients/metricrule_status_write.c: PATCH
# application/merge-patch+json). Checked:
#  - Accepted with metrics: one write, stored as built (observedGeneration, the condition,
#    metrics sorted and deduplicated); kubectl get mr shows ACCEPTED True and the metrics;
#  - the same outcome again, and again with a later clock (another replica): no write;
#  - a new generation that fails (InvalidSpec with the compiler's message): written, the time moves;
#  - another False reason (Conflict naming the winner): written, the time stays;
#  - two "replicas" at once with different clocks: both succeed, one status stored, a third
#    pass writes nothing;
#  - every status the driver wrote passed the CRD's schema (the fake answers 422 otherwise);
#  - a deleted object: "gone", no error.
# asan: yes (then the driver is the ASan+UBSan build: anything on its stderr fails the run)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh
tmp=$(cma_tmp)
crd=deploy/components/metric-rules/crd.yaml
bin=${CMA_BIN:-build/custom-metrics-adapter}
cli=$(dirname "$bin")/metricrule_status_cli
if ! t_ok "the test driver metricrule_status_cli is built next to the adapter ($cli)" test -x "$cli"; then
  t_summary
  exit 1
fi
if ! tools=$("$CMA_ROOT/scripts/tools.sh"); then
  t_fail "scripts/tools.sh installs the pinned kubectl"
  t_summary
  exit 1
fi
KUBECTL=$tools/kubectl
if ! start_fake_kube "" --metric-rules "$CMA_ROOT/$crd"; then
  t_fail "the fake kube-apiserver starts with --metric-rules"
  t_summary
  exit 1
fi
K=("$KUBECTL" --kubeconfig "$KUBE_KUBECONFIG" --cache-dir "$tmp/kube-cache")
BASE="$KUBE_URL/apis/metrics.custom-metrics-adapter.dev/v1alpha1"
kcurl() {
  curl -s --max-time 20 --cacert "$KUBE_CA" -H 'Authorization: Bearer fake-admin' "$@"
}
control() { kcurl "$KUBE_URL/__fake/metricrules/$1" "${@:2}"; }
apply() { control apply -X POST -H 'Content-Type: application/yaml' --data-binary "@$1"; }
writes() { control status-log | jq length; }
object() { kcurl "$BASE/namespaces/shop/metricrules/queue-depth"; }
# status NOW_MS REASON MESSAGE [METRIC...]: the driver's one line
status() { "$cli" "$KUBE_KUBECONFIG" shop queue-depth "$@" 2>>"$tmp/cli.err"; }

T0=1796137200000 # 2026-12-01T15:00:00Z
T1=1796140800000 # 16:00
T2=1796144400000 # 17:00

apply tests/fixtures/metric-rules/good-queue-depth.yaml >/dev/null
t_json "the MetricRule exists, generation 1, no status" "$(object)" '"\(.metadata.generation) \(.status)"' "1 null"

out=$(status "$T0" Accepted "" queue_depth queue_age queue_depth)
t_eq "Accepted: written" "written" "${out%% *}"
t_eq "one status write, a merge patch that the fake accepted (200)" "1 PATCH application/merge-patch+json 200" \
  "$(control status-log | jq -r 'length as $n | .[-1] | "\($n) \(.method) \(.contentType) \(.code)"')"
t_json "stored: observedGeneration, the Accepted condition, metrics sorted and once each" "$(object)" \
  '.status | "\(.observedGeneration) \(.conditions[0].type)=\(.conditions[0].status) \(.conditions[0].reason) \(.conditions[0].observedGeneration) \(.conditions[0].lastTransitionTime) \(.metrics | join(","))"' \
  "1 Accepted=True Accepted 1 2026-12-01T15:00:00Z queue_age,queue_depth"
t_json "stored exactly what the driver built" "$(object)" '.status | tojson' \
  "$(jq -c -S . <<<"${out#written }")"
t_eq "kubectl get mr: ACCEPTED True, METRICS the names" "queue-depth True [\"queue_age\",\"queue_depth\"]" \
  "$("${K[@]}" get mr -n shop --no-headers 2>"$tmp/kubectl.err" | awk '{print $1, $2, $3}')"

out=$(status "$T0" Accepted "" queue_depth queue_age)
t_eq "the same outcome again: no write" "unchanged 1" "${out%% *} $(writes)"
out=$(status "$T1" Accepted "" queue_age queue_depth)
t_eq "the same outcome an hour later (another replica's clock): no write" "unchanged 1" "${out%% *} $(writes)"

sed 's/sum(<<.Series>>/sum(rate(<<.Series>>/' tests/fixtures/metric-rules/good-queue-depth.yaml >"$tmp/v2.yaml"
t_json "a changed spec: generation 2" "$(apply "$tmp/v2.yaml")" .generation 2
msg='spec.externalRules[0].metricsQuery: 1:9: expected type range vector in call to function "rate", got instant vector'
out=$(status "$T1" InvalidSpec "$msg")
t_eq "InvalidSpec for generation 2: written" "written 2" "${out%% *} $(writes)"
t_json "stored: False, InvalidSpec, the compiler's message, the new time, no metrics" "$(object)" \
  '.status | "\(.observedGeneration) \(.conditions[0].status) \(.conditions[0].reason) \(.conditions[0].lastTransitionTime) \(.metrics | length)|\(.conditions[0].message)"' \
  "2 False InvalidSpec 2026-12-01T16:00:00Z 0|$msg"
out=$(status "$T2" Conflict "queue_depth is served by MetricRule shop/older" queue_age)
t_eq "Conflict (still False): written" "written 3" "${out%% *} $(writes)"
t_json "stored: Conflict naming the winner, the time of the False transition kept" "$(object)" \
  '.status.conditions[0] | "\(.reason) \(.lastTransitionTime) \(.message)"' \
  "Conflict 2026-12-01T16:00:00Z queue_depth is served by MetricRule shop/older"

# two replicas at once, different clocks, the same new outcome
status "$T1" Accepted "" queue_age queue_depth >"$tmp/a.out" &
pa=$!
status "$T2" Accepted "" queue_depth queue_age >"$tmp/b.out" &
pb=$!
wait "$pa"
ra=$?
wait "$pb"
rb=$?
t_eq "two replicas write at once: both succeed" "0 0" "$ra $rb"
t_ok "each replica wrote, or found the other's write" grep -qE '^(written|unchanged) ' "$tmp/a.out" "$tmp/b.out"
t_json "one status stored: True, generation 2, both metrics" "$(object)" \
  '.status | "\(.conditions[0].status) \(.observedGeneration) \(.metrics | join(","))"' "True 2 queue_age,queue_depth"
n=$(writes)
out=$(status "$T2" Accepted "" queue_age queue_depth)
t_eq "a third pass by either replica: no write" "unchanged $n" "${out%% *} $(writes)"
t_eq "every status write passed the CRD's schema (200)" "" \
  "$(control status-log | jq -r '.[] | select(.code != 200) | "\(.code) \(.body)"')"

control "delete?namespace=shop&name=queue-depth" >/dev/null
out=$(status "$T2" Accepted "" queue_depth)
t_eq "a deleted MetricRule: gone, not an error" "gone 0" "$out $?"
t_eq "the driver wrote nothing on stderr, in any run" "" "$(cat "$tmp/cli.err" 2>/dev/null)"
t_summary
