#!/usr/bin/env bash
# test_status_codes.sh: status codes never lie. With a real Prometheus (synthetic DCGM data) and the
# fake kube-apiserver (recorded fixtures; it stands in for the LISTs and for the SubjectAccessReview
# API and logs every request it gets):
# - selectors too large for a kube-apiserver LIST URL or a backend query (57,000 and 70,000 bytes,
#   in labelSelector, metricLabelSelector and fieldSelector, in every group and version) answer 413
#   with a Status whose code is 413, and no kube-apiserver request and no Prometheus query carries
#   them or is made for them (Prometheus counts its own queries in prometheus_http_requests_total;
#   the fake logs every request's parameters); positive controls show both counters see such calls;
# - with the server's default request-line limit the same requests are refused by the server, still
#   with the HTTP status equal to the Status code and no call made;
# - a backend failure (a metricsQuery that Prometheus rejects) is a 500 in both the HTTP status and
#   the Status body, logged with its cause;
# - identity headers behind a front-proxy certificate are read as kube-apiserver reads them:
#   trailing spaces and tabs are not part of the user, group or extra values the SubjectAccessReview
#   carries.
# asan: yes
# shellcheck disable=SC2119 # gen_dcgm and stop_adapter are called without their optional args
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

tmp=$(cma_tmp)
PKI="$tmp/pki"
mkdir -p "$PKI"
ca() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=$1" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
    -keyout "$PKI/$1.key" -out "$PKI/$1.crt" >>"$PKI/openssl.log" 2>&1
}
leaf() {
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$3" \
    -keyout "$PKI/$1.key" -out "$PKI/$1.csr" >>"$PKI/openssl.log" 2>&1 &&
    printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n' >"$PKI/$1.ext" &&
    openssl x509 -req -in "$PKI/$1.csr" -CA "$PKI/$2.crt" -CAkey "$PKI/$2.key" -CAcreateserial \
      -days 2 -extfile "$PKI/$1.ext" -out "$PKI/$1.crt" >>"$PKI/openssl.log" 2>&1
}
if ! { ca front-proxy-ca && ca client-ca && leaf proxy front-proxy-ca "/CN=front-proxy-client"; }; then
  t_fail "openssl: make the test PKI" "$(tail -n 20 "$PKI/openssl.log")"
  t_summary
  exit 1
fi

cat >"$tmp/config.yaml" <<'EOF'
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
externalRules:
- seriesQuery: 'DCGM_FI_DEV_MEM_COPY_UTIL{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (pod)
# A metricsQuery Prometheus rejects (bad_data): the backend-failure path.
- seriesQuery: 'DCGM_FI_DEV_FB_USED{namespace!="",pod!=""}'
  name: {matches: "^DCGM_FI_DEV_FB_USED$", as: "broken_query"}
  resources:
    overrides:
      namespace: {resource: namespace}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (pod) +
resourceRules:
  cpu:
    containerQuery: sum(DCGM_FI_DEV_GPU_UTIL{<<.LabelMatchers>>}) by (<<.GroupBy>>) / 100
    nodeQuery: sum(DCGM_FI_DEV_GPU_UTIL{<<.LabelMatchers>>}) by (<<.GroupBy>>) / 100
    resources:
      overrides:
        namespace: {resource: namespace}
        pod: {resource: pod}
        Hostname: {resource: node}
    containerLabel: container
  memory:
    containerQuery: sum(DCGM_FI_DEV_FB_USED{<<.LabelMatchers>>}) by (<<.GroupBy>>) * 1048576
    nodeQuery: sum(DCGM_FI_DEV_FB_USED{<<.LabelMatchers>>}) by (<<.GroupBy>>) * 1048576
    resources:
      overrides:
        namespace: {resource: namespace}
        pod: {resource: pod}
        Hostname: {resource: node}
    containerLabel: container
  window: 1m
EOF

kube_control() { curl -s --max-time 10 --cacert "$KUBE_CA" -H "Authorization: Bearer fake-admin" "$@"; }
gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
jq -n --rawfile client "$PKI/client-ca.crt" --rawfile rh "$PKI/front-proxy-ca.crt" '{
  "client-ca-file": $client, "requestheader-client-ca-file": $rh,
  "requestheader-allowed-names": "[\"front-proxy-client\"]",
  "requestheader-username-headers": "[\"X-Remote-User\"]",
  "requestheader-group-headers": "[\"X-Remote-Group\"]",
  "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]"}' |
  kube_control -X POST --data-binary @- "$KUBE_URL/__fake/auth-configmap" >/dev/null
kube_control "$KUBE_URL/__fake/sar-allow?users=*" >/dev/null

# Requests of up to 1 MiB reach the handlers (the server's own request-line limit is tested last).
if ! start_adapter "$tmp/config.yaml" --max-request-header-bytes=1048576; then
  t_fail "start the adapter"
  t_summary
  exit 1
fi
t_ok "discovery lists DCGM_FI_DEV_GPU_UTIL" wait_discovery DCGM_FI_DEV_GPU_UTIL
t_ok "metrics.k8s.io answers" wait_status /apis/metrics.k8s.io/v1beta1/nodes 200 60

# prom_queries: how many /api/v1/query requests Prometheus has served (its own counter).
prom_queries() {
  curl -s --max-time 10 "$PROM_URL/metrics" |
    awk '/^prometheus_http_requests_total\{/ && /handler="\/api\/v1\/query"/ { n += $NF } END { print n + 0 }'
}
# kube_calls_with_selector MIN_BYTES: kube-apiserver requests whose labelSelector or
# fieldSelector is at least MIN_BYTES long.
kube_calls_with_selector() {
  jq -s --argjson min "$1" '[.[] | select((.params.labelSelector[0] // "" | length) >= $min
    or (.params.fieldSelector[0] // "" | length) >= $min)] | length' "$KUBE_REQUEST_LOG"
}
# selector BYTES [valid]: "k0=v0,k1=v1,..." cut to exactly BYTES bytes (refused before it is
# parsed), or with "valid" the longest whole selector of at most BYTES bytes.
selector() {
  python3 -c 'import sys
n = int(sys.argv[1])
s = ",".join("k%d=v%d" % (i, i) for i in range(n // 4))
if len(sys.argv) > 2:
    s = s[:n + 1]
    s = s[:s.rfind(",")] if len(s) > n else s
print(s[:n])' "$@"
}
SEL57=$(selector 57000)
SEL70=$(selector 70000)

# --- positive controls: the counters see such calls -----------------------------------------------
q0=$(prom_queries)
adapter_fetch "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/bert-0/DCGM_FI_DEV_GPU_UTIL"
t_eq "control: one custom metric by name: 200" 200 "$R_STATUS"
t_eq "control: Prometheus counted that query" $((q0 + 1)) "$(prom_queries)"
SEL15=$(selector 15000 valid)
adapter_fetch "/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods?labelSelector=$SEL15"
t_eq "control: a ${#SEL15}-byte labelSelector (under the limit) is served: 200" 200 "$R_STATUS"
t_ok "control: the fake kube-apiserver logged that LIST with its ${#SEL15}-byte selector" \
  test "$(kube_calls_with_selector 14990)" -ge 1

# --- too large, every group: 413 before any call -----------------------------------------------
C=/apis/custom.metrics.k8s.io
E=/apis/external.metrics.k8s.io/v1beta1/namespaces/ml
R=/apis/metrics.k8s.io/v1beta1
paths=(
  "$C/v1beta1/namespaces/ml/pods/%2A/DCGM_FI_DEV_GPU_UTIL?labelSelector="
  "$C/v1beta2/namespaces/ml/pods/%2A/DCGM_FI_DEV_GPU_UTIL?labelSelector="
  "$C/v1beta1/namespaces/ml/pods/bert-0/DCGM_FI_DEV_GPU_UTIL?metricLabelSelector="
  "$C/v1beta1/namespaces/ml/metrics/DCGM_FI_DEV_GPU_UTIL?metricLabelSelector="
  "$C/v1beta1/namespaces/ml/pods/%2A/no_such_metric?labelSelector="
  "$E/dcgm_fi_dev_mem_copy_util?labelSelector="
  "$R/namespaces/ml/pods?labelSelector="
  "$R/pods?fieldSelector="
  "$R/nodes?labelSelector="
  "$R/nodes/gpu-node-1?fieldSelector="
)
q0=$(prom_queries)
k0=$(kube_calls_with_selector 16385)
for p in "${paths[@]}"; do
  param=${p##*\?}
  param=${param%=}
  for size in 57000 70000; do
    sel=$SEL57
    [ "$size" = 70000 ] && sel=$SEL70
    adapter_fetch "$p$sel"
    name="${p%%\?*} $param of $size bytes"
    t_eq "$name: HTTP 413" 413 "$R_STATUS"
    t_json "$name: Status 413 says which parameter and the limit" "$R_BODY" \
      '"\(.kind) \(.code) \(.reason): \(.message)"' \
      "Status 413 RequestEntityTooLarge: $param is $size bytes, over the limit of 16384 bytes for a selector"
  done
done
t_eq "no Prometheus query was made for them" "$q0" "$(prom_queries)"
t_eq "no kube-apiserver request carried them" "$k0" "$(kube_calls_with_selector 16385)"
t_eq "no kube-apiserver request ever carried a selector over the limit" 0 "$(kube_calls_with_selector 16385)"

# --- a backend failure: 500 in both, logged with its cause -------------------------------------
adapter_fetch "$E/broken_query"
t_eq "backend rejects the query: HTTP 500" 500 "$R_STATUS"
t_json "backend rejects the query: Status 500 InternalError with Prometheus's reason" "$R_BODY" \
  '"\(.code) \(.reason) \(.message | startswith("unable to fetch metrics from prometheus: bad_data: "))"' \
  "500 InternalError true"
t_ok "the failure is logged with its cause" wait_adapter_log "broken_query: 500 unable to fetch metrics from prometheus: bad_data: " 10

# --- identity headers as kube-apiserver reads them ---------------------------------------------
last_sar() { kube_control "$KUBE_URL/__fake/sar-log" | jq -c '.[-1].spec | {user, groups, extra}'; }
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 --cacert "$ADAPTER_CA" \
  --cert "$PKI/proxy.crt" --key "$PKI/proxy.key" \
  -H $'X-Remote-User: alice \t ' -H $'X-Remote-Group: g1\t' -H 'X-Remote-Group;' \
  -H $'X-Remote-Group: \t g2 ' -H $'X-Remote-Extra-Scopes: s1 \t' \
  "$ADAPTER_URL/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/bert-0/DCGM_FI_DEV_GPU_UTIL")
t_eq "front proxy with padded identity headers: 200" 200 "$code"
t_eq "the SubjectAccessReview carries the trimmed identity, empty group dropped" \
  '{"user":"alice","groups":["g1","g2","system:authenticated"],"extra":{"scopes":["s1"]}}' "$(last_sar)"

# --- the server's own request-line limit: still honest, still no call --------------------------
stop_adapter
if ! start_adapter "$tmp/config.yaml"; then
  t_fail "restart the adapter with the default --max-request-header-bytes"
  t_summary
  exit 1
fi
t_ok "discovery lists DCGM_FI_DEV_GPU_UTIL again" wait_discovery DCGM_FI_DEV_GPU_UTIL
q0=$(prom_queries)
for p in "${paths[0]}" "${paths[5]}" "${paths[6]}"; do
  # A request line over --max-request-header-bytes never reaches the adapter's code: libmicrohttpd
  # 0.9.75 answers 414 itself with a fixed HTML body that no option replaces, or, when the
  # over-long line has already filled the connection's memory, closes the connection with no
  # answer (docs/errors.md, "What libmicrohttpd 0.9.75 answers by itself"). Assert exactly those
  # documented outcomes, so a change of library behaviour shows up here.
  rm -f "$CMA_TMP/fetch.body"
  t0=$SECONDS
  adapter_fetch "$p$SEL57"
  if [ "$R_STATUS" = 000 ]; then
    # A closed connection, not a hang until curl's 60 s limit: it must come at once.
    t_ok "default limits, ${p%%\?*} with 57,000 bytes: connection closed by the HTTP server at once" \
      test $((SECONDS - t0)) -lt 10
  else
    t_eq "default limits, ${p%%\?*} with 57,000 bytes: 414 from the HTTP server" 414 "$R_STATUS"
    t_ok "default limits, ${p%%\?*}: libmicrohttpd's documented 'Request too big' body" \
      grep -q '<title>Request too big</title>' <<<"$R_BODY"
  fi
done
t_eq "default limits: no Prometheus query was made" "$q0" "$(prom_queries)"
t_eq "default limits: no kube-apiserver request carried a selector over the limit" 0 \
  "$(kube_calls_with_selector 16385)"
t_summary
