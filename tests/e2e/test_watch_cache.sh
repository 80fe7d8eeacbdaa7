#!/usr/bin/env bash
# test_watch_cache.sh: the pod watch cache end to end. The fake kube-apiserver runs with --watch: it stands in for kube-apiserver's LIST+WATCH of pods (events in the recorded shape of watch-pods-all.jsonl, ERROR 410 as in watch-pods-too-old-rv.jsonl), and its /__fake/pods/* controls stand in for kubectl create/label/delete. Pods added, relabelled and deleted through the watch stream change the answer of a by-selector request with no LIST by selector; a forced 410 Gone leads to a re-list (request log); with the kube API gone the cache keeps answering.
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

gen_dcgm || exit 1
# The allowed SubjectAccessReview stays cached for the whole test: with the kube API stopped the
# test checks the pod cache, and a loaded machine can take more than the default 10 s to get there.
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json" --watch ||
  ! start_adapter config/gpu-dcgm.yaml --authorization-webhook-cache-authorized-ttl=10m; then
  t_fail "start Prometheus, fake kube-apiserver (--watch) and adapter"
  t_summary
  exit 1
fi
t_ok "discovery lists DCGM_FI_DEV_GPU_UTIL" wait_discovery DCGM_FI_DEV_GPU_UTIL

Q="/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert"

# control PATH: a /__fake control request to the fake kube-apiserver.
control() {
  curl -s --max-time 10 --cacert "$KUBE_CA" -H 'Authorization: Bearer fake-admin' "$KUBE_URL/__fake/$1"
}
# names: the pod names of the by-selector answer, sorted, space-separated.
names() {
  adapter_fetch "$Q"
  [ "$R_STATUS" = 200 ] || { echo "HTTP $R_STATUS"; return; }
  jq -r '[.items[].describedObject.name] | sort | join(" ")' <<<"$R_BODY"
}
# wait_names WANT: polls the by-selector answer until it is WANT (10 s at most).
wait_names() {
  local deadline=$((SECONDS + 10)) got
  while :; do
    got=$(names)
    [ "$got" = "$1" ] && return 0
    [ "$SECONDS" -ge "$deadline" ] && { echo "got: $got" >&2; return 1; }
    sleep 0.2
  done
}
# selector_lists_since N: LISTs of pods by labelSelector in the request log after line N.
selector_lists_since() {
  jq -s --argjson n "$1" '.[$n:] | map(select((.path | endswith("/pods")) and .params.labelSelector != null and .params.watch == null)) | length' "$KUBE_REQUEST_LOG"
}

t_ok "the cache syncs: LIST of all pods, then WATCH from the list's resourceVersion" \
  jq -e -s 'map(select(.path == "/api/v1/pods")) as $p
    | ($p | map(select(.params.watch == null and .params.labelSelector == null)) | length >= 1)
    and ($p | map(select(.params.watch == ["1"] and .params.allowWatchBookmarks == ["true"]
                         and (.params.resourceVersion[0] | test("^[0-9]+$")))) | length >= 1)' \
  "$KUBE_REQUEST_LOG"
t_ok "by-selector app=bert: bert-0..2" wait_names "bert-0 bert-1 bert-2"

mark=$(wc -l <"$KUBE_REQUEST_LOG")
control "pods/relabel?namespace=ml&name=bert-1&labels=app=bert-canary,tier=inference" >/dev/null
t_ok "relabel bert-1 out of app=bert (MODIFIED): it leaves the answer" wait_names "bert-0 bert-2"
control "pods/delete?namespace=ml&name=bert-2" >/dev/null
t_ok "delete bert-2 (DELETED): it leaves the answer" wait_names "bert-0"
control "pods/add?namespace=ml&name=bert-2&labels=app=bert,tier=inference" >/dev/null
control "pods/relabel?namespace=ml&name=bert-1&labels=app=bert,tier=inference" >/dev/null
t_ok "add bert-2 again (ADDED) and relabel bert-1 back: both return" wait_names "bert-0 bert-1 bert-2"
t_eq "no LIST by labelSelector while the cache answers" 0 "$(selector_lists_since "$mark")"

control "watch/replay?name=watch-pods-all.jsonl" >/dev/null
t_ok "recorded watch-pods-all.jsonl replayed (bert-3 created ... deleted): bert-0..2 again" \
  wait_names "bert-0 bert-1 bert-2"

# --- 410 Gone → re-list ---------------------------------------------------------------------
mark=$(wc -l <"$KUBE_REQUEST_LOG")
control "watch/gone" >/dev/null
relisted() {
  jq -e -s --argjson n "$mark" '.[$n:] | map(select(.path == "/api/v1/pods")) as $p
    | ($p | map(select(.params.watch == null)) | length >= 1)
    and ($p | map(select(.params.watch == ["1"])) | length >= 1)' "$KUBE_REQUEST_LOG" >/dev/null
}
wait_relist() {
  local deadline=$((SECONDS + 15))
  until relisted; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.2
  done
}
t_ok "410 Gone (ERROR event): the cache re-lists, then watches again" wait_relist
control "pods/relabel?namespace=ml&name=bert-0&labels=app=bert-canary" >/dev/null
t_ok "after the re-list, events still change the answer" wait_names "bert-1 bert-2"

# --- the kube API goes away -------------------------------------------------------------------
cma_stop "$KUBE_PID"
sleep 1
t_eq "kube-apiserver stopped: by-selector still answers from the cache" "bert-1 bert-2" "$(names)"
adapter_fetch "$Q"
t_eq "kube-apiserver stopped: HTTP 200" 200 "$R_STATUS"
sleep 1
t_eq "kube-apiserver stopped: still answering after reconnect attempts" "bert-1 bert-2" "$(names)"

t_summary
