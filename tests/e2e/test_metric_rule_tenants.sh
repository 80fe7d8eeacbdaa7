#!/usr/bin/env bash
# test_metric_rule_tenants.sh: metricRules.tenantFromNamespace (issue 23, part 3: a backend's
# tenant header derived from the namespace), with real components: Debian's nginx as a Mimir-style
# authenticating gateway (a bearer token required, then routing by X-Scope-OrgID: tenant shop to one
# real Prometheus, tenants web and platform to another, any other tenant or none refused with 401)
# in front of two real Prometheus servers that hold the same metric names for both namespaces with
# different values (each tenant's own data, and decoys of the other namespace that a query sent as
# the wrong tenant would return); the fake kube-apiserver serving MetricRules (--metric-rules).
# The backend `mimir` has the configured header X-Scope-OrgID: platform and metricRules
# {allowed: true, tenantFromNamespace: true}. Checks: the gateway refuses a call without the token
# or with an unknown tenant, and gives each tenant its own data; shop's and web's MetricRules on
# mimir (a custom metric each, and an external one for shop) are discovered and each answers with
# its own tenant's values (never the decoys); the config file's rule on mimir answers with the
# configured tenant's values; repeated requests within the query cache's TTL keep each tenant's
# own answer; explain names the tenant of a MetricRule's query; nginx's access log shows every call
# of the adapter answered 200, every series listing and query of a MetricRule sent with its own
# namespace as tenant (and restricted to that namespace), every call of the config's rule with the
# configured tenant, and series listings and queries of all three tenants.
# asan: yes
# shellcheck disable=SC2119 # stop_adapter is called without its optional timeout
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

# ---- the data: each tenant's Prometheus holds its namespace's values and decoys of the other ----
# gen_om FILE SHOP_BASE WEB_BASE JOBS_BASE: queue_depth of shop (3, 5) and web (7, 11) plus the
# base, and jobs_waiting of shop (2) and web (4) plus JOBS_BASE.
gen_om() {
  python3 - "$@" <<'EOF'
import sys, time
path, shop, web, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
now = int(time.time())
families = {
    "queue_depth": [({"namespace": "shop", "pod": "orders-0"}, 3 + shop),
                    ({"namespace": "shop", "pod": "orders-1"}, 5 + shop),
                    ({"namespace": "web", "pod": "front-0"}, 7 + web),
                    ({"namespace": "web", "pod": "front-1"}, 11 + web)],
    "jobs_waiting": [({"namespace": "shop", "pod": "orders-0"}, 2 + jobs),
                     ({"namespace": "web", "pod": "front-0"}, 4 + jobs)],
}
with open(path, "w") as out:
    for name, series in families.items():
        out.write("# TYPE %s gauge\n" % name)
        for labels, value in series:
            text = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
            for ts in range(now - 120, now + 3600, 60):
                out.write("%s{%s} %d %d\n" % (name, text, value, ts))
    out.write("# EOF\n")
EOF
}
# tenant shop: shop's true values, web's as decoys (+1000), jobs_waiting as decoys (+2000)
gen_om "$CMA_TMP/shop.om" 0 1000 2000
# tenants web and platform: web's true values and jobs_waiting's, shop's as decoys (+1000)
gen_om "$CMA_TMP/web.om" 1000 0 0
PODS="$CMA_TMP/pods.json"
cat >"$PODS" <<'EOF'
[{"namespace": "shop", "name": "orders-0", "labels": {"app": "orders"}, "phase": "Running"},
 {"namespace": "shop", "name": "orders-1", "labels": {"app": "orders"}, "phase": "Running"},
 {"namespace": "web", "name": "front-0", "labels": {"app": "front"}, "phase": "Running"},
 {"namespace": "web", "name": "front-1", "labels": {"app": "front"}, "phase": "Running"}]
EOF
if ! start_prometheus "$CMA_TMP/shop.om"; then
  t_fail "start tenant shop's Prometheus"
  t_summary
  exit 1
fi
PROM_SHOP=$PROM_URL
if ! start_prometheus "$CMA_TMP/web.om" ||
  ! start_fake_kube "$PODS" --metric-rules deploy/components/metric-rules/crd.yaml; then
  t_fail "start tenant web's Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
PROM_WEB=$PROM_URL

# ---- the gateway: a bearer token, then the tenant picks the Prometheus ---------------------------
TOKEN=mimir-reader-5f0c2a9e
printf '%s\n' "$TOKEN" >"$CMA_TMP/token"
GW_PORT=$(free_port)
ACCESS="$CMA_TMP/tenants-access.log"
cat >"$CMA_TMP/gateway.conf" <<EOF
map \$http_authorization \$token_ok { default 0; "Bearer $TOKEN" 1; }
map \$http_x_scope_orgid \$tenant_upstream { default "";
  shop "${PROM_SHOP#http://}"; web "${PROM_WEB#http://}"; platform "${PROM_WEB#http://}"; }
log_format tenants '\$status "\$http_x_scope_orgid" "\$request_uri" "\$request_body"';
server {
  listen 127.0.0.1:$GW_PORT;
  access_log $ACCESS tenants;
  location / {
    if (\$token_ok = 0) { return 401 "bearer token required\n"; }
    if (\$tenant_upstream = "") { return 401 "no org id or unknown tenant\n"; }
    proxy_pass http://\$tenant_upstream;
  }
}
EOF
if ! start_nginx "$CMA_TMP/gateway.conf"; then
  t_fail "start nginx"
  t_summary
  exit 1
fi
GW="http://127.0.0.1:$GW_PORT"
# gw_values TENANT: "pod value" lines of queue_depth{namespace="shop"} asked through the gateway
gw_values() {
  curl -s --max-time 10 -H "Authorization: Bearer $TOKEN" -H "X-Scope-OrgID: $1" -G \
    "$GW/api/v1/query" --data-urlencode 'query=queue_depth{namespace="shop"}' |
    jq -r '.data.result[] | "\(.metric.pod) \(.value[1])"' | sort | tr '\n' ' '
}
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@"; }
t_eq "gateway: no token: 401" 401 "$(code -H 'X-Scope-OrgID: shop' "$GW/api/v1/query?query=up")"
t_eq "gateway: token, no tenant: 401" 401 \
  "$(code -H "Authorization: Bearer $TOKEN" "$GW/api/v1/query?query=up")"
t_eq "gateway: token, unknown tenant billing: 401" 401 \
  "$(code -H "Authorization: Bearer $TOKEN" -H 'X-Scope-OrgID: billing' "$GW/api/v1/query?query=up")"
t_eq "gateway: tenant shop sees shop's true values" "orders-0 3 orders-1 5 " "$(gw_values shop)"
t_eq "gateway: tenant web sees only decoys of shop" "orders-0 1003 orders-1 1005 " "$(gw_values web)"
# only the adapter's calls from here on
GW_LINES_BEFORE=$(wc -l <"$ACCESS")

# ---- the adapter: the config's rule and the MetricRules on backend mimir -------------------------
POD_RES='{overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}'
CONFIG="$CMA_TMP/config.yaml"
cat >"$CONFIG" <<EOF
rules:
- seriesQuery: 'jobs_waiting{namespace!="",pod!=""}'
  backend: mimir
  resources: $POD_RES
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
backends:
- name: mimir
  url: $GW
  bearerTokenFile: $CMA_TMP/token
  headers: {X-Scope-OrgID: platform}
  metricRules: {allowed: true, tenantFromNamespace: true}
EOF
SPEC_QUEUE=$(jq -n '{rules: [{seriesQuery: "queue_depth{pod!=\"\"}", backend: "mimir",
  resources: {overrides: {namespace: {resource: "namespace"}, pod: {resource: "pod"}}},
  name: {matches: "^queue_depth$", as: "team_queue"},
  metricsQuery: "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"}]}')
SPEC_EXT=$(jq -n '{externalRules: [{seriesQuery: "queue_depth", backend: "mimir",
  resources: {overrides: {namespace: {resource: "namespace"}}},
  name: {matches: "^queue_depth$", as: "team_queue_total"},
  metricsQuery: "sum(<<.Series>>{<<.LabelMatchers>>})"}]}')

G=/apis/custom.metrics.k8s.io/v1beta2
E=/apis/external.metrics.k8s.io/v1beta1

unset PROM_URL # the flags' backend: tenant shop's Prometheus directly (no rule uses it)
if ! start_adapter "$CONFIG" --prometheus-url="$PROM_SHOP" --enable-metric-rules --enable-explain \
  --metrics-cache-ttl=30s; then
  t_fail "start the adapter"
  t_summary
  exit 1
fi
mr_apply shop queue "$SPEC_QUEUE"
mr_apply web queue "$SPEC_QUEUE"
mr_apply shop total "$SPEC_EXT"
t_ok "team_queue listed" wait_discovery team_queue custom.metrics.k8s.io/v1beta2
t_ok "team_queue_total listed" wait_discovery team_queue_total external.metrics.k8s.io/v1beta1
t_ok "the config's jobs_waiting listed" wait_discovery jobs_waiting custom.metrics.k8s.io/v1beta2

SHOP=$'orders-0 3\norders-1 5'
WEB=$'front-0 7\nfront-1 11'
t_ok "shop's MetricRule: tenant shop's values (not 1003, 1005)" \
  wait_metric_values "$G/namespaces/shop/pods/*/team_queue" "$SHOP"
t_ok "web's MetricRule: tenant web's values (not 1007, 1011)" \
  wait_metric_values "$G/namespaces/web/pods/*/team_queue" "$WEB"
body=$(adapter_curl "$E/namespaces/shop/team_queue_total")
t_eq "shop's external metric: tenant shop's sum (not 2008)" "200 8" \
  "$(last_status) $(jq -r '.items[0].value' <<<"$body")"
t_eq "the config's rule: the configured tenant platform's values (not 2002)" "orders-0 2" \
  "$(metric_values "$G/namespaces/shop/pods/*/jobs_waiting")"
t_eq "the config's rule in web: platform's values (not 2004)" "front-0 4" \
  "$(metric_values "$G/namespaces/web/pods/*/jobs_waiting")"
# within the cache's TTL (30 s): each namespace still gets its own tenant's answer
mixed=""
for _ in 1 2 3; do
  mixed+="$(metric_values "$G/namespaces/shop/pods/*/team_queue" | tr '\n' ' ')|"
  mixed+="$(metric_values "$G/namespaces/web/pods/*/team_queue" | tr '\n' ' ')|"
done
t_eq "repeated requests: each tenant's own answer every time" \
  "$(printf 'orders-0 3 orders-1 5 |front-0 7 front-1 11 |%.0s' 1 2 3)" "$mixed"
explain=$(adapter_curl "$G/namespaces/web/pods/*/team_queue?explain=true")
t_ok "explain names the MetricRule query's tenant" grep -q "backend: mimir (tenant web)" <<<"$explain"

# ---- what the gateway saw ------------------------------------------------------------------------
tail -n +"$((GW_LINES_BEFORE + 1))" "$ACCESS" >"$CMA_TMP/adapter-access.log"
REPORT=$(python3 - "$CMA_TMP/adapter-access.log" <<'EOF'
import re, sys
from urllib.parse import parse_qs, urlsplit
bad, seen = [], set()
for line in open(sys.argv[1]):
    m = re.match(r'^(\d+) "(.*)" "(.*)" "(.*)"$', line.rstrip("\n"))
    if not m:
        bad.append("unparsed: " + line.strip())
        continue
    status, tenant, uri, body = m.groups()
    u = urlsplit(uri)
    form = parse_qs(u.query)
    if body not in ("", "-"):
        for k, v in parse_qs(body.replace("\\x22", '"')).items():
            form.setdefault(k, []).extend(v)
    kind = u.path.rsplit("/", 1)[-1]
    text = " ".join(form.get("query", []) + form.get("match[]", []))
    if status != "200":
        bad.append("status %s: %s" % (status, line.strip()))
    if "jobs_waiting" in text:
        want = "platform"
    elif "queue_depth" in text:
        own = set(re.findall(r'namespace="([^"]*)"', text))
        want = own.pop() if len(own) == 1 else "one namespace, got %s" % sorted(own)
    else:
        bad.append("unexpected call: " + line.strip())
        continue
    if tenant != want:
        bad.append("tenant %r, want %r: %s %s" % (tenant, want, kind, text))
    seen.add("%s:%s" % (kind, tenant))
print("bad=%d" % len(bad))
for b in bad[:5]:
    print("  " + b)
print("seen=" + " ".join(sorted(seen)))
EOF
)
t_eq "every call of the adapter: 200, each MetricRule's with its namespace as tenant, the config's with platform" \
  "bad=0" "$(head -n 1 <<<"$REPORT")" || printf '%s\n' "$REPORT"
t_eq "series listings and queries of every tenant went through the gateway" \
  "seen=query:platform query:shop query:web series:platform series:shop series:web" \
  "$(tail -n 1 <<<"$REPORT")"

stop_adapter
t_eq "adapter exits 0" 0 "$?"
t_summary
