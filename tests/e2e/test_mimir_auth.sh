#!/usr/bin/env bash
# test_mimir_auth.sh: seed 000's Mimir access: the adapter behind tests/lib/auth_proxy.py (Mimir's query path: prefix /prometheus, basic auth, X-Scope-OrgID tenant header) in front of a real Prometheus: per-pod GPU values come through with --prometheus-url=.../prometheus, basic auth from a password file and --prometheus-header; without the tenant header (or with a wrong password) discovery fails and metric requests answer a clear Status; a bearer --prometheus-token-file with a trailing newline works.
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
G=/apis/custom.metrics.k8s.io/v1beta1
BERT="$G/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert"
want_bert=$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod '.labels.namespace == "ml" and (.labels.pod // "" | startswith("bert-"))')
USER_NAME=gs-metrics-reader
PASSWORD='pa:ss w0rd!$' # a colon, a space and shell characters: all must survive basic auth
printf '%s\n' "$PASSWORD" >"$CMA_TMP/password" # as `kubectl create secret --from-file` leaves it
printf '%s\n' 'wrong' >"$CMA_TMP/wrong-password"
chmod 600 "$CMA_TMP/password" "$CMA_TMP/wrong-password"

if ! start_auth_proxy "$PROM_URL" --basic-user "$USER_NAME" --basic-password "$PASSWORD" --org-id giantswarm; then
  t_fail "start_auth_proxy (basic auth)"
  t_summary
  exit 1
fi

# --- the proxy itself answers like Mimir's gateway ------------------------------------------------
P() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@"; }
t_eq "proxy: no credentials: 401" 401 "$(P "$AUTH_PROXY_URL/api/v1/query?query=up")"
t_eq "proxy: credentials without X-Scope-OrgID: 401" 401 \
  "$(P -u "$USER_NAME:$PASSWORD" "$AUTH_PROXY_URL/api/v1/query?query=up")"
t_eq "proxy: ... with Mimir's 'no org id'" "no org id" \
  "$(curl -s -u "$USER_NAME:$PASSWORD" "$AUTH_PROXY_URL/api/v1/query?query=up")"
t_eq "proxy: credentials and tenant: 200" 200 \
  "$(P -u "$USER_NAME:$PASSWORD" -H 'X-Scope-OrgID: giantswarm' "$AUTH_PROXY_URL/api/v1/query?query=up")"
t_eq "proxy: outside /prometheus: 404" 404 \
  "$(P -u "$USER_NAME:$PASSWORD" -H 'X-Scope-OrgID: giantswarm' "${AUTH_PROXY_URL%/prometheus}/api/v1/query?query=up")"

# --- basic auth + tenant header: values come through ------------------------------------------------
# From here on the request log holds the adapter's requests only.
: >"$AUTH_PROXY_REQUEST_LOG"
MIMIR_FLAGS=(--prometheus-basic-auth-username="$USER_NAME" --prometheus-basic-auth-password-file="$CMA_TMP/password")
if PROM_URL=$AUTH_PROXY_URL start_adapter config/gpu-dcgm.yaml "${MIMIR_FLAGS[@]}" \
  --prometheus-header=X-Scope-OrgID=giantswarm; then
  t_ok "basic auth: discovery through the gateway" wait_discovery DCGM_FI_DEV_GPU_UTIL
  r=$(adapter_get "$BERT")
  t_eq "basic auth: per-pod GPU util equals expected.json" "$want_bert" "$(item_values "$r")"
  r=$(adapter_get "$G/nodes/gpu-node-2/DCGM_FI_DEV_FB_USED")
  t_eq "basic auth: node metric" \
    "$(expected_agg DCGM_FI_DEV_FB_USED sum Hostname '.labels.Hostname == "gpu-node-2"')" "$(item_values "$r")"
  t_ok "basic auth: series and query calls went under /prometheus with the tenant, all answered 200" \
    jq -e -s 'map(select(.path | startswith("/prometheus/api/v1/"))) as $a
      | ($a | map(.path) | index("/prometheus/api/v1/series") != null)
        and ($a | map(.path) | index("/prometheus/api/v1/query") != null)
        and ($a | all(.org_id == "giantswarm" and .status == 200))' "$AUTH_PROXY_REQUEST_LOG"
  t_ok "basic auth: the password file's trailing newline was not sent" \
    jq -e -s --arg a "Basic $(printf '%s' "$USER_NAME:$PASSWORD" | base64 -w0)" \
    'map(select(.path | startswith("/prometheus/api/v1/"))) | length > 0 and all(.authorization == $a)' \
    "$AUTH_PROXY_REQUEST_LOG"
  stop_adapter
  t_eq "basic auth: adapter exits 0" 0 "$?"
else
  t_fail "start_adapter through the basic-auth gateway"
fi

# --- no tenant header: discovery fails, requests get a clear Status ---------------------------------
# failing_backend NAME EXPECTED_LOG_ERE: the adapter just started against a backend that rejects it.
failing_backend() {
  t_ok "$1: the failed relist is logged with the backend's answer" \
    wait_adapter_log "unable to update list of all metrics: .*$2" 60
  adapter_fetch "$G"
  t_eq "$1: discovery still answers 200" 200 "$R_STATUS"
  t_json "$1: ... with no metrics" "$R_BODY" '"\(.kind) \(.resources | length)"' "APIResourceList 0"
  adapter_fetch "$BERT"
  t_eq "$1: a metric request gets JSON" application/json "$R_CTYPE"
  t_json "$1: ... a Status with a code and a reason" "$R_BODY" \
    '.kind == "Status" and .status == "Failure" and (.code >= 400) and (.reason | length > 0)' true
  t_eq "$1: ... whose code is the HTTP status" "$R_STATUS" "$(jq -r .code <<<"$R_BODY")"
  t_json "$1: ... 503 ServiceUnavailable" "$R_BODY" '"\(.code) \(.reason)"' "503 ServiceUnavailable"
  t_json "$1: ... whose message says why (the backend's answer)" "$R_BODY" ".message | test(\"$3\")" true
  adapter_fetch /healthz
  t_eq "$1: /healthz still ok" "200 ok" "$R_STATUS $R_BODY"
  t_ok "$1: the adapter is still running" kill -0 "$ADAPTER_PID"
}

: >"$AUTH_PROXY_REQUEST_LOG"
if PROM_URL=$AUTH_PROXY_URL start_adapter config/gpu-dcgm.yaml "${MIMIR_FLAGS[@]}"; then
  failing_backend "no X-Scope-OrgID" "401.*no org id" "discovery.*401.*no org id"
  t_ok "no X-Scope-OrgID: the gateway saw series calls without a tenant and answered 401" \
    jq -e -s 'any(.[]; .path == "/prometheus/api/v1/series" and .org_id == null and .status == 401)' \
    "$AUTH_PROXY_REQUEST_LOG"
  stop_adapter
  t_eq "no X-Scope-OrgID: adapter exits 0" 0 "$?"
else
  t_fail "start_adapter without the tenant header"
fi

if PROM_URL=$AUTH_PROXY_URL start_adapter config/gpu-dcgm.yaml \
  --prometheus-basic-auth-username="$USER_NAME" --prometheus-basic-auth-password-file="$CMA_TMP/wrong-password" \
  --prometheus-header=X-Scope-OrgID=giantswarm; then
  failing_backend "wrong password" "401.*check credentials" "discovery.*401.*check credentials"
  stop_adapter
else
  t_fail "start_adapter with a wrong password"
fi

# --- bearer token file with a trailing newline -----------------------------------------------------
basic_proxy_pid=$AUTH_PROXY_PID
printf 'gs-token-0123456789\n' >"$CMA_TMP/token"
if start_auth_proxy "$PROM_URL" --bearer-token gs-token-0123456789 --org-id giantswarm; then
  t_ok "the basic-auth proxy is a different process" test "$basic_proxy_pid" != "$AUTH_PROXY_PID"
  if PROM_URL=$AUTH_PROXY_URL start_adapter config/gpu-dcgm.yaml --prometheus-token-file="$CMA_TMP/token" \
    --prometheus-header=X-Scope-OrgID=giantswarm; then
    t_ok "bearer token: discovery through the gateway" wait_discovery DCGM_FI_DEV_GPU_UTIL
    r=$(adapter_get "$BERT")
    t_eq "bearer token: per-pod GPU util equals expected.json" "$want_bert" "$(item_values "$r")"
    t_ok "bearer token: sent trimmed ('Bearer gs-token-0123456789'), with the tenant" \
      jq -e -s 'map(select(.path | startswith("/prometheus/api/v1/"))) | length > 0
        and all(.authorization == "Bearer gs-token-0123456789" and .org_id == "giantswarm" and .status == 200)' \
      "$AUTH_PROXY_REQUEST_LOG"
    stop_adapter
    t_eq "bearer token: adapter exits 0" 0 "$?"
  else
    t_fail "start_adapter with --prometheus-token-file"
  fi
else
  t_fail "start_auth_proxy (bearer token)"
fi

t_summary
