#!/usr/bin/env bash
# test_backend_auth.sh: --prometheus-auth-config and --prometheus-auth-incluster against real TLS gateways (Debian's nginx in front of a real Prometheus, certificates made here with openssl), each checking one credential: a client certificate (ssl_verify_client), basic auth (auth_basic, htpasswd from `openssl passwd -apr1`), a bearer token, and a bearer token plus an X-Scope-OrgID header. A kubeconfig's tls-server-name is honoured (a gateway whose certificate names another host than the URL's: the adapter asks for and checks that name while connecting to the URL's address), and a kubeconfig credential goes with --prometheus-header. The Kubernetes client honours a --lister-kubeconfig's tls-server-name too (a gateway in front of the fake kube-apiserver whose certificate names kube.example.test only: pods and discovery come through it with that SNI and the URL's Host; without tls-server-name the adapter stops at start, or with only the lister behind the gateway keeps running and logs, naming the certificate's host mismatch). Every kubeconfig form is served through its gateway with the values of the generated data (CA file and certificate-authority-data, client certificate/key files and *-data, token and tokenFile, username/password, insecure-skip-tls-verify); a missing or wrong credential gives a Status that says why while the adapter keeps running. In-cluster auth runs the adapter in a private mount namespace whose /var/run/secrets/kubernetes.io/serviceaccount is a bind-mounted temp dir. Broken TLS material (missing, a directory, garbage, a key that does not match) in flags, kubeconfigs and ca.crt stops the adapter at start, naming the flag or kubeconfig field, the path and the reason.
# cost: high (about a minute alone: scripts/test.sh starts it early)
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

# --- certificates, secrets and the gateways -------------------------------------------------------
PKI="$CMA_TMP/pki"
mkdir -p "$PKI"
make_ca "$PKI" server-ca && make_cert "$PKI" gateway server-ca IP:127.0.0.1 &&
  make_cert "$PKI" named-gateway server-ca DNS:prometheus.example.test &&
  make_cert "$PKI" kube-gateway server-ca DNS:kube.example.test &&
  make_ca "$PKI" client-ca && make_cert "$PKI" adapter client-ca &&
  make_ca "$PKI" other-ca && make_cert "$PKI" stranger other-ca || {
  t_fail "openssl: make the certificates"
  t_summary
  exit 1
}
TOKEN=bearer-0123456789abcdef
SA_TOKEN=sa-token-fedcba9876543210
KC_TENANT_TOKEN=kc-tenant-token-13579bdf
USER_NAME=prom-reader
PASSWORD='s3cret: with spaces & $hell chars'
printf '%s:%s\n' "$USER_NAME" "$(openssl passwd -apr1 "$PASSWORD")" >"$PKI/htpasswd"
printf '%s\n' "$TOKEN" >"$PKI/token"
P_MTLS=$(free_port) P_BASIC=$(free_port) P_BEARER=$(free_port) P_TENANT=$(free_port) P_NAMED=$(free_port) P_KUBE=$(free_port)
tls="ssl_certificate $PKI/gateway.crt; ssl_certificate_key $PKI/gateway.key;"
up="proxy_pass $PROM_URL;"
cat >"$CMA_TMP/gateways.conf" <<EOF
map \$http_authorization \$bearer_ok { default 0; "Bearer $TOKEN" 1; }
map "\$http_authorization|\$http_x_scope_orgid" \$tenant_ok { default 0; "Bearer $SA_TOKEN|tenant-a" 1;
  "Bearer $KC_TENANT_TOKEN|tenant-a" 1; }
log_format named '\$server_port \$status "\$ssl_server_name" "\$http_host" "\$http_authorization"';
server { listen 127.0.0.1:$P_MTLS ssl; $tls
  ssl_verify_client on; ssl_client_certificate $PKI/client-ca.crt;
  location / { $up } }
server { listen 127.0.0.1:$P_BASIC ssl; $tls
  auth_basic "prometheus"; auth_basic_user_file $PKI/htpasswd;
  location / { $up } }
server { listen 127.0.0.1:$P_BEARER ssl; $tls
  location / { if (\$bearer_ok = 0) { return 401 "bearer token required\n"; } $up } }
server { listen 127.0.0.1:$P_TENANT ssl; $tls
  location / { if (\$tenant_ok = 0) { return 401 "token and X-Scope-OrgID required\n"; } $up } }
# a certificate for prometheus.example.test only (not 127.0.0.1): for tls-server-name; logs the
# TLS server name the client asked for and the Host header
server { listen 127.0.0.1:$P_NAMED ssl;
  ssl_certificate $PKI/named-gateway.crt; ssl_certificate_key $PKI/named-gateway.key;
  access_log $CMA_TMP/named-access.log named;
  location / { if (\$bearer_ok = 0) { return 401 "bearer token required\n"; } $up } }
# in front of the fake kube-apiserver (tests/lib/fake_kube_apiserver.py: it stands in for
# kube-apiserver, which cannot run here), with a certificate for kube.example.test only (not
# 127.0.0.1): for the kube client's tls-server-name. The fake serves TLS with its own self-signed
# certificate, hence https upstream without checking it; it checks the bearer token itself. Logs
# the TLS server name asked for, the Host header, the token and the request.
log_format kube '\$server_port \$status "\$ssl_server_name" "\$http_host" "\$http_authorization" "\$request"';
server { listen 127.0.0.1:$P_KUBE ssl;
  ssl_certificate $PKI/kube-gateway.crt; ssl_certificate_key $PKI/kube-gateway.key;
  access_log $CMA_TMP/kube-access.log kube;
  location / { proxy_pass $KUBE_URL; proxy_ssl_verify off; } }
EOF
if ! start_nginx "$CMA_TMP/gateways.conf"; then
  t_fail "start nginx"
  t_summary
  exit 1
fi

# The gateways themselves: each refuses without its credential and passes with it.
Q='/api/v1/query?query=up'
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$PKI/server-ca.crt" "$@"; }
t_eq "gateway mTLS: no client certificate: 400" 400 "$(code "https://127.0.0.1:$P_MTLS$Q")"
t_eq "gateway mTLS: a certificate of another CA: 400" 400 \
  "$(code --cert "$PKI/stranger.crt" --key "$PKI/stranger.key" "https://127.0.0.1:$P_MTLS$Q")"
t_eq "gateway mTLS: the adapter's certificate: 200" 200 \
  "$(code --cert "$PKI/adapter.crt" --key "$PKI/adapter.key" "https://127.0.0.1:$P_MTLS$Q")"
t_eq "gateway basic: no credentials: 401" 401 "$(code "https://127.0.0.1:$P_BASIC$Q")"
t_eq "gateway basic: the password: 200" 200 "$(code -u "$USER_NAME:$PASSWORD" "https://127.0.0.1:$P_BASIC$Q")"
t_eq "gateway bearer: no token: 401" 401 "$(code "https://127.0.0.1:$P_BEARER$Q")"
t_eq "gateway bearer: the token: 200" 200 "$(code -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$P_BEARER$Q")"
t_eq "gateway tenant: token without the header: 401" 401 \
  "$(code -H "Authorization: Bearer $SA_TOKEN" "https://127.0.0.1:$P_TENANT$Q")"
t_eq "gateway tenant: token and header: 200" 200 \
  "$(code -H "Authorization: Bearer $SA_TOKEN" -H 'X-Scope-OrgID: tenant-a' "https://127.0.0.1:$P_TENANT$Q")"
t_eq "gateway tenant: the kubeconfig's token without the header: 401" 401 \
  "$(code -H "Authorization: Bearer $KC_TENANT_TOKEN" "https://127.0.0.1:$P_TENANT$Q")"
NAMED=prometheus.example.test
t_eq "gateway named: its certificate does not name 127.0.0.1 (curl: exit 60)" 60 \
  "$(code -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$P_NAMED$Q" >/dev/null; echo $?)"
t_eq "gateway named: asked as $NAMED, connected to 127.0.0.1: 200" 200 \
  "$(code -H "Authorization: Bearer $TOKEN" --connect-to "$NAMED:$P_NAMED:127.0.0.1:$P_NAMED" \
    "https://$NAMED:$P_NAMED$Q")"
KUBE_NAMED=kube.example.test
t_eq "gateway kube: its certificate does not name 127.0.0.1 (curl: exit 60)" 60 \
  "$(code "https://127.0.0.1:$P_KUBE/version" >/dev/null; echo $?)"
t_eq "gateway kube: asked as $KUBE_NAMED, connected to 127.0.0.1: the fake's pods, 200" 200 \
  "$(code -H "Authorization: Bearer fake-admin" --connect-to "$KUBE_NAMED:$P_KUBE:127.0.0.1:$P_KUBE" \
    "https://$KUBE_NAMED:$P_KUBE/api/v1/namespaces/ml/pods")"

# --- kubeconfigs ------------------------------------------------------------------------------------
b64() { base64 -w0 <"$1"; }
# kubeconfig FILE CLUSTER_LINES USER_LINES: a kubeconfig whose current context has one cluster (its
# server is not Prometheus: the adapter must not use it) and one user (no credential when
# USER_LINES is empty); lines are indented by the caller (4 spaces).
kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: prom
  cluster:
    server: https://kube.invalid:6443
$2
users:
- name: reader
  user:
${3:-    username: null}
contexts:
- name: prom
  context: {cluster: prom, user: reader}
current-context: prom
EOF
}
KC="$CMA_TMP/kc"
mkdir -p "$KC"
CA_FILE="    certificate-authority: $PKI/server-ca.crt"
CA_DATA="    certificate-authority-data: $(b64 "$PKI/server-ca.crt")"
kubeconfig "$KC/mtls-files.yaml" "$CA_FILE" "    client-certificate: $PKI/adapter.crt
    client-key: $PKI/adapter.key"
kubeconfig "$KC/mtls-data.yaml" "$CA_DATA" "    client-certificate-data: $(b64 "$PKI/adapter.crt")
    client-key-data: $(b64 "$PKI/adapter.key")"
kubeconfig "$KC/token.yaml" "$CA_DATA" "    token: $TOKEN"
# tokenFile relative to the kubeconfig's directory, as client-go resolves it
cp "$PKI/token" "$KC/token-file"
kubeconfig "$KC/token-file.yaml" "$CA_FILE" "    tokenFile: token-file"
kubeconfig "$KC/basic.yaml" "$CA_FILE" "    username: $USER_NAME
    password: '$PASSWORD'"
kubeconfig "$KC/insecure.yaml" "    insecure-skip-tls-verify: true" "    token: $TOKEN"
kubeconfig "$KC/no-cert.yaml" "$CA_FILE" ""
kubeconfig "$KC/wrong-token.yaml" "$CA_FILE" "    token: not-the-token"
kubeconfig "$KC/wrong-password.yaml" "$CA_FILE" "    username: $USER_NAME
    password: wrong"
kubeconfig "$KC/wrong-ca.yaml" "    certificate-authority: $PKI/other-ca.crt" "    token: $TOKEN"
kubeconfig "$KC/stranger.yaml" "$CA_FILE" "    client-certificate: $PKI/stranger.crt
    client-key: $PKI/stranger.key"
kubeconfig "$KC/tenant.yaml" "$CA_FILE" "    token: $KC_TENANT_TOKEN"
kubeconfig "$KC/named.yaml" "$CA_FILE
    tls-server-name: $NAMED" "    token: $TOKEN"

# served NAME PORT FLAGS...: the adapter through gateway PORT serves the per-pod values.
served() {
  local name=$1 port=$2 r
  shift 2
  if PROM_URL="https://127.0.0.1:$port" start_adapter config/gpu-dcgm.yaml "$@"; then
    t_ok "$name: discovery through the gateway" wait_discovery DCGM_FI_DEV_GPU_UTIL
    r=$(adapter_get "$BERT")
    t_eq "$name: per-pod GPU util equals the data" "$want_bert" "$(item_values "$r")"
    stop_adapter
    t_eq "$name: adapter exits 0" 0 "$?"
  else
    t_fail "$name: start the adapter"
  fi
}

# refused NAME PORT MESSAGE_ERE FLAGS...: the adapter starts, the gateway refuses it; discovery logs
# the gateway's answer, a metric request gets a Status (503, code = HTTP status) whose message says
# why, /healthz stays ok and the adapter keeps running.
refused() {
  local name=$1 port=$2 re=$3
  shift 3
  if PROM_URL="https://127.0.0.1:$port" start_adapter config/gpu-dcgm.yaml "$@"; then
    t_ok "$name: the failed relist is logged with the reason" \
      wait_adapter_log "unable to update list of all metrics: .*$re" 60
    adapter_fetch "$BERT"
    t_json "$name: a metric request gets a 503 Status" "$R_BODY" \
      '"\(.kind) \(.status) \(.code) \(.reason)"' "Status Failure 503 ServiceUnavailable"
    t_eq "$name: ... whose code is the HTTP status" "$R_STATUS" "$(jq -r .code <<<"$R_BODY")"
    t_json "$name: ... and whose message says why" "$R_BODY" ".message | test(\"$re\")" true
    adapter_fetch /healthz
    t_eq "$name: /healthz still ok" "200 ok" "$R_STATUS $R_BODY"
    t_ok "$name: the adapter is still running" kill -0 "$ADAPTER_PID"
    stop_adapter
  else
    t_fail "$name: start the adapter"
  fi
}

served "kubeconfig CA file + client certificate/key files" "$P_MTLS" --prometheus-auth-config="$KC/mtls-files.yaml"
t_ok "... nginx saw the adapter's client certificate" \
  grep -q "^$P_MTLS 200 .*CN=adapter" "$NGINX_DIR/access.log"
served "kubeconfig certificate-authority-data + client-*-data" "$P_MTLS" --prometheus-auth-config="$KC/mtls-data.yaml"
served "kubeconfig token" "$P_BEARER" --prometheus-auth-config="$KC/token.yaml"
served "kubeconfig tokenFile (relative path)" "$P_BEARER" --prometheus-auth-config="$KC/token-file.yaml"
served "kubeconfig username/password" "$P_BASIC" --prometheus-auth-config="$KC/basic.yaml"
served "kubeconfig insecure-skip-tls-verify" "$P_BEARER" --prometheus-auth-config="$KC/insecure.yaml"
# Precedence: the explicit flag wins over the kubeconfig's setting of the same kind.
printf '%s\n' "$TOKEN" >"$CMA_TMP/flag-token"
served "--prometheus-token-file wins over the kubeconfig's token" "$P_BEARER" \
  --prometheus-auth-config="$KC/wrong-token.yaml" --prometheus-token-file="$CMA_TMP/flag-token"
served "--prometheus-ca-file wins over the kubeconfig's CA" "$P_BEARER" \
  --prometheus-auth-config="$KC/wrong-ca.yaml" --prometheus-ca-file="$PKI/server-ca.crt"
# The kubeconfig's credential together with --prometheus-header (Mimir/Cortex tenants).
served "kubeconfig token with --prometheus-header" "$P_TENANT" \
  --prometheus-auth-config="$KC/tenant.yaml" --prometheus-header=X-Scope-OrgID=tenant-a
t_ok "... nginx saw the kubeconfig's token and the tenant header" \
  grep -q "^$P_TENANT 200 \"Bearer $KC_TENANT_TOKEN\" \"tenant-a\"" "$NGINX_DIR/access.log"
# tls-server-name: the connection goes to the URL's 127.0.0.1, the certificate asked for and
# checked is $NAMED's, and the Host header stays the URL's (as client-go's ServerName).
served "kubeconfig tls-server-name" "$P_NAMED" --prometheus-auth-config="$KC/named.yaml"
t_ok "... nginx was asked for $NAMED (SNI), with Host 127.0.0.1:$P_NAMED and the token" \
  grep -q "^$P_NAMED 200 \"$NAMED\" \"127.0.0.1:$P_NAMED\" \"Bearer $TOKEN\"" "$CMA_TMP/named-access.log"

refused "no client certificate" "$P_MTLS" "HTTP 400" --prometheus-auth-config="$KC/no-cert.yaml"
refused "a client certificate of another CA" "$P_MTLS" "HTTP 400" --prometheus-auth-config="$KC/stranger.yaml"
refused "wrong token" "$P_BEARER" "HTTP 401.*check credentials" --prometheus-auth-config="$KC/wrong-token.yaml"
refused "wrong password" "$P_BASIC" "HTTP 401.*check credentials" --prometheus-auth-config="$KC/wrong-password.yaml"
refused "a CA that did not sign the gateway" "$P_BEARER" "SSL certificate problem" \
  --prometheus-auth-config="$KC/wrong-ca.yaml"
refused "without tls-server-name, a certificate for $NAMED only" "$P_NAMED" \
  "no alternative certificate subject name matches" --prometheus-auth-config="$KC/token.yaml"

# --- the kube client's tls-server-name ----------------------------------------------------------------
# The fake's kubeconfig (its token) pointed at the kube gateway with the gateway's CA; only
# kube-named.yaml has tls-server-name. As --lister-kubeconfig (after start_adapter's own, so it wins)
# it serves every kube client: pods, kube API discovery, the authentication ConfigMap lookup and
# SubjectAccessReviews, unless --authentication-/--authorization-kubeconfig say otherwise.
sed -e "s|server: .*|server: https://127.0.0.1:$P_KUBE|" \
  -e "s|certificate-authority: .*|certificate-authority: $PKI/server-ca.crt|" "$KUBE_KUBECONFIG" \
  >"$KC/kube-plain.yaml"
sed "s|^\( *\)certificate-authority: .*|&\n\1tls-server-name: $KUBE_NAMED|" "$KC/kube-plain.yaml" \
  >"$KC/kube-named.yaml"
t_eq "kube kubeconfigs: the gateway's server and CA, the fake's token, tls-server-name in one only" \
  "3 0 1" "$(grep -Ec "server: https://127\.0\.0\.1:$P_KUBE$|certificate-authority: $PKI/server-ca\.crt$|token: fake-admin$" \
    "$KC/kube-plain.yaml") $(grep -c tls-server-name "$KC/kube-plain.yaml") $(grep -c "^    tls-server-name: $KUBE_NAMED$" "$KC/kube-named.yaml")"
KUBE_GW_LOG="$CMA_TMP/kube-access.log"
MISMATCH_RE="no alternative certificate subject name matches target host name '127\.0\.0\.1'"
# With tls-server-name: the connection goes to the URL's 127.0.0.1, the certificate asked for and
# checked is $KUBE_NAMED's, and the Host header stays the URL's (as client-go's ServerName).
: >"$KUBE_GW_LOG"
if start_adapter config/gpu-dcgm.yaml --lister-kubeconfig="$KC/kube-named.yaml"; then
  t_ok "kube tls-server-name: discovery (kube API discovery first) through the gateway" \
    wait_discovery DCGM_FI_DEV_GPU_UTIL
  adapter_fetch "$BERT"
  t_eq "kube tls-server-name: a by-selector request (pods of app=bert from the fake): 200" 200 "$R_STATUS"
  t_eq "kube tls-server-name: ... its per-pod GPU util equals the data" "$want_bert" "$(item_values "$R_BODY")"
  stop_adapter
  t_eq "kube tls-server-name: adapter exits 0" 0 "$?"
else
  t_fail "kube tls-server-name: start the adapter"
fi
# kube_gw STATUS_ERE: the start of a gateway log line with SNI $KUBE_NAMED, the URL's Host and the token.
kube_gw() { printf '^%s %s "%s" "127\\.0\\.0\\.1:%s" "Bearer fake-admin" ' "$P_KUBE" "$1" "$KUBE_NAMED" "$P_KUBE"; }
t_ok "... nginx saw a pod LIST (200) asked for $KUBE_NAMED (SNI), with Host 127.0.0.1:$P_KUBE and the token" \
  grep -Eq "$(kube_gw 200)\"GET /api/v1/(namespaces/ml/)?pods\?" "$KUBE_GW_LOG"
t_eq "... and kube API discovery (GET /api and /apis, 200) the same way" "/api /apis" \
  "$(grep -Eo "$(kube_gw 200)\"GET /apis? HTTP" "$KUBE_GW_LOG" | grep -Eo '/apis?' | sort -u | xargs)"
t_eq "... and every one of the adapter's $(wc -l <"$KUBE_GW_LOG") requests the same way" "" \
  "$(grep -Ev "$(kube_gw '[0-9]+')" "$KUBE_GW_LOG")"

# Without tls-server-name, every kube client through the gateway: the delegated authentication's
# ConfigMap lookup fails, so the adapter stops before serving, naming the server and the mismatch;
# the handshake is refused, so no request reaches the gateway.
: >"$KUBE_GW_LOG"
out=$(timeout 60 "$(cma_adapter_bin)" --config=config/gpu-dcgm.yaml --prometheus-url="$PROM_URL" \
  --lister-kubeconfig="$KC/kube-plain.yaml" --cert-dir="$CMA_TMP/kube-plain-certs" \
  --bind-address=127.0.0.1 --secure-port="$(free_port)" 2>&1)
t_eq "kube without tls-server-name: the adapter exits 1 at start (an error, no crash)" 1 "$?"
if grep -Eq "delegated authentication: cannot reach the Kubernetes API at https://127\.0\.0\.1:$P_KUBE: SSL: $MISMATCH_RE" <<<"$out" &&
  ! grep -q "serving securely" <<<"$out"; then
  t_pass "kube without tls-server-name: says the certificate does not name 127.0.0.1, before serving"
else
  t_fail "kube without tls-server-name: says the certificate does not name 127.0.0.1, before serving" \
    "output: ${out:0:1500}"
fi
t_eq "kube without tls-server-name: no request reached the gateway" 0 "$(wc -l <"$KUBE_GW_LOG")"
# Without tls-server-name, only the lister through the gateway (authentication and authorization
# straight to the fake): the adapter serves and keeps running, pods and kube API discovery fail
# and are retried, their log lines naming the mismatch; metric requests get a 503 Status.
if start_adapter config/gpu-dcgm.yaml --lister-kubeconfig="$KC/kube-plain.yaml" \
  --authentication-kubeconfig="$KUBE_KUBECONFIG" --authorization-kubeconfig="$KUBE_KUBECONFIG"; then
  t_ok "kube lister without tls-server-name: the failed kube API discovery is logged with the reason" \
    wait_adapter_log "kube API discovery failed: cannot reach the Kubernetes API at https://127\.0\.0\.1:$P_KUBE: SSL: $MISMATCH_RE"
  t_ok "kube lister without tls-server-name: ... and the failed pod LIST" \
    wait_adapter_log "cache of pods: LIST failed .*https://127\.0\.0\.1:$P_KUBE: SSL: $MISMATCH_RE"
  adapter_fetch "$BERT"
  t_json "kube lister without tls-server-name: a metric request gets a 503 Status" "$R_BODY" \
    '"\(.kind) \(.status) \(.code) \(.reason)"' "Status Failure 503 ServiceUnavailable"
  t_eq "kube lister without tls-server-name: ... whose code is the HTTP status" "$R_STATUS" \
    "$(jq -r .code <<<"$R_BODY")"
  adapter_fetch /healthz
  t_eq "kube lister without tls-server-name: /healthz still ok" "200 ok" "$R_STATUS $R_BODY"
  t_ok "kube lister without tls-server-name: the adapter is still running" kill -0 "$ADAPTER_PID"
  stop_adapter
  t_eq "kube lister without tls-server-name: adapter exits 0" 0 "$?"
else
  t_fail "kube lister without tls-server-name: start the adapter"
fi

# --- in-cluster: the pod's service-account directory -------------------------------------------------
SA="$CMA_TMP/serviceaccount"
mkdir -p "$SA"
printf '%s\n' "$SA_TOKEN" >"$CMA_TMP/sa-token"
projected_write "$SA" 2026_01_01_00_00_00.1 token="$CMA_TMP/sa-token" ca.crt="$PKI/server-ca.crt"
# The wrapper (tests/lib/in-pod.sh): a private mount namespace in which
# /var/run/secrets/kubernetes.io/serviceaccount is $SA_MOUNT. Nothing in the adapter knows.
IN_POD_SH="sh $CMA_ROOT/tests/lib/in-pod.sh"
IN_POD="$IN_POD_SH ${CMA_WRAPPER:-}"
export SA_MOUNT=$SA
if [ "$(id -u)" != 0 ] || ! unshare -m --propagation private true 2>/dev/null; then
  t_fail "in-cluster: needs root and unshare -m (a private mount namespace)"
else
  CMA_WRAPPER=$IN_POD served "in-cluster token + ca.crt with --prometheus-header" "$P_TENANT" \
    --prometheus-auth-incluster --prometheus-header=X-Scope-OrgID=tenant-a
  t_ok "... nginx saw the service-account token and the tenant" \
    grep -q "^$P_TENANT 200 \"Bearer $SA_TOKEN\" \"tenant-a\"" "$NGINX_DIR/access.log"
  CMA_WRAPPER=$IN_POD refused "in-cluster without the tenant header" "$P_TENANT" \
    "HTTP 401.*check credentials" --prometheus-auth-incluster
fi

# --- fail fast on broken TLS material -----------------------------------------------------------------
printf 'not a certificate\n' >"$CMA_TMP/garbage.pem"
mkdir -p "$CMA_TMP/a-directory"
# fails_fast NAME EXPECTED_ERE FLAGS...: the adapter exits non-zero before serving (within 30 s)
# and its error names what EXPECTED_ERE says (flag or kubeconfig field, path, reason).
fails_fast() {
  local name=$1 re=$2 out rc port
  shift 2
  port=$(free_port)
  # shellcheck disable=SC2086 # the wrapper is a command line
  out=$(timeout 30 ${FF_WRAPPER:-} "$(cma_adapter_bin)" --config=config/gpu-dcgm.yaml \
    --prometheus-url="https://127.0.0.1:$P_BEARER" --lister-kubeconfig="$KUBE_KUBECONFIG" \
    --cert-dir="$CMA_TMP/ff-certs" --bind-address=127.0.0.1 --secure-port="$port" "$@" 2>&1)
  rc=$?
  t_ok "$name: exits at start (exit $rc)" test "$rc" != 0 -a "$rc" != 124
  if grep -Eq -- "$re" <<<"$out" && ! grep -q "serving securely" <<<"$out"; then
    t_pass "$name: says $re, before serving"
  else
    t_fail "$name: says $re, before serving" "output: ${out:0:1500}"
  fi
}
fails_fast "--prometheus-ca-file missing" \
  "prometheus client: --prometheus-ca-file $CMA_TMP/none.pem: cannot read it: No such file or directory" \
  --prometheus-ca-file="$CMA_TMP/none.pem"
fails_fast "--prometheus-ca-file a directory" \
  "--prometheus-ca-file $CMA_TMP/a-directory: cannot read it: Is a directory" \
  --prometheus-ca-file="$CMA_TMP/a-directory"
fails_fast "--prometheus-ca-file garbage" \
  "--prometheus-ca-file $CMA_TMP/garbage.pem: no PEM certificate in it" \
  --prometheus-ca-file="$CMA_TMP/garbage.pem"
fails_fast "--prometheus-client-tls-cert-file garbage" \
  "--prometheus-client-tls-cert-file $CMA_TMP/garbage.pem and --prometheus-client-tls-key-file $PKI/adapter.key: certificate: no PEM certificate" \
  --prometheus-client-tls-cert-file="$CMA_TMP/garbage.pem" --prometheus-client-tls-key-file="$PKI/adapter.key"
fails_fast "--prometheus-client-tls-key-file garbage" \
  "--prometheus-client-tls-key-file $CMA_TMP/garbage.pem: key: no unencrypted PEM private key" \
  --prometheus-client-tls-cert-file="$PKI/adapter.crt" --prometheus-client-tls-key-file="$CMA_TMP/garbage.pem"
fails_fast "a key that does not match its certificate" \
  "--prometheus-client-tls-key-file $PKI/stranger.key: the private key does not match the certificate" \
  --prometheus-client-tls-cert-file="$PKI/adapter.crt" --prometheus-client-tls-key-file="$PKI/stranger.key"
kubeconfig "$KC/bad-ca-data.yaml" "    certificate-authority-data: $(b64 "$CMA_TMP/garbage.pem")" "    token: x"
fails_fast "--prometheus-auth-config certificate-authority-data garbage" \
  "--prometheus-auth-config kubeconfig $KC/bad-ca-data.yaml certificate-authority-data: no PEM certificate" \
  --prometheus-auth-config="$KC/bad-ca-data.yaml"
kubeconfig "$KC/bad-pair.yaml" "$CA_FILE" "    client-certificate: $PKI/adapter.crt
    client-key: $PKI/stranger.key"
fails_fast "--prometheus-auth-config client-key not matching client-certificate" \
  "--prometheus-auth-config kubeconfig $KC/bad-pair.yaml client-key $PKI/stranger.key: the private key does not match" \
  --prometheus-auth-config="$KC/bad-pair.yaml"
kubeconfig "$KC/missing-key.yaml" "$CA_FILE" "    client-certificate: $PKI/adapter.crt
    client-key: missing.key"
fails_fast "--prometheus-auth-config client-key missing" \
  "kubeconfig $KC/missing-key.yaml client-key $KC/missing.key: cannot read it: No such file" \
  --prometheus-auth-config="$KC/missing-key.yaml"
fails_fast "--prometheus-auth-config with --prometheus-auth-incluster" \
  "may not use both in-cluster auth and an explicit kubeconfig" \
  --prometheus-auth-config="$KC/token.yaml" --prometheus-auth-incluster
# The kube clients' kubeconfigs.
sed "s|certificate-authority: .*|certificate-authority: $CMA_TMP/garbage.pem|" "$KUBE_KUBECONFIG" >"$KC/kube-bad-ca.yaml"
fails_fast "--lister-kubeconfig certificate-authority garbage" \
  "kubernetes client: kubeconfig $KC/kube-bad-ca.yaml certificate-authority $CMA_TMP/garbage.pem: no PEM certificate" \
  --prometheus-token-file="$CMA_TMP/flag-token" --lister-kubeconfig="$KC/kube-bad-ca.yaml"
fails_fast "--authentication-kubeconfig certificate-authority garbage" \
  "kubeconfig $KC/kube-bad-ca.yaml certificate-authority $CMA_TMP/garbage.pem: no PEM certificate" \
  --prometheus-token-file="$CMA_TMP/flag-token" --authentication-kubeconfig="$KC/kube-bad-ca.yaml"
fails_fast "--authorization-kubeconfig certificate-authority garbage" \
  "kubeconfig $KC/kube-bad-ca.yaml certificate-authority $CMA_TMP/garbage.pem: no PEM certificate" \
  --prometheus-token-file="$CMA_TMP/flag-token" --authorization-kubeconfig="$KC/kube-bad-ca.yaml"
if [ "$(id -u)" = 0 ]; then
  BAD_SA="$CMA_TMP/bad-serviceaccount"
  mkdir -p "$BAD_SA"
  cp "$CMA_TMP/sa-token" "$BAD_SA/token"
  cp "$CMA_TMP/garbage.pem" "$BAD_SA/ca.crt"
  SA_MOUNT=$BAD_SA FF_WRAPPER="$IN_POD_SH" fails_fast "in-cluster ca.crt garbage" \
    "--prometheus-auth-incluster in-cluster service account ca.crt /var/run/secrets/kubernetes.io/serviceaccount/ca.crt: no PEM certificate" \
    --prometheus-auth-incluster
  SA_MOUNT=$BAD_SA FF_WRAPPER="env KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=1 $IN_POD_SH" \
    fails_fast "the kube client's in-cluster ca.crt garbage" \
    "kubernetes client: in-cluster service account ca.crt /var/run/secrets/kubernetes.io/serviceaccount/ca.crt: no PEM certificate" \
    --prometheus-token-file="$CMA_TMP/flag-token" --lister-kubeconfig=
fi

t_summary
