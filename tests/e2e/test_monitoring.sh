#!/usr/bin/env bash
# test_monitoring.sh: the adapter as a monitored platform component (issue 24, parts 1-3):
#  1. Alerting rules: `promtool check rules` on the plain rule file, the chart's PrometheusRule and
#     the kustomize component; `promtool test rules` (tests/alerts/); every alert has a severity, a
#     summary, a description and a runbook_url whose anchor is a heading of docs/operations.md, and
#     is tested firing and silent; the three copies hold the same groups (the chart's APIService list
#     follows the groups the release registers, its runbook base follows prometheusRule.runbookBaseURL).
#  2. ServiceMonitor, PodMonitor, PrometheusRule from the chart (several TLS modes, both token
#     sources) and the kustomize components are valid against the Prometheus Operator's own CRD
#     schemas (../shared/fixtures/crds, validated strictly as kube-apiserver would); wrong values are
#     refused with a message naming them.
#  3. A real Prometheus scrapes the running adapter exactly as the rendered ServiceMonitor says
#     (scheme, path, TLS, bearer token, the job relabeling), and the same for the PodMonitor; with the
#     plain rule file loaded, every rule evaluates, no alert about the adapter fires on the healthy
#     adapter, and every adapter metric the rules use is in the live /metrics.
#  4. The dashboard ConfigMap: the sidecar's label (default grafana_dashboard: "1", configurable),
#     the dashboard of deploy/grafana unchanged, its data source a variable.
# The fake kube-apiserver stands in for kube-apiserver's TokenReview and SubjectAccessReview (the
# adapter authorizes the scraper's token as in a cluster); the metrics backend is a real Prometheus.
# asan: no
# cost: high
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

tmp=$(cma_tmp)
if ! tools=$("$CMA_ROOT/scripts/tools.sh"); then
  t_fail "scripts/tools.sh installs the pinned helm and kubectl"
  t_summary
  exit 1
fi
H=$tools/helm
KUBECTL=$tools/kubectl
export HELM_CACHE_HOME="$tmp/helm/cache" HELM_CONFIG_HOME="$tmp/helm/config" \
  HELM_DATA_HOME="$tmp/helm/data"
chart=deploy/helm/custom-metrics-adapter
rules=deploy/prometheus/custom-metrics-adapter-rules.yaml
check="python3 tests/lib/monitoring_check.py"
crds=$CMA_ROOT/../shared/fixtures/crds
SM_CRD=$crds/monitoring.coreos.com_servicemonitors.yaml
PM_CRD=$crds/monitoring.coreos.com_podmonitors.yaml
PR_CRD=$crds/monitoring.coreos.com_prometheusrules.yaml

# render OUT [HELM_ARGS...]: helm template (release r, namespace custom-metrics) into OUT.
render() {
  local out=$1
  shift
  "$H" template r "$chart" -n custom-metrics "$@" >"$out" 2>"$out.err"
}
# only KIND FILE OUT: the documents of KIND in FILE, into OUT.
only() {
  python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d and d.get("kind") == sys.argv[1]]
yaml.safe_dump_all(docs, open(sys.argv[3], "w"), sort_keys=False)
print(len(docs))' "$@"
}

# --- 1. alerting rules --------------------------------------------------------------------------
t_ok "promtool check rules: the plain rule file" promtool check rules "$rules"
t_ok "promtool test rules: every alert fires and stays silent as tested" \
  promtool test rules tests/alerts/custom-metrics-adapter_test.yaml
t_ok "every alert: severity, summary, description, runbook_url to its docs/operations.md section; tested both ways" \
  $check alerts "$rules" docs/operations.md tests/alerts/custom-metrics-adapter_test.yaml

# all three groups registered: the chart's rules are the plain file's
cat >"$tmp/all-groups.yaml" <<'V'
rules:
  default: true
  external:
  - seriesQuery: '{__name__="queue_depth"}'
    metricsQuery: sum(queue_depth{<<.LabelMatchers>>})
  resource:
    cpu:
      containerQuery: sum(rate(container_cpu_usage_seconds_total{<<.LabelMatchers>>}[3m])) by (<<.GroupBy>>)
      nodeQuery: sum(rate(node_cpu_seconds_total{<<.LabelMatchers>>}[3m])) by (<<.GroupBy>>)
      resources: {overrides: {node: {resource: node}, namespace: {resource: namespace}, pod: {resource: pod}}}
      containerLabel: container
    window: 3m
prometheusRule: {enabled: true}
V
if render "$tmp/rule-all.yaml" -f "$tmp/all-groups.yaml"; then
  only PrometheusRule "$tmp/rule-all.yaml" "$tmp/pr-all.yaml" >/dev/null
  t_eq "chart (every group registered): the PrometheusRule's groups are the plain rule file's" \
    "$($check groups "$rules")" "$($check groups "$tmp/pr-all.yaml")"
  python3 -c 'import sys,yaml; d=next(yaml.safe_load_all(open(sys.argv[1]))); yaml.safe_dump({"groups": d["spec"]["groups"]}, open(sys.argv[2],"w"))' \
    "$tmp/pr-all.yaml" "$tmp/pr-all.rules.yaml"
  t_ok "promtool check rules: the chart's PrometheusRule" promtool check rules "$tmp/pr-all.rules.yaml"
else
  t_fail "helm template with every group and prometheusRule.enabled" "$(cat "$tmp/rule-all.yaml.err")"
fi
t_eq "the chart's files/prometheus-rules.yaml holds the plain file's groups" \
  "$($check groups "$rules")" "$($check groups "$chart/files/prometheus-rules.yaml")"
# a Component cannot be built alone: an overlay in the temp dir combines them with the base
mkdir -p "$tmp/k/overlay" && cp -r deploy "$tmp/k/" && cat >"$tmp/k/overlay/kustomization.yaml" <<'K'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [../deploy/base]
components: [../deploy/components/custom-metrics, ../deploy/components/service-monitor,
  ../deploy/components/pod-monitor, ../deploy/components/prometheus-rule]
K
if t_ok "kubectl kustomize: base + custom-metrics + service-monitor + pod-monitor + prometheus-rule" \
  "$KUBECTL" kustomize "$tmp/k/overlay" -o "$tmp/kustomized.yaml"; then
  t_eq "kustomize component: the PrometheusRule's groups are the plain rule file's" \
    "$($check groups "$rules")" "$($check groups "$tmp/kustomized.yaml")"
  t_json "kustomize service-monitor: the Service carries the label the ServiceMonitor selects" \
    "$(python3 -c 'import sys,yaml,json; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d["kind"]=="Service"][0]))' "$tmp/kustomized.yaml")" \
    '.metadata.labels["app.kubernetes.io/name"]' custom-metrics-adapter
fi

# default values: only custom.metrics.k8s.io is registered, so only its APIServices are watched;
# runbookBaseURL moves every runbook_url
if render "$tmp/rule-default.yaml" --set prometheusRule.enabled=true \
  --set prometheusRule.runbookBaseURL=https://wiki.example.com/ops.md/; then
  only PrometheusRule "$tmp/rule-default.yaml" "$tmp/pr-default.yaml" >/dev/null
  t_eq "chart (default values): the APIService alert watches the two custom.metrics.k8s.io versions" \
    'max by (name) (aggregator_unavailable_apiservice{name=~"v1beta1.custom.metrics.k8s.io|v1beta2.custom.metrics.k8s.io"}) == 1' \
    "$(python3 -c 'import sys,yaml; d=next(yaml.safe_load_all(open(sys.argv[1]))); print([r for r in d["spec"]["groups"][0]["rules"] if r["alert"]=="CustomMetricsAdapterAPIServiceUnavailable"][0]["expr"])' "$tmp/pr-default.yaml")"
  t_eq "chart: runbookBaseURL moves every runbook_url" "10" \
    "$(grep -c 'runbook_url: https://wiki.example.com/ops.md#custommetricsadapter' "$tmp/pr-default.yaml")"
else
  t_fail "helm template --set prometheusRule.enabled=true" "$(cat "$tmp/rule-default.yaml.err")"
fi

# --- 2. against the Operator's CRD schemas --------------------------------------------------------
# validate LABEL CRD FILE: every object of the CRD's kind in FILE is valid
validate() {
  local out
  out=$($check validate "$2" "$3" 2>&1)
  if [ $? -eq 0 ]; then t_pass "$1 ($(wc -l <<<"$out") objects)"; else t_fail "$1" "$out"; fi
}
mon_args=(--set serviceMonitor.enabled=true --set podMonitor.enabled=true
  --set podMonitor.prometheusServiceAccount=prometheus-k8s --set podMonitor.namespace=monitoring
  --set prometheusRule.enabled=true --set dashboard.enabled=true
  --set 'serviceMonitor.labels.release=kube-prometheus-stack'
  --set 'serviceMonitor.metricRelabelings[0].action=drop'
  --set 'serviceMonitor.metricRelabelings[0].sourceLabels[0]=__name__'
  --set 'serviceMonitor.metricRelabelings[0].regex=process_.*')
variant() { # variant NAME HELM_ARGS...: render and validate the three kinds
  local name=$1 out="$tmp/mon-$1.yaml"
  shift
  if ! render "$out" "${mon_args[@]}" "$@"; then
    t_fail "$name: helm template with the monitoring values" "$(cat "$out.err")"
    return 1
  fi
  validate "$name: ServiceMonitor valid against the Operator's CRD" "$SM_CRD" "$out"
  validate "$name: PodMonitor valid against the Operator's CRD" "$PM_CRD" "$out"
  validate "$name: PrometheusRule valid against the Operator's CRD" "$PR_CRD" "$out"
}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=ca \
  -keyout "$tmp/ca.key" -out "$tmp/ca.crt" >/dev/null 2>&1
variant self-signed
t_json "self-signed: the ServiceMonitor skips verification (no CA to trust) and uses Prometheus' token" \
  "$(python3 -c 'import sys,yaml,json; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"]=="ServiceMonitor"][0]))' "$tmp/mon-self-signed.yaml")" \
  '.spec.endpoints[0] | "\(.scheme) \(.port) \(.path) \(.tlsConfig.insecureSkipVerify) \(.bearerTokenFile) \(.relabelings[0].targetLabel)=\(.relabelings[0].replacement)"' \
  "https https /metrics true /var/run/secrets/kubernetes.io/serviceaccount/token job=custom-metrics-adapter"
variant cert-manager --set certManager.enabled=true
t_json "cert-manager: the ServiceMonitor verifies with the certificate Secret's ca.crt and the Service's name" \
  "$(python3 -c 'import sys,yaml,json; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"]=="ServiceMonitor"][0]))' "$tmp/mon-cert-manager.yaml")" \
  '.spec.endpoints[0].tlsConfig | "\(.ca.secret.name)/\(.ca.secret.key) \(.serverName)"' \
  "r-custom-metrics-adapter/ca.crt r-custom-metrics-adapter.custom-metrics.svc"
variant tls-values --set tls.enable=true --set-file tls.ca="$tmp/ca.crt" \
  --set-file tls.certificate="$tmp/ca.crt" --set-file tls.key="$tmp/ca.key"
t_eq "tls.enable: a ConfigMap with the serving CA for the ServiceMonitor" "$(cat "$tmp/ca.crt")" \
  "$(python3 -c 'import sys,yaml; print([d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"]=="ConfigMap" and d["metadata"]["name"].endswith("-serving-ca")][0]["data"]["ca.crt"], end="")' "$tmp/mon-tls-values.yaml")"
variant token-secret --set podMonitor.prometheusServiceAccount= --set podMonitor.bearerTokenSecret.name=prom-token
validate "kustomize components: ServiceMonitor valid" "$SM_CRD" "$tmp/kustomized.yaml"
validate "kustomize components: PodMonitor valid" "$PM_CRD" "$tmp/kustomized.yaml"
validate "kustomize components: PrometheusRule valid" "$PR_CRD" "$tmp/kustomized.yaml"
# the validation can fail: a misspelt field and a wrong type are refused
sed 's/bearerTokenFile:/bearerTokenFil:/; s/interval: 30s/interval: 30/' "$tmp/mon-self-signed.yaml" >"$tmp/broken.yaml"
out=$($check validate "$SM_CRD" "$tmp/broken.yaml")
t_ok "a misspelt ServiceMonitor field is refused by the schema check" grep -q "'bearerTokenFil' was unexpected" <<<"$out"
t_ok "a wrong type is refused by the schema check" grep -q "interval: 30 is not of type 'string'" <<<"$out"
render "$tmp/pm-fail.yaml" --set podMonitor.enabled=true
t_ok "podMonitor without a token source: refused, naming the values" \
  grep -q "podMonitor.prometheusServiceAccount.*podMonitor.bearerTokenSecret.name" "$tmp/pm-fail.yaml.err"
render "$tmp/none.yaml"
t_eq "default values: no ServiceMonitor, PodMonitor, PrometheusRule or dashboard" "0" \
  "$(grep -cE '^kind: (ServiceMonitor|PodMonitor|PrometheusRule)$|grafana_dashboard' "$tmp/none.yaml")"

# --- 4. dashboard ---------------------------------------------------------------------------------
dash_json() { # dash_json FILE: the dashboard ConfigMap as JSON
  python3 -c 'import sys,yaml,json; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"]=="ConfigMap" and d["metadata"]["name"].endswith("-dashboard")][0]))' "$1"
}
cm=$(dash_json "$tmp/mon-self-signed.yaml")
t_json "dashboard ConfigMap: the sidecar's default label" "$cm" '.metadata.labels.grafana_dashboard' 1
t_eq "dashboard ConfigMap: deploy/grafana/custom-metrics-adapter.json unchanged" \
  "$(jq -S . deploy/grafana/custom-metrics-adapter.json)" "$(jq -r '.data["custom-metrics-adapter.json"]' <<<"$cm" | jq -S .)"
t_ok "the chart's files/dashboard.json is deploy/grafana's" cmp deploy/grafana/custom-metrics-adapter.json "$chart/files/dashboard.json"
t_ok "dashboard: the data source is a variable, and every panel uses it" \
  jq -e '(.templating.list | any(.type == "datasource" and .name == "datasource")) and
    ([.panels[] | select(.datasource != null) | .datasource.uid] | all(. == "${datasource}"))' \
  deploy/grafana/custom-metrics-adapter.json
render "$tmp/dash-label.yaml" --set dashboard.enabled=true --set dashboard.label=my_dashboards \
  --set dashboard.labelValue=yes --set dashboard.annotations.grafana_folder=Platform
cm=$(dash_json "$tmp/dash-label.yaml")
t_json "dashboard ConfigMap: label and folder annotation configurable" "$cm" \
  '"\(.metadata.labels.my_dashboards) \(.metadata.labels.grafana_dashboard) \(.metadata.annotations.grafana_folder)"' \
  "yes null Platform"

# --- 3. a real Prometheus scrapes the adapter as the monitors say --------------------------------
token_of() { sed -n '/^{/{p;q}' "$CMA_FIXTURES/$1" | jq -r .spec.token; }
TOKEN=$(token_of tokenreview-valid.http)
SA_USER=$(sed -n '/^{"kind":"TokenReview"/p' "$CMA_FIXTURES/tokenreview-valid.http" | jq -r .status.user.username)
gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
curl -s --max-time 10 --cacert "$KUBE_CA" -H "Authorization: Bearer fake-admin" \
  "$KUBE_URL/__fake/sar-allow?users=$SA_USER" >/dev/null
if ! start_adapter config/gpu-dcgm.yaml; then
  t_fail "start the adapter"
  t_summary
  exit 1
fi
wait_discovery DCGM_FI_DEV_GPU_UTIL >/dev/null
printf '%s' "$TOKEN" >"$tmp/prometheus-sa-token"
target=${ADAPTER_URL#https://}
only ServiceMonitor "$tmp/mon-self-signed.yaml" "$tmp/sm.yaml" >/dev/null
only PodMonitor "$tmp/mon-self-signed.yaml" "$tmp/pm.yaml" >/dev/null
# the ServiceMonitor's bearerTokenFile and the PodMonitor's token Secret both stand for the
# Prometheus service account's token: here the recorded service account's, which the fake
# kube-apiserver's TokenReview accepts and its SubjectAccessReview allows on /metrics
$check scrape-config "$tmp/sm.yaml" "$target" "$tmp/prometheus-sa-token" "$tmp/sm-job.yaml" &&
  $check scrape-config "$tmp/pm.yaml" "$target" "$tmp/prometheus-sa-token" "$tmp/pm-job.yaml"
t_eq "the monitors translate to scrape configs" 0 $?
pdir="$tmp/scraper"
mkdir -p "$pdir"
{
  printf 'global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: ["%s"]\nscrape_configs:\n' \
    "$CMA_ROOT/$rules"
  sed 's/^/  /; 1s/^  /- /' "$tmp/sm-job.yaml"
  sed 's/^/  /; 1s/^  /- /' "$tmp/pm-job.yaml"
} >"$pdir/prometheus.yml"
t_ok "promtool check config: the scrape configs from the monitors" promtool check config "$pdir/prometheus.yml"
port=$(free_port)
_cma_spawn "$pdir/prometheus.log" prometheus --config.file="$pdir/prometheus.yml" \
  --storage.tsdb.path="$pdir/data" --web.listen-address="127.0.0.1:$port" --log.level=warn
_cma_wait_ready scraper "$_CMA_SPAWNED" "$pdir/prometheus.log" "http://127.0.0.1:$port/-/ready"
S="http://127.0.0.1:$port"
sq() { curl -s --max-time 10 -G "$S/api/v1/query" --data-urlencode "query=$1"; }
wait_value() { # wait_value EXPR WANT: until EXPR's first value is WANT (60 s)
  local deadline=$((SECONDS + 60)) v
  while :; do
    v=$(sq "$1" | jq -r '.data.result[0].value[1] // ""')
    [ "$v" = "$2" ] && return 0
    [ "$SECONDS" -ge "$deadline" ] && {
      echo "$1 = '$v', wanted '$2'"
      return 1
    }
    sleep 0.5
  done
}
t_ok "the ServiceMonitor's scrape is up, with job=custom-metrics-adapter" \
  wait_value 'up{job="custom-metrics-adapter",monitor="ServiceMonitor"}' 1
t_ok "the PodMonitor's scrape is up, with job=custom-metrics-adapter" \
  wait_value 'up{job="custom-metrics-adapter",monitor="PodMonitor"}' 1
t_ok "the scraped series carry the adapter's metrics (build_info)" \
  wait_value 'count(custom_metrics_adapter_build_info{job="custom-metrics-adapter"})' 2
t_ok "the scraped catalog is not empty" wait_value \
  'count(custom_metrics_adapter_catalog_entries{job="custom-metrics-adapter",group="custom.metrics.k8s.io"} > 0)' 2
# every adapter metric the rules use is exported (kube-apiserver's aggregator metric and up are not the adapter's)
with_metrics=$(curl -s --max-time 10 --cacert "$ADAPTER_CA" -H "Authorization: Bearer $TOKEN" "$ADAPTER_URL/metrics")
missing=""
for m in $(grep -oE '\b(custom_metrics_adapter|apiserver)_[a-z_]+' "$rules" | sort -u); do
  base=${m%_bucket}
  grep -qE "^# TYPE $base " <<<"$with_metrics" || missing+=" $m"
done
t_eq "every adapter metric the rules name is in the live /metrics" "" "$missing"
# every rule evaluates on live data; none of the adapter's alerts fires on the healthy adapter
rules_evaluated() { # all 10 rules evaluated after the scrapes were up
  curl -s "$S/api/v1/rules" | jq -e '[.data.groups[].rules[] | select(.health == "ok")] | length == 10' >/dev/null
}
deadline=$((SECONDS + 60))
until rules_evaluated || [ "$SECONDS" -ge "$deadline" ]; do sleep 0.5; done
errors=""
while IFS= read -r expr; do
  st=$(sq "$expr" | jq -r .status)
  [ "$st" = success ] || errors+=" [$expr: $st]"
done < <(python3 -c 'import sys,yaml; [print(r["expr"].replace("\n"," ")) for g in yaml.safe_load(open(sys.argv[1]))["groups"] for r in g["rules"]]' "$rules")
t_eq "every rule's expression evaluates on the scraped data" "" "$errors"
t_ok "the rules are loaded and evaluated by the scraping Prometheus (health ok)" rules_evaluated
firing=$(curl -s "$S/api/v1/alerts" | jq -r '[.data.alerts[] | select(.labels.alertname != "CustomMetricsAdapterAPIServiceUnavailable") | .labels.alertname] | unique | join(",")')
t_eq "no alert about the adapter is pending or firing on the healthy adapter" "" "$firing"
# the scrape needs the token: without it the adapter refuses (403), so up is 0
t_eq "anonymous /metrics is refused (the token in the monitors matters)" 403 \
  "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$ADAPTER_CA" "$ADAPTER_URL/metrics")"

t_summary
