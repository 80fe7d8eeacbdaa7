#!/usr/bin/env bash
# test_flags_compat.sh: prometheus-adapter v0.12.0's command line works here unchanged. Every flag it has (its own, klog's through component-base logs, custom-metrics-apiserver's and the generic apiserver's secure serving, delegated authn/authz, audit and feature flags; the list below is written from those sources, independently of src/config/compat.c) is accepted: the implemented ones silently, the others with exactly one "has no effect here" line, a value of the wrong type still failing as in Go's pflag; unknown flags still exit 2. The exact argument lists of the kube-prometheus Deployment (every Go cipher suite name of its --tls-cipher-suites) and of the prometheus-community chart's Deployment (with its leading /adapter) start the adapter against a real Prometheus and the fake kube-apiserver (standing in for kube-apiserver: recorded discovery and objects), with only the cluster paths, the URL and the port pointed at this machine; the served TLS 1.2 cipher suites are exactly the listed ones (openssl s_client). OpenShift's argument list passes --check-config. docs/flags.md's table lists every flag.
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

bin=$(cma_adapter_bin)
CFG=tests/fixtures/rule-corpus/helm-chart-default-rules.yaml

# --- every v0.12.0 flag ----------------------------------------------------------------------------
# Implemented here under the same name (values that --check-config accepts without a backend).
implemented=(
  --prometheus-url=http://127.0.0.1:9 --prometheus-auth-config= --prometheus-auth-incluster=false
  --prometheus-ca-file= --prometheus-client-tls-cert-file= --prometheus-client-tls-key-file=
  --prometheus-token-file= --prometheus-header=X-Scope-OrgID=t --prometheus-verb=POST
  --metrics-relist-interval=1m --metrics-max-age=2m --disable-http2 --v=2 -v=3
  --lister-kubeconfig= --discovery-interval=10m
  --bind-address=127.0.0.1 --secure-port=6443 --cert-dir=/tmp --tls-cert-file= --tls-private-key-file=
  --tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 --tls-min-version=VersionTLS12
  --authentication-kubeconfig= --authentication-token-webhook-cache-ttl=10s
  --authentication-skip-lookup --authentication-tolerate-lookup-failure --client-ca-file=
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group
  --requestheader-extra-headers-prefix=X-Remote-Extra- --requestheader-client-ca-file=
  --requestheader-allowed-names=front-proxy-client --authorization-kubeconfig=
  --authorization-webhook-cache-authorized-ttl=10s --authorization-webhook-cache-unauthorized-ttl=10s
  --authorization-always-allow-paths=/healthz,/readyz,/livez
)
# Accepted without effect: name=sample value of its Go type ("" for a bool given alone).
ignored=(
  vmodule=gc=2 log-flush-frequency=5s log_dir=/tmp log_file=/tmp/x.log log_file_max_size=1800
  logtostderr= alsologtostderr=true add_dir_header=false skip_headers= skip_log_headers=true
  one_output=false stderrthreshold=ERROR log_backtrace_at=main.go:10
  client-qps=5.5 client-burst=10
  tls-sni-cert-key=/tmp/a.crt,/tmp/a.key http2-max-streams-per-connection=1000
  permit-port-sharing= permit-address-sharing=true
  audit-policy-file=/tmp/p.yaml audit-log-path=- audit-log-maxage=7 audit-log-maxbackup=3
  audit-log-maxsize=100 audit-log-format=json audit-log-compress= audit-log-version=audit.k8s.io/v1
  audit-log-mode=blocking audit-log-batch-buffer-size=10000 audit-log-batch-max-size=1
  audit-log-batch-max-wait=5s audit-log-batch-throttle-enable=false audit-log-batch-throttle-qps=10
  audit-log-batch-throttle-burst=15 audit-log-truncate-enabled= audit-log-truncate-max-batch-size=10485760
  audit-log-truncate-max-event-size=102400 audit-webhook-config-file=/tmp/w.yaml
  audit-webhook-initial-backoff=10s audit-webhook-batch-initial-backoff=10s
  audit-webhook-version=audit.k8s.io/v1 audit-webhook-mode=batch audit-webhook-batch-buffer-size=10000
  audit-webhook-batch-max-size=400 audit-webhook-batch-max-wait=30s
  audit-webhook-batch-throttle-enable=true audit-webhook-batch-throttle-qps=10
  audit-webhook-batch-throttle-burst=15 audit-webhook-truncate-enabled=false
  audit-webhook-truncate-max-batch-size=10485760 audit-webhook-truncate-max-event-size=102400
  profiling=false contention-profiling= debug-socket-path=/tmp/debug.sock
  enable-priority-and-fairness=false
)

# run_cli ARGS...: sets RC, OUT, ERR.
run_cli() {
  "$bin" "$@" >"$CMA_TMP/cli.out" 2>"$CMA_TMP/cli.err"
  RC=$?
  OUT=$(cat "$CMA_TMP/cli.out")
  ERR=$(cat "$CMA_TMP/cli.err")
}

run_cli --config="$CFG" --check-config "${implemented[@]}"
t_eq "implemented flags: --check-config exits 0" 0 "$RC"
t_eq "implemented flags: no warning about any of them" 0 "$(grep -c 'has no effect' <<<"$ERR")"
help=$("$bin" --help)
for f in "${implemented[@]}"; do
  name=${f%%=*}
  name=${name#-}
  name=${name#-}
  t_ok "implemented flag --$name is in --help" grep -qE -- "(^|[ ,])--$name( |$)" <<<"$help"
done

markdown=$("$bin" --print-flags-markdown)
for entry in "${ignored[@]}"; do
  name=${entry%%=*}
  value=${entry#*=}
  if [ -n "$value" ]; then
    run_cli --config="$CFG" --check-config "--$name=$value"
  else
    run_cli --config="$CFG" "--$name" --check-config
  fi
  t_eq "--$name: accepted (exit 0)" 0 "$RC"
  t_eq "--$name: exactly one line saying it has no effect here" 1 \
    "$(grep -c "^flag --$name has no effect here (.*); ignoring it$" <<<"$ERR")"
  t_ok "--$name: docs/flags.md's table lists it as accepted without effect" \
    grep -qE "^\| \`--$name\`.*\| accepted, no effect" <<<"$markdown"
  if [ -n "$value" ] && [[ $name != audit-log-path ]] && ! [[ $value == */* || $value == *=* ]] &&
    ! [[ $value =~ ^[A-Za-z] ]]; then
    run_cli --config="$CFG" --check-config "--$name=not-a-number-or-bool"
    t_eq "--$name: a value of the wrong type still fails (exit 2)" 2 "$RC"
  fi
done
# the Go-style single dash and klog's dashed spellings work too (Kubernetes components take them)
run_cli -logtostderr=true --config="$CFG" --log-dir /var/log --check-config
t_eq "-logtostderr and --log-dir: accepted" 0 "$RC"
t_eq "-logtostderr and --log-dir: one line each" 2 "$(grep -c 'has no effect here' <<<"$ERR")"

for f in --no-such-flag --logtostderrr --audit-log-paths=x --profile --kubeconfig=x; do
  run_cli --config="$CFG" --check-config "$f"
  t_eq "unknown flag $f: exit 2" 2 "$RC"
  t_ok "unknown flag $f: says so" grep -q "unknown flag: ${f%%=*}" <<<"$ERR"
done
run_cli --config="$CFG" --check-config --tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA512
t_eq "an unknown cipher suite: exit 2" 2 "$RC"
t_ok "an unknown cipher suite: Kubernetes' wording" grep -q "not supported or doesn't exist" <<<"$ERR"

# --- OpenShift's cluster-monitoring-operator Deployment: the argument list parses ----------------
# openshift/cluster-monitoring-operator@01b9e28cfa0a70c4f8c92b335891366c4ebc21ce
# assets/prometheus-adapter/deployment.yaml (its --prometheus-auth-config kubeconfig is exercised
# by the Prometheus-auth tests; here only the command line)
printf 'apiVersion: v1\nkind: Config\n' >"$CMA_TMP/prometheus-config.yaml"
run_cli --prometheus-auth-config="$CMA_TMP/prometheus-config.yaml" \
  --config=tests/fixtures/rule-corpus/openshift-cmo-configmap.yaml --logtostderr=true \
  --metrics-relist-interval=1m --prometheus-url=https://prometheus-k8s.openshift-monitoring.svc:9091 \
  --secure-port=6443 \
  --tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305 \
  --check-config
t_eq "OpenShift's arguments: --check-config exits 0" 0 "$RC"
t_eq "OpenShift's arguments: one warning, for --logtostderr" \
  "flag --logtostderr has no effect here (logs go to stderr in this adapter's own format; --v sets the verbosity); ignoring it" \
  "$(grep 'has no effect' <<<"$ERR")"

# --- real Deployments start the adapter -------------------------------------------------------------
python3 - "$CMA_TMP/flags.om" <<'EOF'
import sys, time
now = int(time.time())
with open(sys.argv[1], "w") as out:
    out.write("# TYPE http_requests_total counter\n")
    out.writelines('http_requests_total{namespace="ml",pod="bert-0"} %d %d\n' % (10 * i, t)
                   for i, t in enumerate(range(now - 1800, now + 3600, 30)))
    out.write("# EOF\n")
EOF
if ! start_prometheus "$CMA_TMP/flags.om" || ! start_fake_kube; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi

# start_with ARGS...: starts the adapter with exactly ARGS plus what points it at this machine's
# stand-ins (bind address, kubeconfig of the fake kube-apiserver); waits for /healthz. Sets
# ADAPTER_PID, ADAPTER_URL, ADAPTER_CA (from the --cert-dir given) and returns non-zero on failure.
start_with() {
  local port=$1 certdir=$2
  shift 2
  ADAPTER_LOG="$CMA_TMP/adapter.log"
  echo "=== start_adapter $(date +%H:%M:%S) port $port: $bin $*" >>"$ADAPTER_LOG"
  # shellcheck disable=SC2086 # CMA_WRAPPER is a command line on purpose
  _cma_spawn "$ADAPTER_LOG" ${CMA_WRAPPER:-} "$bin" "$@" --bind-address=127.0.0.1 \
    --lister-kubeconfig="$KUBE_KUBECONFIG"
  ADAPTER_PID=$_CMA_SPAWNED
  ADAPTER_URL="https://127.0.0.1:$port"
  ADAPTER_CA="$certdir/apiserver.crt"
  local deadline=$((SECONDS + $(_cma_start_timeout)))
  until [ -s "$ADAPTER_CA" ]; do
    _cma_alive "$ADAPTER_PID" && [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
  WAIT_PID=$ADAPTER_PID wait_http "$ADAPTER_URL/healthz" "$(_cma_start_timeout)" --cacert "$ADAPTER_CA"
}

# handshake CIPHER: TLS 1.2 handshake with the adapter offering only CIPHER (OpenSSL's name).
handshake() {
  openssl s_client -connect "127.0.0.1:${ADAPTER_URL##*:}" -tls1_2 -cipher "$1" </dev/null >/dev/null 2>&1
}

# prometheus-operator/kube-prometheus@cc29fc2bfd3ca9e5646621244bffea6c18750ae4
# manifests/prometheusAdapter-deployment.yaml, container args, in order; /var/run/serving-cert,
# /etc/adapter/config.yaml (its ConfigMap: tests/fixtures/rule-corpus/kube-prometheus-configmap.yaml),
# the Prometheus URL and the port are this machine's.
KP_SUITES=TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,TLS_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_AES_256_GCM_SHA384,TLS_RSA_WITH_AES_128_CBC_SHA,TLS_RSA_WITH_AES_256_CBC_SHA
port=$(free_port)
certdir="$CMA_TMP/kp-serving-cert"
mkdir -p "$certdir"
if start_with "$port" "$certdir" \
  --cert-dir="$certdir" \
  --config=tests/fixtures/rule-corpus/kube-prometheus-configmap.yaml \
  --metrics-relist-interval=1m \
  --prometheus-url="$PROM_URL/" \
  --secure-port="$port" \
  --tls-cipher-suites="$KP_SUITES"; then
  t_pass "kube-prometheus arguments: the adapter starts and answers /healthz"
  t_ok "kube-prometheus arguments: no flag warning" bash -c '! grep -q "has no effect" "$1"' _ "$ADAPTER_LOG"
  adapter_fetch /apis
  t_json "kube-prometheus arguments: metrics.k8s.io is served (resourceRules only)" "$R_BODY" \
    '[.groups[].name] | join(",")' "metrics.k8s.io"
  # the self-signed serving certificate is ECDSA: its listed suites are served, others are not
  for c in ECDHE-ECDSA-AES128-GCM-SHA256 ECDHE-ECDSA-AES256-GCM-SHA384 ECDHE-ECDSA-CHACHA20-POLY1305 \
    ECDHE-ECDSA-AES128-SHA256 ECDHE-ECDSA-AES128-SHA ECDHE-ECDSA-AES256-SHA; do
    t_ok "kube-prometheus arguments: listed suite $c is served" handshake "$c"
  done
  for c in ECDHE-ECDSA-AES256-SHA384 ECDHE-ECDSA-AES128-CCM; do
    t_ok "kube-prometheus arguments: unlisted suite $c is refused" bash -c '! "$@"' _ handshake "$c"
  done
  cma_stop "$ADAPTER_PID" 30
  t_eq "kube-prometheus arguments: exit 0 on SIGTERM" 0 "$?"
else
  t_fail "kube-prometheus arguments: the adapter starts" "$(tail -n 20 "$CMA_TMP/adapter.log")"
fi

# prometheus-community/helm-charts@0333bafeb9b163cac44f7719cd64e39360ab9618
# charts/prometheus-adapter/templates/deployment.yaml with the chart's default values (listenPort
# 6443, logLevel 4, metricsRelistInterval 1m, prometheus.url http://prometheus.default.svc:9090,
# tls.enable false), args in order; /tmp/cert, the config path, the URL and the port are this
# machine's. The config is the chart's default rules (tests/fixtures/rule-corpus/).
port=$(free_port)
certdir="$CMA_TMP/chart-cert"
if start_with "$port" "$certdir" \
  /adapter \
  --secure-port="$port" \
  --cert-dir="$certdir" \
  --logtostderr=true \
  --prometheus-url="$PROM_URL" \
  --metrics-relist-interval=1m \
  --v=4 \
  --config="$CFG"; then
  t_pass "chart arguments: the adapter starts (the leading /adapter is dropped)"
  t_eq "chart arguments: one warning line, for --logtostderr" 1 "$(grep -c 'has no effect here' "$ADAPTER_LOG")"
  if wait_discovery http_requests; then
    adapter_fetch "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/bert-0/http_requests"
    t_eq "chart arguments: a default rule serves a value (200)" 200 "$R_STATUS"
  else
    t_fail "chart arguments: the default rules list http_requests"
  fi
  cma_stop "$ADAPTER_PID" 30
  t_eq "chart arguments: exit 0 on SIGTERM" 0 "$?"
else
  t_fail "chart arguments: the adapter starts" "$(tail -n 20 "$CMA_TMP/adapter.log")"
fi

# every Go cipher suite name at once, and a TLS minimum Kubernetes allows below 1.2
ALL=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256,$KP_SUITES,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,TLS_RSA_WITH_AES_128_CBC_SHA256,TLS_RSA_WITH_3DES_EDE_CBC_SHA,TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA,TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256,TLS_RSA_WITH_RC4_128_SHA,TLS_ECDHE_ECDSA_WITH_RC4_128_SHA,TLS_ECDHE_RSA_WITH_RC4_128_SHA
port=$(free_port)
certdir="$CMA_TMP/all-cert"
if start_with "$port" "$certdir" --cert-dir="$certdir" --config="$CFG" --prometheus-url="$PROM_URL" \
  --secure-port="$port" --tls-cipher-suites="$ALL" --tls-min-version=VersionTLS10; then
  t_pass "every Go cipher suite name: the adapter starts"
  t_eq "every Go cipher suite name: one line per RC4 suite, which is never offered" 3 \
    "$(grep -c '^cipher suite TLS_.*RC4.* has no effect here (RC4 is never offered); ignoring it$' "$ADAPTER_LOG")"
  t_ok "every Go cipher suite name: a listed suite is served" handshake ECDHE-ECDSA-AES128-GCM-SHA256
  t_ok "--tls-min-version=VersionTLS10: a TLS 1.0 client is served" \
    bash -c 'openssl s_client -connect "127.0.0.1:$1" -tls1 -cipher "ECDHE-ECDSA-AES128-SHA@SECLEVEL=0" </dev/null 2>&1 | grep -q "Protocol  *: TLSv1$"' _ "$port"
  cma_stop "$ADAPTER_PID" 30
else
  t_fail "every Go cipher suite name: the adapter starts" "$(tail -n 20 "$CMA_TMP/adapter.log")"
fi

t_ok "no sanitizer report in the adapter logs" \
  bash -c '! grep -Eqs "AddressSanitizer|LeakSanitizer|runtime error" "$1"' _ "$CMA_TMP/adapter.log"

t_summary
