#!/usr/bin/env bash
# test_slowloris.sh: the connection model under slow and malformed clients (tests/lib/slowloris.py, a bounded attacker) against the real adapter over real TLS: (1) 1,000 idle TCP and 200 half-handshaken TLS connections held from 127.0.0.2-127.0.0.13 (100 per address, the per-client limit) while /healthz and an authorized metric request (front-proxy certificate, as kube-aggregator sends it) from 127.0.0.1 answer in under 1 s, the adapter keeping a handful of threads; a 101st connection from one address is closed at accept; the held ones are cut at the TLS handshake deadline; (1b) with more idle connections than --max-connections, new clients take the slots of the oldest idle ones and still answer in under 1 s; (2) a client sending one header line a second is cut at the request header deadline; a garbage request line is answered or closed at once; NUL, control and space bytes in the request target get 400 Status JSON; libmicrohttpd's own 400/414/431/505 answers (docs/errors.md); (3) RSS with 1,000 keep-alive TLS connections under a generous bound (bench/connections.sh measures it); (4) SIGTERM with a request in flight to a slow backend (tests/lib/slow_backend.py): new connections are refused at once, the request completes with "Connection: close", the adapter exits 0 within the bound. The fake kube-apiserver stands in for kube-apiserver (pods, the extension-apiserver-authentication ConfigMap, SubjectAccessReview).
# asan: yes
# cost: high (about a minute alone: scripts/test.sh starts it early)
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

# 1,300 attacker connections, the adapter's own descriptors, the clients': raise the limit for the
# adapter and the attacker (children inherit it).
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"
SLOWLORIS=(python3 "$CMA_LIB/slowloris.py")

PKI="$CMA_TMP/pki"
mkdir -p "$PKI"
if ! { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj "/CN=front-proxy-ca" -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign" -keyout "$PKI/ca.key" -out "$PKI/ca.crt" &&
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=front-proxy-client" -keyout "$PKI/proxy.key" -out "$PKI/proxy.csr" &&
  printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n' >"$PKI/proxy.ext" &&
  openssl x509 -req -in "$PKI/proxy.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 2 -extfile "$PKI/proxy.ext" -out "$PKI/proxy.crt"; } >"$PKI/openssl.log" 2>&1; then
  t_fail "openssl: front-proxy CA and client certificate" "$(tail -n 20 "$PKI/openssl.log")"
  t_summary
  exit 1
fi

gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
kube_control() { curl -s --max-time 10 --cacert "$KUBE_CA" -H "Authorization: Bearer fake-admin" "$@"; }
jq -n --rawfile rh "$PKI/ca.crt" '{"requestheader-client-ca-file": $rh,
  "requestheader-allowed-names": "[\"front-proxy-client\"]",
  "requestheader-username-headers": "[\"X-Remote-User\"]",
  "requestheader-group-headers": "[\"X-Remote-Group\"]",
  "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]"}' |
  kube_control -X POST --data-binary @- "$KUBE_URL/__fake/auth-configmap" >/dev/null
# Everyone while the adapter starts (readiness polls anonymously), then only the HPA's user.
kube_control "$KUBE_URL/__fake/sar-allow?users=*" >/dev/null

BERT="/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert"
HPA_USER=system:serviceaccount:kube-system:horizontal-pod-autoscaler
# as_aggregator PATH: the request kube-aggregator forwards for the HPA controller (front-proxy
# client certificate + X-Remote-* headers), from 127.0.0.1; prints "HTTP_CODE SECONDS".
as_aggregator() {
  curl -s -o "$CMA_TMP/agg.body" -w '%{http_code} %{time_total}\n' --max-time 30 \
    --cacert "$ADAPTER_CA" --cert "$PKI/proxy.crt" --key "$PKI/proxy.key" \
    -H "X-Remote-User: $HPA_USER" -H "X-Remote-Group: system:authenticated" \
    "$ADAPTER_URL$1"
}
probe() { curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 30 --cacert "$ADAPTER_CA" "$ADAPTER_URL$1"; }
# median_ok: "CODE SECONDS" lines on stdin → "CODES UNDER_1S": the codes in order, then "yes" when
# the median time is under 1 s (else "no (median ... s)").
median_ok() {
  local lines codes median
  lines=$(cat)
  codes=$(cut -d' ' -f1 <<<"$lines" | paste -sd,)
  median=$(cut -d' ' -f2 <<<"$lines" | sort -g | awk '{ t[NR] = $1 } END {
    print (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2 }')
  if awk -v m="$median" 'BEGIN { exit !(m != "" && m < 1) }'; then
    echo "$codes yes"
  else
    echo "$codes no (median $median s)"
  fi
}
fds_of() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
threads_of() { awk '/^Threads:/ { print $2 }' "/proc/$1/status"; }

if ! start_adapter config/gpu-dcgm.yaml --max-connections=2000 --max-connections-per-client=100; then
  t_fail "start the adapter"
  t_summary
  exit 1
fi
PORT=${ADAPTER_URL##*:}
t_ok "discovery lists DCGM_FI_DEV_GPU_UTIL" wait_discovery DCGM_FI_DEV_GPU_UTIL
kube_control "$KUBE_URL/__fake/sar-allow?users=$HPA_USER" >/dev/null
t_eq "before the attack: the aggregator's metric request answers 200" 200 "$(as_aggregator "$BERT" | cut -d' ' -f1)"
t_json "before the attack: it carries the bert pods" "$(cat "$CMA_TMP/agg.body")" '.items | length' 3
fds_before=$(fds_of "$ADAPTER_PID")

# --- (1) 1,000 idle + 200 half-handshaken connections held ----------------------------------
ready="$CMA_TMP/hold.ready"
"${SLOWLORIS[@]}" --port "$PORT" --sources 127.0.0.2-127.0.0.13 --per-source 100 --max-seconds 60 \
  hold --idle 1000 --half-tls 200 --hold 20 --ready-file "$ready" >"$CMA_TMP/hold.json" 2>"$CMA_TMP/hold.err" &
hold_pid=$!
deadline=$((SECONDS + 60))
while [ ! -s "$ready" ] && [ "$SECONDS" -lt "$deadline" ] && kill -0 "$hold_pid" 2>/dev/null; do sleep 0.1; done
t_json "attacker: 1,000 idle and 200 half-handshaken connections opened" "$(cat "$ready" 2>/dev/null)" \
  '"\(.idle) \(.half_tls)"' "1000 200"
# a 101st..120th connection from one address: closed at accept (per-client limit 100)
"${SLOWLORIS[@]}" --port "$PORT" --sources 127.0.0.14 --per-source 120 --max-seconds 30 \
  hold --idle 120 --hold 3 --refused-within 1 >"$CMA_TMP/limit.json" 2>&1 &
limit_pid=$!
# The per-client attacker opens its 120 connections (100 kept, 20 refused) and holds them 3 s:
# the most descriptors seen while it runs (a loaded machine opens them slower than 1 s).
fds_held=0
deadline=$((SECONDS + 15))
while [ "$fds_held" -lt $((fds_before + 1300)) ] && [ "$SECONDS" -lt "$deadline" ]; do
  n=$(fds_of "$ADAPTER_PID")
  [ "$n" -le "$fds_held" ] || fds_held=$n
  kill -0 "$limit_pid" 2>/dev/null || break
  sleep 0.1
done
t_ok "adapter: at least 1,300 more descriptors while the attack is held (${fds_before} -> ${fds_held})" \
  test "$fds_held" -ge $((fds_before + 1300))
threads=$(threads_of "$ADAPTER_PID")
t_ok "adapter: a handful of threads, not one per connection ($threads for 1,300 connections)" test "$threads" -le 24
health=$(for _ in 1 2 3 4 5; do probe /healthz; done)
metric=$(for _ in 1 2 3 4 5; do as_aggregator "$BERT"; done)
measured_at=$(date +%s.%N)
cma_log "held: /healthz times (s): $(cut -d' ' -f2 <<<"$health" | paste -sd' '); metric request times (s): $(cut -d' ' -f2 <<<"$metric" | paste -sd' ')"
t_eq "held: /healthz from a new client answers 200, median under 1 s" "200,200,200,200,200 yes" \
  "$(median_ok <<<"$health")"
t_eq "held: the aggregator's metric request answers 200, median under 1 s" "200,200,200,200,200 yes" \
  "$(median_ok <<<"$metric")"
t_json "held: the metric request still carries the bert pods" "$(cat "$CMA_TMP/agg.body")" '.items | length' 3
wait "$limit_pid"
t_json "per-client limit: 100 of 120 connections from 127.0.0.14 held, 20 closed at accept" \
  "$(cat "$CMA_TMP/limit.json")" '"\(.idle.opened) \(.idle.refused) \(.idle.closed_later + .idle.still_open)"' "120 20 100"
wait "$hold_pid"
report=$(cat "$CMA_TMP/hold.json")
first_close=$(jq -r '[.idle.first_close_at, .half_tls.first_close_at] | min' <<<"$report")
t_ok "the measurements ended before the server closed any held connection" \
  awk -v a="$measured_at" -v b="$first_close" 'BEGIN { exit !(a != "" && b != "" && a < b) }'
t_json "held connections: none refused, none closed before the 10 s TLS handshake deadline" "$report" \
  '[.idle.refused, .half_tls.refused, (.idle.first_close_s >= 9.5), (.half_tls.first_close_s >= 9.5)] | map(tostring) | join(" ")' \
  "0 0 true true"
t_json "held connections: all cut by the handshake deadline, by 13 s after they opened" "$report" \
  '"\(.idle.closed_later) \(.half_tls.closed_later) \(.idle.last_close_s <= 13) \(.half_tls.last_close_s <= 13)"' \
  "1000 200 true true"
t_ok "adapter: one log line a second at most for the cuts" wait_adapter_log \
  'https: closed [0-9]+ connection\(s\) past their deadline \(TLS handshake: [0-9]+' 10
t_eq "after the attack: /healthz answers 200" 200 "$(probe /healthz | cut -d' ' -f1)"

# --- (2) slow headers, garbage, invalid targets, oversize requests -------------------------------
drip=$("${SLOWLORIS[@]}" --port "$PORT" --max-seconds 40 drip --interval 1)
t_json "one header line a second: cut 10 s after the handshake (request-header-timeout), not kept alive by the traffic" \
  "$drip" '"\(.closed_after_s >= 9.5 and .closed_after_s <= 12.5) \(.lines_sent >= 9)"' "true true"
# raw DATA: one TLS request from slowloris.py (Python escapes), JSON answer
raw() { "${SLOWLORIS[@]}" --port "$PORT" --max-seconds 40 raw --timeout 30 --data "$1"; }
ans=$(raw 'garbage\r\n\r\n')
t_json "garbage request line: closed at once, without an answer (libmicrohttpd)" "$ans" \
  '"\(.closed) \(.seconds < 3) \(.status)"' "true true "
ans=$(raw 'ga rb age\r\n\r\n')
t_json "garbage request line with spaces: libmicrohttpd's 400 at once" "$ans" \
  '"\(.closed) \(.seconds < 3) \(.status)"' "true true HTTP/1.1 400 Bad Request"
for case in 'NUL:/healthz\x00/../secret' 'NUL in the query:/healthz?a=1\x00b=2' 'control byte:/healthz\x01' \
  'space:/health z' 'DEL:/healthz\x7f'; do
  name=${case%%:*}
  target=${case#*:}
  ans=$(raw "GET $target HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n\\r\\n")
  t_json "$name in the request target: 400 Status JSON" "$ans" \
    '"\(.status) \(.headers["content-type"]) \(.body | fromjson | "\(.kind) \(.code) \(.reason)")"' \
    "HTTP/1.1 400 Bad Request application/json Status 400 BadRequest"
done
ans=$(raw 'GET /healthz?a=%00 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n')
t_json "an escaped %00 in the query is the server's malformed query (400), not a cut path" "$ans" \
  '"\(.status) \(.body | fromjson | .reason)"' "HTTP/1.1 400 Bad Request BadRequest"
for case in '505:HTTP/2.0 request line:GET /healthz HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n' \
  '400:HTTP/0.9 request line:GET /healthz\r\n\r\n' \
  '400:header line without a colon:GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon here\r\n\r\n' \
  '400:malformed Content-Length:GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n'; do
  code=${case%%:*}
  rest=${case#*:}
  ans=$(raw "${rest#*:}")
  t_json "${rest%%:*}: libmicrohttpd's $code at once, no Content-Type, connection closed (docs/errors.md)" "$ans" \
    '"\(.status | split(" ")[1]) \(.headers["content-type"] // "none") \(.closed) \(.seconds < 3)"' "$code none true true"
done
long=$(printf 'a%.0s' $(seq 1 20000))
ans=$(raw "GET /healthz?x=$long HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n\\r\\n")
t_json "20 kB request line: libmicrohttpd's 414, connection closed (its HTML body: docs/errors.md)" "$ans" \
  '"\(.status) \(.closed)"' "HTTP/1.1 414 URI Too Long true"
ans=$(raw "GET /healthz HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nX-Big: $long\\r\\n\\r\\n")
t_json "20 kB header: libmicrohttpd's 431, connection closed" "$ans" \
  '"\(.status) \(.closed)"' "HTTP/1.1 431 Request Header Fields Too Large true"
t_eq "after the slow and malformed clients: /healthz answers 200" 200 "$(probe /healthz | cut -d' ' -f1)"

# --- (3) memory with 1,000 keep-alive TLS connections ------------------------------------------
ready="$CMA_TMP/ka.ready"
"${SLOWLORIS[@]}" --port "$PORT" --sources 127.0.0.2-127.0.0.11 --per-source 100 --max-seconds 120 \
  keepalive --count 1000 --path /healthz --hold 8 --ready-file "$ready" >"$CMA_TMP/ka.json" 2>&1 &
ka_pid=$!
deadline=$((SECONDS + 110))
while [ ! -s "$ready" ] && [ "$SECONDS" -lt "$deadline" ] && kill -0 "$ka_pid" 2>/dev/null; do sleep 0.2; done
rss_kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/$ADAPTER_PID/status")
wait "$ka_pid"
t_json "1,000 keep-alive TLS connections answered and held" "$(cat "$CMA_TMP/ka.json")" \
  '"\(.ok) \(.held) \(.closed_while_held)"' "1000 1000 0"
cma_log "RSS with 1,000 keep-alive TLS connections: $((rss_kb / 1024)) MiB"
if [ -n "${CMA_WRAPPER:-}" ] || grep -q -a '__asan_init' "$(cma_adapter_bin)" 2>/dev/null; then
  t_pass "RSS bound not checked under a wrapper or ASan ($((rss_kb / 1024)) MiB)"
else
  t_ok "RSS with 1,000 keep-alive TLS connections under a generous 64 MiB ($((rss_kb / 1024)) MiB; bench/connections.sh measures it)" \
    test "$rss_kb" -le $((64 * 1024))
fi
stop_adapter
t_eq "adapter exits 0 on SIGTERM" 0 "$?"

# --- (1b) more idle connections than --max-connections ---------------------------------------
if start_adapter config/gpu-dcgm.yaml --max-connections=300; then
  PORT=${ADAPTER_URL##*:}
  kube_control "$KUBE_URL/__fake/sar-allow?users=*" >/dev/null
  t_ok "(1b) discovery" wait_discovery DCGM_FI_DEV_GPU_UTIL
  kube_control "$KUBE_URL/__fake/sar-allow?users=$HPA_USER" >/dev/null
  ready="$CMA_TMP/full.ready"
  "${SLOWLORIS[@]}" --port "$PORT" --sources 127.0.0.20-127.0.0.23 --per-source 100 --max-seconds 30 \
    hold --idle 400 --hold 6 --ready-file "$ready" >"$CMA_TMP/full.json" 2>&1 &
  full_pid=$!
  deadline=$((SECONDS + 30))
  while [ ! -s "$ready" ] && [ "$SECONDS" -lt "$deadline" ] && kill -0 "$full_pid" 2>/dev/null; do sleep 0.1; done
  health=$(for _ in 1 2 3 4 5; do probe /healthz; done)
  metric=$(for _ in 1 2 3 4 5; do as_aggregator "$BERT"; done)
  t_eq "(1b) 400 idle connections at --max-connections=300: /healthz answers 200, median under 1 s" \
    "200,200,200,200,200 yes" "$(median_ok <<<"$health")"
  t_eq "(1b) and the aggregator's metric request answers 200, median under 1 s" \
    "200,200,200,200,200 yes" "$(median_ok <<<"$metric")"
  wait "$full_pid"
  t_json "(1b) the 100 connections over the limit gave their slots at once, the other 300 stayed (less the one a new client took)" \
    "$(cat "$CMA_TMP/full.json")" \
    '"\([.idle.close_times_s[] | select(. < 2)] | length >= 100) \(.idle.still_open >= 290 and .idle.still_open <= 300)"' \
    "true true"
  t_ok "(1b) the adapter logs the evictions" wait_adapter_log \
    'https: at --max-connections: closed [0-9]+ connection\(s\) without a request in progress' 10
  stop_adapter
  t_eq "(1b) adapter exits 0 on SIGTERM" 0 "$?"
else
  t_fail "(1b) start the adapter with --max-connections=300"
fi

# --- (4) SIGTERM with a request in flight ------------------------------------------------------
curl -s -G "$PROM_URL/api/v1/series" --data-urlencode 'match[]=DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}' \
  -d "start=$(($(date +%s) - 300))" >"$CMA_TMP/series.json"
cat >"$CMA_TMP/slow.yaml" <<'EOF'
# The first rule of config/gpu-dcgm.yaml.
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace:
        resource: namespace
      pod:
        resource: pod
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
EOF
kube_control "$KUBE_URL/__fake/sar-allow?users=*" >/dev/null
if start_slow_backend "$CMA_TMP/series.json" --sleep 4 &&
  PROM_URL=$SLOW_URL start_adapter "$CMA_TMP/slow.yaml" --prometheus-timeout=20s; then
  in_flight() { curl -s --max-time 5 "$SLOW_URL/debug/in-flight" | jq -r .in_flight; }
  t_ok "slow backend: discovery" wait_discovery DCGM_FI_DEV_GPU_UTIL
  kube_control "$KUBE_URL/__fake/sar-allow?users=$HPA_USER" >/dev/null
  curl -s -D "$CMA_TMP/inflight.headers" -o "$CMA_TMP/inflight.body" -w '%{http_code}' --max-time 60 \
    --cacert "$ADAPTER_CA" --cert "$PKI/proxy.crt" --key "$PKI/proxy.key" \
    -H "X-Remote-User: $HPA_USER" -H "X-Remote-Group: system:authenticated" \
    "$ADAPTER_URL$BERT" >"$CMA_TMP/inflight.code" &
  req_pid=$!
  deadline=$((SECONDS + 30))
  while [ "$(in_flight)" != 1 ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.05; done
  t_eq "SIGTERM: the request is in flight in the slow backend" 1 "$(in_flight)"
  sent=$(date +%s.%N)
  kill -TERM "$ADAPTER_PID"
  sleep 0.5
  curl -s -o /dev/null --max-time 5 --cacert "$ADAPTER_CA" "$ADAPTER_URL/healthz"
  t_eq "SIGTERM: a new connection is refused at once (curl exit 7)" 7 "$?"
  t_ok "SIGTERM: the adapter is still running for the request in flight" _cma_alive "$ADAPTER_PID"
  pid=$ADAPTER_PID
  stop_adapter 30
  rc=$?
  took=$(awk -v now="$(date +%s.%N)" -v t="$sent" 'BEGIN { printf "%.3f", now - t }')
  wait "$req_pid"
  t_eq "SIGTERM: exit status 0" 0 "$rc"
  t_ok "SIGTERM: exited once the request was answered, within the 4 s backend delay + 5 s ($took s)" \
    awk -v t="$took" 'BEGIN { exit !(t != "" && t <= 9) }'
  t_eq "SIGTERM: the request in flight completed with 200" 200 "$(cat "$CMA_TMP/inflight.code")"
  t_json "SIGTERM: its body is a MetricValueList" "$(cat "$CMA_TMP/inflight.body")" .kind MetricValueList
  t_ok "SIGTERM: its answer closes the connection" grep -qi '^connection: close' "$CMA_TMP/inflight.headers"
  t_ok "SIGTERM: the log says how long requests may take" \
    grep -q "received signal 15, shutting down: no new connections, up to 25000ms" "$ADAPTER_LOG"
  t_ok "SIGTERM: process $pid is gone" test ! -e "/proc/$pid/status"
else
  t_fail "start the slow backend and an adapter against it"
fi

t_summary
