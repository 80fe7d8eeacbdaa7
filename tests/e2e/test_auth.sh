#!/usr/bin/env bash
# test_auth.sh: delegated authentication and authorization end to end, with real certificates made by openssl, real TLS and curl: anonymous, malformed/rejected/valid bearer tokens (TokenReview), authorized and denied SubjectAccessReviews (status code, 403 message and the SAR body sent), front-proxy certificates (wrong CA, CN not allowed, right CA and CN with X-Remote-* headers), spoofed X-Remote-User without a certificate, client-CA certificates, system:masters and always-allow paths, and a CA rotation through the ConfigMap without a restart. The fake kube-apiserver stands in for kube-apiserver's TokenReview/SubjectAccessReview APIs and the extension-apiserver-authentication ConfigMap, answering from recorded bodies.
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

PKI="$CMA_TMP/pki"
mkdir -p "$PKI"
# ca NAME: a self-signed CA; leaf NAME CA SUBJECT: a clientAuth certificate signed by CA.
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
if ! { ca front-proxy-ca && ca front-proxy-ca-2 && ca other-ca && ca client-ca &&
  leaf proxy front-proxy-ca "/CN=front-proxy-client" &&
  leaf proxy2 front-proxy-ca-2 "/CN=front-proxy-client" &&
  leaf proxy-wrong-ca other-ca "/CN=front-proxy-client" &&
  leaf proxy-bad-cn front-proxy-ca "/CN=not-the-proxy" &&
  leaf jane client-ca "/O=team-a/O=devs/CN=jane"; }; then
  t_fail "openssl: make the test PKI" "$(tail -n 20 "$PKI/openssl.log")"
  t_summary
  exit 1
fi

# auth_configmap RH_CA: the ConfigMap data kube-apiserver would write, with this front-proxy CA.
auth_configmap() {
  jq -n --rawfile client "$PKI/client-ca.crt" --rawfile rh "$PKI/$1.crt" '{
    "client-ca-file": $client, "requestheader-client-ca-file": $rh,
    "requestheader-allowed-names": "[\"front-proxy-client\"]",
    "requestheader-username-headers": "[\"X-Remote-User\"]",
    "requestheader-group-headers": "[\"X-Remote-Group\"]",
    "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]"}'
}
kube_control() { curl -s --max-time 10 --cacert "$KUBE_CA" -H "Authorization: Bearer fake-admin" "$@"; }
set_configmap() { auth_configmap "$1" | kube_control -X POST --data-binary @- "$KUBE_URL/__fake/auth-configmap" >/dev/null; }
sar_allow() { kube_control "$KUBE_URL/__fake/sar-allow?users=$1" >/dev/null; }
sar_count() { kube_control "$KUBE_URL/__fake/sar-log" | jq length; }
last_sar() { kube_control "$KUBE_URL/__fake/sar-log" | jq -c '.[-1].spec'; }

# call NAME [CURL ARGS...] PATH: sets C_STATUS and C_BODY.
call() {
  local path=${*: -1}
  local args=("${@:1:$#-1}")
  C_BODY=$(curl -s --max-time 20 --cacert "$ADAPTER_CA" -o - -w '\n%{http_code}' "${args[@]}" "$ADAPTER_URL$path")
  C_STATUS=${C_BODY##*$'\n'}
  C_BODY=${C_BODY%$'\n'*}
}
cert() { printf '%s\n' --cert "$PKI/$1.crt" --key "$PKI/$1.key"; }

token_of() { sed -n '/^{/{p;q}' "$CMA_FIXTURES/$1" | jq -r .spec.token; }
VALID_TOKEN=$(token_of tokenreview-valid.http)
BAD_SIG_TOKEN=$(token_of tokenreview-bad-signature.http)
SA_USER=$(sed -n '/^{"kind":"TokenReview"/p' "$CMA_FIXTURES/tokenreview-valid.http" | jq -r .status.user.username)

gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
set_configmap front-proxy-ca
sar_allow "*"
if ! start_adapter config/gpu-dcgm.yaml; then
  t_fail "start the adapter (CAs from the ConfigMap)"
  t_summary
  exit 1
fi
t_ok "discovery lists DCGM_FI_DEV_GPU_UTIL (everyone allowed)" wait_discovery DCGM_FI_DEV_GPU_UTIL
sar_allow "proxied-alice,jane"
M=/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/%2A/DCGM_FI_DEV_GPU_UTIL

# --- always allowed, anonymous ----------------------------------------------------------------
n=$(sar_count)
call /healthz
t_eq "anonymous /healthz: 200 without a SAR" "200 $n" "$C_STATUS $(sar_count)"
call /version
t_eq "anonymous /version: 403" 403 "$C_STATUS"
t_json "anonymous /version: 403 message" "$C_BODY" .message \
  'forbidden: User "system:anonymous" cannot get path "/version"'
t_json "anonymous: SAR sent" "$(last_sar)" tojson \
  '{"nonResourceAttributes":{"path":"/version","verb":"get"},"user":"system:anonymous","groups":["system:unauthenticated"]}'
call -H "Authorization: Basic YWRtaW46YWRtaW4=" /openapi/v3
t_eq "Basic auth header ignored: anonymous (403)" 403 "$C_STATUS"
t_json "Basic auth header ignored: SAR user" "$(last_sar)" .user system:anonymous

# --- bearer tokens -----------------------------------------------------------------------------
call -H "Authorization: Bearer garbage.not-a-token" /version
t_eq "malformed bearer token: 401" 401 "$C_STATUS"
t_json "malformed bearer token: Status" "$C_BODY" '"\(.reason) \(.code) \(.message)"' "Unauthorized 401 Unauthorized"
call -H "Authorization: Bearer $BAD_SIG_TOKEN" /version
t_eq "bearer token with a bad signature: 401" 401 "$C_STATUS"
call -H "Authorization: Bearer $VALID_TOKEN" "$M"
t_eq "valid token, unauthorized: 403" 403 "$C_STATUS"
t_json "valid token, unauthorized: message names user, verb, resource" "$C_BODY" .message \
  "pods.custom.metrics.k8s.io \"*\" is forbidden: User \"$SA_USER\" cannot get resource \"pods/DCGM_FI_DEV_GPU_UTIL\" in API group \"custom.metrics.k8s.io\" in the namespace \"ml\""
t_json "valid token, unauthorized: details" "$C_BODY" '.details | tojson' '{"name":"*","group":"custom.metrics.k8s.io","kind":"pods"}'
t_json "valid token: SAR resource attributes" "$(last_sar)" '.resourceAttributes | tojson' \
  '{"namespace":"ml","verb":"get","group":"custom.metrics.k8s.io","version":"v1beta1","resource":"pods","subresource":"DCGM_FI_DEV_GPU_UTIL","name":"*"}'
t_json "valid token: SAR user and groups from the TokenReview" "$(last_sar)" '"\(.user) \(.groups[-1])"' "$SA_USER system:authenticated"
sar_allow "proxied-alice,jane,$SA_USER"
call -H "Authorization: Bearer $VALID_TOKEN" /apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/%2A/DCGM_FI_DEV_FB_USED
t_eq "valid token, authorized: 200" 200 "$C_STATUS"
t_json "valid token, authorized: items" "$C_BODY" '.items | length > 0' true
n=$(sar_count)
call -H "Authorization: Bearer $VALID_TOKEN" "$M"
t_eq "denied answer cached: still 403, no new SAR" "403 $n" "$C_STATUS $(sar_count)"
call -H "Authorization: Bearer $VALID_TOKEN" /apis/external.metrics.k8s.io/v1beta1/namespaces/ml/some_metric
t_json "external metric: SAR verb list, resource = metric" "$(last_sar)" '.resourceAttributes | tojson' \
  '{"namespace":"ml","verb":"list","group":"external.metrics.k8s.io","version":"v1beta1","resource":"some_metric"}'

# --- front-proxy certificates ------------------------------------------------------------------
hdrs=(-H "X-Remote-User: proxied-alice" -H "X-Remote-Group: g1" -H "X-Remote-Group: g2" -H "X-Remote-Extra-Scopes: s1")
mapfile -t c < <(cert proxy-wrong-ca)
call "${c[@]}" "${hdrs[@]}" /version
t_eq "front-proxy certificate from the wrong CA: 401" 401 "$C_STATUS"
mapfile -t c < <(cert proxy-bad-cn)
call "${c[@]}" "${hdrs[@]}" /version
t_eq "right CA, CN not allowed: 401" 401 "$C_STATUS"
mapfile -t c < <(cert proxy)
call "${c[@]}" "${hdrs[@]}" /version
t_eq "right CA and CN with X-Remote-User/Group: 200" 200 "$C_STATUS"
t_json "front-proxy: SAR names the header identity" "$(last_sar)" '{user, groups, extra} | tojson' \
  '{"user":"proxied-alice","groups":["g1","g2","system:authenticated"],"extra":{"scopes":["s1"]}}'
n=$(sar_count)
call "${c[@]}" -H "X-Remote-User: system:kube-aggregator" -H "X-Remote-Group: system:masters" \
  /apis/custom.metrics.k8s.io/v1beta1
t_eq "front-proxy, system:masters: 200 without a SAR" "200 $n" "$C_STATUS $(sar_count)"
call -H "X-Remote-User: proxied-alice" -H "X-Remote-Group: system:masters" /openapi/v2
t_eq "spoofed X-Remote-User without a certificate: 403" 403 "$C_STATUS"
t_json "spoofed X-Remote-User: the SAR user is system:anonymous" "$(last_sar)" '{user, groups} | tojson' \
  '{"user":"system:anonymous","groups":["system:unauthenticated"]}'
mapfile -t c < <(cert jane)
call "${c[@]}" /version
t_eq "client-CA certificate: 200" 200 "$C_STATUS"
t_json "client-CA certificate: user CN, groups O" "$(last_sar)" '{user, groups} | tojson' \
  '{"user":"jane","groups":["team-a","devs","system:authenticated"]}'

# --- CA rotation through the ConfigMap, no restart ---------------------------------------------
set_configmap front-proxy-ca-2
mapfile -t old < <(cert proxy)
mapfile -t new < <(cert proxy2)
deadline=$((SECONDS + 90))
while :; do
  call "${old[@]}" -H "X-Remote-User: proxied-alice" /version
  [ "$C_STATUS" = 401 ] || [ "$SECONDS" -ge "$deadline" ] && break
  sleep 1
done
t_eq "rotation: the old front-proxy certificate stops working" 401 "$C_STATUS"
call "${new[@]}" -H "X-Remote-User: proxied-alice" /version
t_eq "rotation: the new front-proxy certificate works" 200 "$C_STATUS"
t_ok "rotation: same adapter process" kill -0 "$ADAPTER_PID"
stop_adapter
t_eq "SIGTERM: exit status 0 (no leak under ASan)" 0 "$?"

t_summary
