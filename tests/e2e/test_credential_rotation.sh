#!/usr/bin/env bash
# test_credential_rotation.sh: every credential file rotated under traffic, without a restart and without one failed request. Two adapters behind Debian's nginx (TLS gateways in front of a real Prometheus, certificates made here with openssl) answer a client loop that requests a per-pod metric from both, continuously. Rotated in turn, each the way it is in a cluster: the kubeconfig's bearer tokenFile (plain rewrite), its client certificate and key (a projected volume: atomic swap of the `..data` symlink), its CA bundle (the gateway's certificate re-issued by a new CA; bundle rewritten in place), the basic-auth password file (projected volume), and the kube client's tokenFile (plain rewrite; the fake kube-apiserver stands in for kube-apiserver's token check). Two more adapters: C reads --prometheus-token-file (plain rewrite) and --prometheus-ca-file with --prometheus-client-tls-cert-file/--prometheus-client-tls-key-file (one projected volume moved to a new client CA's certificate and a new server CA), D uses --prometheus-auth-incluster in a pod-like mount namespace (tests/lib/in-pod.sh) whose service-account token is rotated as the kubelet does. E reaches the fake kube-apiserver through gateway K (nginx requiring a client certificate), its --lister-kubeconfig naming client-certificate, client-key and certificate-authority files (projected volumes), rotated to client-ca-2's certificate and then to server-ca-2 while the by-selector requests make it LIST pods (the fake refuses watch); gateway K's access log shows the new certificate's subject after the switch. Each time the gateway first accepts the old and the new credential, the file is replaced, then the gateway (`nginx -s reload`) or the fake accepts only the new one: zero failed requests over the whole loop, and requests after each switch succeed, which only the re-read credential allows.
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
BERT="/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert"
want_bert=$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod '.labels.namespace == "ml" and (.labels.pod // "" | startswith("bert-"))')

PKI="$CMA_TMP/pki"
R="$CMA_TMP/rotating" # what the adapters read
mkdir -p "$PKI" "$R/client" "$R/pw" "$R/flag-tls" "$R/sa"
make_ca "$PKI" server-ca-1 && make_cert "$PKI" gateway-1 server-ca-1 IP:127.0.0.1 &&
  make_ca "$PKI" server-ca-2 && make_cert "$PKI" gateway-2 server-ca-2 IP:127.0.0.1 &&
  make_ca "$PKI" client-ca-1 && make_cert "$PKI" client-1 client-ca-1 &&
  make_ca "$PKI" client-ca-2 && make_cert "$PKI" client-2 client-ca-2 &&
  make_cert "$PKI" kube-client-1 client-ca-1 && make_cert "$PKI" kube-client-2 client-ca-2 || {
  t_fail "openssl: make the certificates"
  t_summary
  exit 1
}
USER_NAME=prom-reader
printf 'password-one\n' >"$PKI/password-1"
printf 'password-two\n' >"$PKI/password-2"
for n in 1 2; do
  printf '%s:%s\n' "$USER_NAME" "$(openssl passwd -apr1 "password-$([ $n = 1 ] && echo one || echo two)")" >"$PKI/htpasswd-$n"
done
basic() { printf 'Basic %s' "$(printf '%s:%s' "$USER_NAME" "$1" | base64 -w0)"; }

# What the adapters read at the start.
printf 'token-one\n' >"$R/token"
cat "$PKI/server-ca-1.crt" >"$R/ca-bundle.crt"
projected_write "$R/client" 2026_01_01_00_00_00.1 tls.crt="$PKI/client-1.crt" tls.key="$PKI/client-1.key"
projected_write "$R/pw" 2026_01_01_00_00_00.1 password="$PKI/password-1"
printf 'kube-token-one\n' >"$R/kube-token"
printf 'c-token-one\n' >"$R/flag-token"
projected_write "$R/flag-tls" 2026_01_01_00_00_00.1 ca.crt="$PKI/server-ca-1.crt" \
  tls.crt="$PKI/client-1.crt" tls.key="$PKI/client-1.key"
printf 'sa-token-one\n' >"$PKI/sa-token-1"
printf 'sa-token-two\n' >"$PKI/sa-token-2"
cat "$PKI/server-ca-1.crt" "$PKI/server-ca-2.crt" >"$PKI/server-cas.crt"
projected_write "$R/sa" 2026_01_01_00_00_00.1 token="$PKI/sa-token-1" ca.crt="$PKI/server-ca-1.crt"
projected_write "$R/kube-client" 2026_01_01_00_00_00.1 tls.crt="$PKI/kube-client-1.crt" \
  tls.key="$PKI/kube-client-1.key"
projected_write "$R/kube-ca" 2026_01_01_00_00_00.1 ca.crt="$PKI/server-ca-1.crt"

# --- the gateways: A and C check client certificate + bearer token, B basic auth, D a bearer token,
# K (in front of the fake kube-apiserver) a client certificate, forwarding with the admin token ---
P_A=$(free_port) P_B=$(free_port) P_C=$(free_port) P_D=$(free_port) P_K=$(free_port)
TOKENS="token-one" CLIENT_CAS="$PKI/client-ca-1.crt" SERVER=gateway-1 BASIC="htpasswd $PKI/htpasswd-1"
C_TOKENS="c-token-one" C_CLIENT_CAS="$PKI/client-ca-1.crt" C_SERVER=gateway-1 D_TOKENS="sa-token-one"
K_CLIENT_CAS="$PKI/client-ca-1.crt" K_SERVER=gateway-1
KUBE_ADMIN=fake-admin # the test's own token for the test controls and gateway K, never the adapter's
write_gateways() {
  local t maps="" c_maps="" d_maps="" b
  cat $CLIENT_CAS >"$CMA_TMP/client-cas.crt"
  cat $C_CLIENT_CAS >"$CMA_TMP/c-client-cas.crt"
  cat $K_CLIENT_CAS >"$CMA_TMP/k-client-cas.crt"
  for t in $TOKENS; do maps+="\"Bearer $t\" 1; "; done
  for t in $C_TOKENS; do c_maps+="\"Bearer $t\" 1; "; done
  for t in $D_TOKENS; do d_maps+="\"Bearer $t\" 1; "; done
  if [[ $BASIC == htpasswd* ]]; then
    b="auth_basic \"prometheus\"; auth_basic_user_file ${BASIC#htpasswd };"
  else # during a rotation: either password
    b="if (\$basic_ok = 0) { return 401; }"
  fi
  cat >"$CMA_TMP/gateways.conf" <<EOF
map \$http_authorization \$bearer_ok { default 0; $maps}
map \$http_authorization \$c_bearer_ok { default 0; $c_maps}
map \$http_authorization \$d_bearer_ok { default 0; $d_maps}
map \$http_authorization \$basic_ok { default 0; "$(basic password-one)" 1; "$(basic password-two)" 1; }
server { listen 127.0.0.1:$P_A ssl;
  ssl_certificate $PKI/$SERVER.crt; ssl_certificate_key $PKI/$SERVER.key;
  ssl_verify_client on; ssl_client_certificate $CMA_TMP/client-cas.crt;
  location / { if (\$bearer_ok = 0) { return 401 "bearer token required\n"; } proxy_pass $PROM_URL; } }
server { listen 127.0.0.1:$P_B ssl;
  ssl_certificate $PKI/gateway-1.crt; ssl_certificate_key $PKI/gateway-1.key;
  location / { $b proxy_pass $PROM_URL; } }
server { listen 127.0.0.1:$P_C ssl;
  ssl_certificate $PKI/$C_SERVER.crt; ssl_certificate_key $PKI/$C_SERVER.key;
  ssl_verify_client on; ssl_client_certificate $CMA_TMP/c-client-cas.crt;
  location / { if (\$c_bearer_ok = 0) { return 401 "bearer token required\n"; } proxy_pass $PROM_URL; } }
server { listen 127.0.0.1:$P_D ssl;
  ssl_certificate $PKI/gateway-1.crt; ssl_certificate_key $PKI/gateway-1.key;
  location / { if (\$d_bearer_ok = 0) { return 401 "bearer token required\n"; } proxy_pass $PROM_URL; } }
server { listen 127.0.0.1:$P_K ssl;
  ssl_certificate $PKI/$K_SERVER.crt; ssl_certificate_key $PKI/$K_SERVER.key;
  ssl_verify_client on; ssl_client_certificate $CMA_TMP/k-client-cas.crt;
  location / { proxy_set_header Authorization "Bearer $KUBE_ADMIN"; proxy_pass $KUBE_URL; } }
EOF
}
write_gateways
if ! start_nginx "$CMA_TMP/gateways.conf"; then
  t_fail "start nginx"
  t_summary
  exit 1
fi
gateway() { # VAR=VALUE...: change the gateways and reload nginx (a failed reload fails the test)
  local kv
  for kv in "$@"; do printf -v "${kv%%=*}" '%s' "${kv#*=}"; done
  write_gateways
  reload_nginx || t_fail "nginx reload with $*"
}
kube_tokens() { # T1,T2: what the fake kube-apiserver accepts from now on
  curl -s -o /dev/null -w '%{http_code}' --cacert "$KUBE_CA" -H "Authorization: Bearer $KUBE_ADMIN" \
    "$KUBE_URL/__fake/tokens?accept=$1,fake-admin"
}
t_eq "fake kube-apiserver: accept kube-token-one" 200 "$(kube_tokens kube-token-one)"

# --- the adapters ------------------------------------------------------------------------------------
cat >"$CMA_TMP/prom.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gateway
  cluster: {server: "https://kube.invalid:6443", certificate-authority: $R/ca-bundle.crt}
users:
- name: reader
  user: {tokenFile: $R/token, client-certificate: $R/client/tls.crt, client-key: $R/client/tls.key}
contexts:
- name: gateway
  context: {cluster: gateway, user: reader}
current-context: gateway
EOF
sed "s|^    token: fake-admin$|    tokenFile: $R/kube-token|" "$KUBE_KUBECONFIG" >"$CMA_TMP/kube.kubeconfig"
t_ok "the kube kubeconfig uses the rotating tokenFile" grep -q "tokenFile: $R/kube-token" "$CMA_TMP/kube.kubeconfig"
KUBE_KUBECONFIG="$CMA_TMP/kube.kubeconfig" PROM_URL="https://127.0.0.1:$P_A" start_adapter config/gpu-dcgm.yaml \
  --prometheus-auth-config="$CMA_TMP/prom.kubeconfig" --discovery-interval=1s \
  --authorization-webhook-cache-authorized-ttl=1s || {
  t_fail "start adapter A"
  t_summary
  exit 1
}
A_URL=$ADAPTER_URL A_PID=$ADAPTER_PID
t_ok "adapter A: discovery through gateway A" wait_discovery DCGM_FI_DEV_GPU_UTIL
PROM_URL="https://127.0.0.1:$P_B" start_adapter config/gpu-dcgm.yaml --prometheus-ca-file="$PKI/server-ca-1.crt" \
  --prometheus-basic-auth-username="$USER_NAME" --prometheus-basic-auth-password-file="$R/pw/password" || {
  t_fail "start adapter B"
  t_summary
  exit 1
}
B_URL=$ADAPTER_URL B_PID=$ADAPTER_PID
t_ok "adapter B: discovery through gateway B" wait_discovery DCGM_FI_DEV_GPU_UTIL
# C: the flags' token file, CA file and client certificate/key (the last three in one projected
# volume, as a cert-manager Secret with ca.crt, tls.crt and tls.key).
PROM_URL="https://127.0.0.1:$P_C" start_adapter config/gpu-dcgm.yaml \
  --prometheus-token-file="$R/flag-token" --prometheus-ca-file="$R/flag-tls/ca.crt" \
  --prometheus-client-tls-cert-file="$R/flag-tls/tls.crt" \
  --prometheus-client-tls-key-file="$R/flag-tls/tls.key" || {
  t_fail "start adapter C"
  t_summary
  exit 1
}
C_URL=$ADAPTER_URL C_PID=$ADAPTER_PID
t_ok "adapter C: discovery through gateway C" wait_discovery DCGM_FI_DEV_GPU_UTIL
# D: --prometheus-auth-incluster in a pod's mount namespace whose service-account directory is
# $R/sa (tests/lib/in-pod.sh), the token rotated as the kubelet does (projected volume).
D_URL="" D_PID=""
export SA_MOUNT="$R/sa"
if [ "$(id -u)" != 0 ] || ! unshare -m --propagation private true 2>/dev/null; then
  t_fail "adapter D (in-cluster): needs root and unshare -m (a private mount namespace)"
elif CMA_WRAPPER="sh $CMA_ROOT/tests/lib/in-pod.sh ${CMA_WRAPPER:-}" PROM_URL="https://127.0.0.1:$P_D" \
  start_adapter config/gpu-dcgm.yaml --prometheus-auth-incluster; then
  D_URL=$ADAPTER_URL D_PID=$ADAPTER_PID
  t_ok "adapter D: discovery through gateway D" wait_discovery DCGM_FI_DEV_GPU_UTIL
else
  t_fail "start adapter D (in-cluster)"
fi
# E: the kube client through gateway K, with client-certificate, client-key and
# certificate-authority files in its --lister-kubeconfig (two projected volumes).
cat >"$CMA_TMP/kube-front.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gateway-k
  cluster: {server: "https://127.0.0.1:$P_K", certificate-authority: $R/kube-ca/ca.crt}
users:
- name: lister
  user: {client-certificate: $R/kube-client/tls.crt, client-key: $R/kube-client/tls.key}
contexts:
- name: gateway-k
  context: {cluster: gateway-k, user: lister}
current-context: gateway-k
EOF
KUBE_KUBECONFIG="$CMA_TMP/kube-front.kubeconfig" start_adapter config/gpu-dcgm.yaml || {
  t_fail "start adapter E"
  t_summary
  exit 1
}
E_URL=$ADAPTER_URL E_PID=$ADAPTER_PID
t_ok "adapter E: discovery with the kube API through gateway K" wait_discovery DCGM_FI_DEV_GPU_UTIL

# --- the client loop: both adapters, continuously, until told to stop --------------------------------
LOOP_LOG="$CMA_TMP/loop.log"
: >"$LOOP_LOG"
(
  while [ ! -e "$CMA_TMP/stop-loop" ]; do
    for a in "A $A_URL" "B $B_URL" "C $C_URL" ${D_URL:+"D $D_URL"} "E $E_URL"; do
      code=$(curl -s -o "$CMA_TMP/loop.body" -w '%{http_code}' --max-time 30 --cacert "$ADAPTER_CA" "${a#* }$BERT")
      values=$(jq -r '.items[] | "\(.describedObject.name) \(.value)"' "$CMA_TMP/loop.body" 2>/dev/null | sort | tr '\n' ';')
      echo "${a%% *} $code $values @$EPOCHREALTIME" >>"$LOOP_LOG"
      # the first failed answer of each adapter, printed if the verdict fails
      [ "$code" = 200 ] || [ -e "$CMA_TMP/first-fail-${a%% *}" ] ||
        cp "$CMA_TMP/loop.body" "$CMA_TMP/first-fail-${a%% *}"
    done
    sleep 0.05
  done
) &
LOOP_PID=$!
mark() { echo "MARK $1" >>"$LOOP_LOG"; }
settle() { sleep "${1:-2}"; }
# after_mark NAME ADAPTER: 200s of ADAPTER after MARK NAME (and before the next mark).
after_mark() {
  awk -v m="MARK $1" -v a="$2" '$0 == m { on = 1; next } /^MARK/ { on = 0 } on && $1 == a && $2 == 200 { n++ } END { print n + 0 }' "$LOOP_LOG"
}
# Gateway K's access log: k_lines counts its lines, k_after LINE prints gateway K's after line LINE.
k_lines() { wc -l <"$NGINX_DIR/access.log"; }
k_after() { tail -n "+$(($1 + 1))" "$NGINX_DIR/access.log" | grep "^$P_K "; }
K_NEW="\"CN=kube-client-2\"\$"                 # E's kube requests with the new certificate
K_OK_NEW="^$P_K 2[0-9][0-9] .*$K_NEW"           # ... that succeeded
# k_new LINE N: gateway K answered at least N kube requests with the new certificate after LINE.
k_new() { [ "$(k_after "$1" | grep -c "$K_OK_NEW")" -ge "$2" ]; }
# k_switched NAME LINE: E answered 3 times after MARK NAME and gateway K 3 kube requests after LINE.
k_switched() { [ "$(after_mark "$1" E)" -ge 3 ] && k_new "$2" 3; }
# await CMD...: runs CMD until it succeeds, for 60 s at most (false if it never does).
await() {
  local deadline=$((SECONDS + 60))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}
# served_after NAME ADAPTER...: every ADAPTER answered at least 3 loop requests after MARK NAME
# (the verdict below checks the same; waiting for it, not for a fixed time, keeps a loaded machine
# from failing the test: the loop's pace falls with the load).
served_after() {
  local a
  for a in "${@:2}"; do [ "$(after_mark "$1" "$a")" -ge 3 ] || return 1; done
}
settle

# 1. The bearer token files (A: the kubeconfig's tokenFile, C: --prometheus-token-file), rewritten
#    in place.
gateway TOKENS="token-one token-two" C_TOKENS="c-token-one c-token-two"
printf 'token-two\n' >"$R/token"
printf 'c-token-two\n' >"$R/flag-token"
settle
gateway TOKENS="token-two" C_TOKENS="c-token-two"
mark token
settle
await served_after token A C
# 2. Client certificate and key: a projected volume's atomic swap. For C the whole Secret moves to
#    the new CAs' material: the client certificate of client-ca-2 and a CA bundle of both server
#    CAs (the gateway still shows gateway-1's certificate). E's kube client certificate and key
#    move to client-ca-2's; gateway K drops client-ca-1 once it has seen the new certificate.
t_ok "gateway K saw E's kube-client-1 certificate first" \
  grep -q "^$P_K 200 .*\"CN=kube-client-1\"$" "$NGINX_DIR/access.log"
gateway CLIENT_CAS="$PKI/client-ca-1.crt $PKI/client-ca-2.crt" \
  C_CLIENT_CAS="$PKI/client-ca-1.crt $PKI/client-ca-2.crt" \
  K_CLIENT_CAS="$PKI/client-ca-1.crt $PKI/client-ca-2.crt"
projected_write "$R/client" 2026_01_01_01_00_00.2 tls.crt="$PKI/client-2.crt" tls.key="$PKI/client-2.key"
projected_write "$R/flag-tls" 2026_01_01_01_00_00.2 ca.crt="$PKI/server-cas.crt" \
  tls.crt="$PKI/client-2.crt" tls.key="$PKI/client-2.key"
k_line=$(k_lines)
projected_write "$R/kube-client" 2026_01_01_01_00_00.2 tls.crt="$PKI/kube-client-2.crt" \
  tls.key="$PKI/kube-client-2.key"
settle
t_ok "adapter E: the kube client presents kube-client-2 before gateway K requires it" \
  await k_new "$k_line" 1
gateway CLIENT_CAS="$PKI/client-ca-2.crt" K_CLIENT_CAS="$PKI/client-ca-2.crt"
K_CERT_LINE=$(k_lines)
mark client-certificate
settle
await served_after client-certificate A E
await k_switched client-certificate "$K_CERT_LINE"
# 3. The CA bundle: the gateway's certificate re-issued by a new CA; the bundle rewritten in place
#    (both CAs while the gateway switches, then the new one only).
#    C: gateway C switches to gateway-2's certificate and client-ca-2 only, then the Secret drops
#    server-ca-1. E: its CA file (projected) gets both server CAs, gateway K switches to
#    gateway-2's certificate once E made kube requests since, then the file drops server-ca-1.
cat "$PKI/server-ca-1.crt" "$PKI/server-ca-2.crt" >"$R/ca-bundle.crt"
k_line=$(k_lines)
projected_write "$R/kube-ca" 2026_01_01_02_00_00.2 ca.crt="$PKI/server-cas.crt"
settle
t_ok "adapter E: kube requests after its CA file got server-ca-2" \
  await k_new "$k_line" 2
gateway SERVER=gateway-2 C_SERVER=gateway-2 C_CLIENT_CAS="$PKI/client-ca-2.crt" K_SERVER=gateway-2
K_CA_LINE=$(k_lines)
cat "$PKI/server-ca-2.crt" >"$R/ca-bundle.crt"
projected_write "$R/flag-tls" 2026_01_01_02_00_00.3 ca.crt="$PKI/server-ca-2.crt" \
  tls.crt="$PKI/client-2.crt" tls.key="$PKI/client-2.key"
projected_write "$R/kube-ca" 2026_01_01_03_00_00.3 ca.crt="$PKI/server-ca-2.crt"
settle 1
mark ca
settle
await served_after ca A C E
await k_switched ca "$K_CA_LINE"
# 4. The basic-auth password file: a projected volume's atomic swap.
gateway BASIC=either
projected_write "$R/pw" 2026_01_01_01_00_00.2 password="$PKI/password-2"
settle
gateway BASIC="htpasswd $PKI/htpasswd-2"
mark password
settle
await served_after password B
# 5. The kube client's tokenFile, rewritten in place; for D the in-cluster service-account token,
#    a projected volume's atomic swap (the kubelet's rotation).
t_eq "fake kube-apiserver: accept both kube tokens" 200 "$(kube_tokens kube-token-one,kube-token-two)"
gateway D_TOKENS="sa-token-one sa-token-two"
printf 'kube-token-two\n' >"$R/kube-token"
projected_write "$R/sa" 2026_01_01_01_00_00.2 token="$PKI/sa-token-2" ca.crt="$PKI/server-ca-1.crt"
settle
KUBE_LOG_LINES=$(wc -l <"$KUBE_REQUEST_LOG")
t_eq "fake kube-apiserver: accept only kube-token-two" 200 "$(kube_tokens kube-token-two)"
gateway D_TOKENS="sa-token-two"
mark kube-token
settle 3
await served_after kube-token A D

touch "$CMA_TMP/stop-loop"
wait "$LOOP_PID"

# --- verdict --------------------------------------------------------------------------------------------
total=$(grep -c -v '^MARK' "$LOOP_LOG")
failed=$(grep -v '^MARK' "$LOOP_LOG" | grep -c -v '^[A-E] 200 ')
t_ok "the loop made requests all along ($total)" test "$total" -ge 60
t_eq "zero failed requests over the whole loop" 0 "$failed"
if [ "$failed" != 0 ]; then
  grep -v '^MARK' "$LOOP_LOG" | grep -v '^[A-E] 200 ' | cut -d' ' -f1-2 | sort | uniq -c | head -5
  # when the failures happened (between which marks) and what the first ones said
  grep -n -v '^[A-E] 200 ' "$LOOP_LOG" | head -n 40 | sed 's/^/     loop: /'
  for f in "$CMA_TMP"/first-fail-*; do
    [ -e "$f" ] && echo "     first failed answer of ${f##*-}: $(head -c 400 "$f")"
  done
fi
want_line="$(tr '\n' ';' <<<"$want_bert")"
t_eq "every answer carries the data's values" 0 \
  "$(grep -v '^MARK' "$LOOP_LOG" | grep -c -v -F " 200 $want_line")"
for a in A B C D E; do
  t_ok "adapter $a was in the loop" grep -q "^$a 200 " "$LOOP_LOG"
done
for step in token:A token:C client-certificate:A client-certificate:E ca:A ca:C ca:E password:B \
  kube-token:A kube-token:D; do
  n=$(after_mark "${step%%:*}" "${step#*:}")
  t_ok "after the ${step%%:*} switch adapter ${step#*:} still answers ($n requests ok)" test "$n" -ge 3
done
t_ok "gateway A saw token-two with the client-2 certificate, answered 200" \
  grep -q "^$P_A 200 \"Bearer token-two\" \"-\" \".*CN=client-2\"" "$NGINX_DIR/access.log"
t_ok "gateway C saw c-token-two with the client-2 certificate, answered 200" \
  grep -q "^$P_C 200 \"Bearer c-token-two\" \"-\" \".*CN=client-2\"" "$NGINX_DIR/access.log"
for sw in "client-certificate $K_CERT_LINE" "ca $K_CA_LINE"; do
  n=$(k_after "${sw#* }" | grep -c "$K_OK_NEW")
  t_ok "after the ${sw% *} switch gateway K answered E's kube-client-2 certificate ($n requests)" \
    test "$n" -ge 3
  t_eq "after the ${sw% *} switch gateway K saw no other certificate from E" 0 \
    "$(k_after "${sw#* }" | grep -c -v "$K_NEW")"
done
t_ok "gateway D saw sa-token-two, answered 200" \
  grep -q "^$P_D 200 \"Bearer sa-token-two\"" "$NGINX_DIR/access.log"
t_ok "gateway B saw password-two, answered 200" \
  grep -qF "$P_B 200 \"$(basic password-two)\"" "$NGINX_DIR/access.log"
t_ok "the kube client sent kube-token-two after the switch, answered 2xx" \
  bash -c "tail -n +$((KUBE_LOG_LINES + 1)) '$KUBE_REQUEST_LOG' | jq -e -s 'map(select(.headers.Authorization == \"Bearer kube-token-two\" and .status < 300)) | length > 0'"
t_eq "the kube client was never refused" 0 \
  "$(jq -s 'map(select(.status == 401)) | length' "$KUBE_REQUEST_LOG")"
adapter_log_since_start >/dev/null # (all adapters log to one file)
t_eq "no relist failed during the rotations" 0 "$(grep -c 'unable to update list of all metrics' "$ADAPTER_LOG")"
t_ok "all five adapters still run" kill -0 "$A_PID" "$B_PID" "$C_PID" "${D_PID:-no-adapter-D}" "$E_PID"

t_summary
