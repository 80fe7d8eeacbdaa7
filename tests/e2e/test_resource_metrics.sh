#!/usr/bin/env bash
# test_resource_metrics.sh: metrics.k8s.io v1beta1 end to end with config/resource-rules.yaml over a real Prometheus holding synthetic cAdvisor/kubelet series (tests/lib/gen_resource.py) and the fake kube-apiserver: discovery, PodMetricsList in all namespaces and per namespace (sorted, only Running pods, canonical quantities, window 5m0s), GET pod/node and their 404s, labelSelector and fieldSelector (and their 400s), NodeMetricsList, NaN/negative → 0, a pod without memory left out, one cpu and one memory query for a cross-namespace list, a backend outage; then the real `kubectl top pod -n ml`, `kubectl top pod -A` and `kubectl top node` through a test front that proxies metrics.k8s.io to the adapter as kube-aggregator does.
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

gen_resource || exit 1
if ! start_prometheus "$RES_DIR/resource.om" || ! start_fake_kube "$RES_DIR/pods.json" ||
  ! V=6 start_adapter config/resource-rules.yaml; then
  t_fail "start Prometheus, fake kube-apiserver and adapter"
  t_summary
  exit 1
fi
G=/apis/metrics.k8s.io/v1beta1
# The RESTMapper (label ↔ resource) comes with the first catalog: wait for it.
t_ok "the adapter serves metrics.k8s.io once discovery has run" wait_status "$G/nodes" 200 60

# json_answer NAME STATUS: the last adapter_fetch answered STATUS with Content-Type application/json.
json_answer() {
  t_eq "$1: HTTP status" "$2" "$R_STATUS"
  t_eq "$1: Content-Type" "application/json" "$R_CTYPE"
}

# status_answer NAME CODE REASON MESSAGE: the last adapter_fetch is a metav1.Status with CODE,
# REASON and exactly MESSAGE.
status_answer() {
  json_answer "$1" "$2"
  t_json "$1: Status code/reason/message" "$R_BODY" '"\(.kind) \(.code) \(.reason): \(.message)"' \
    "Status $2 $3: $4"
}

# pod_rows JSON: "ns/name container cpu memory" per container of a PodMetricsList, in list order.
pod_rows() {
  printf '%s' "$1" | jq -r '.items[] | .metadata as $m | .containers[]
    | "\($m.namespace)/\($m.name) \(.name) \(.usage.cpu) \(.usage.memory)"'
}

# want_pod_rows JQ_CONDITION: the same lines from expected.json for the served pods that satisfy
# JQ_CONDITION (sorted by namespace, then name; containers by name).
want_pod_rows() {
  res_expected "[.pods[] | select(.served) | select(${1:-true})] | sort_by(.namespace, .name)[]
    | . as \$p | .containers[] | \"\(\$p.namespace)/\(\$p.name) \(.name) \(.cpu) \(.memory)\""
}

# pod_names JSON: "ns/name" of each item, in list order, space-separated.
pod_names() { printf '%s' "$1" | jq -r '[.items[] | "\(.metadata.namespace)/\(.metadata.name)"] | join(" ")'; }
want_pod_names() {
  res_expected "[.pods[] | select(.served) | select(${1:-true})] | sort_by(.namespace, .name)
    | map(\"\(.namespace)/\(.name)\") | join(\" \")"
}

# --- discovery -------------------------------------------------------------------------------------
adapter_fetch "$G"
json_answer "discovery metrics.k8s.io/v1beta1" 200
t_json "discovery: APIResourceList of metrics.k8s.io/v1beta1" "$R_BODY" \
  '"\(.kind) \(.apiVersion) \(.groupVersion)"' "APIResourceList v1 metrics.k8s.io/v1beta1"
t_json "discovery: nodes (NodeMetrics, cluster-scoped) and pods (PodMetrics, namespaced), get and list" \
  "$R_BODY" '[.resources[] | "\(.name) \(.kind) \(.namespaced) \(.verbs | join(","))"] | join("; ")' \
  "nodes NodeMetrics false get,list; pods PodMetrics true get,list"
r=$(adapter_get /apis)
t_json "kubectl /apis: only metrics.k8s.io (the config has only resourceRules)" "$r" \
  '[.groups[] | "\(.name) \(.preferredVersion.version)"] | join(";")' "metrics.k8s.io v1beta1"
r=$(adapter_get /apis/metrics.k8s.io)
t_json "kubectl /apis/metrics.k8s.io: APIGroup with v1beta1" "$r" \
  '"\(.kind) \(.name) \([.versions[].groupVersion] | join(","))"' "APIGroup metrics.k8s.io metrics.k8s.io/v1beta1"

# --- PodMetricsList --------------------------------------------------------------------------------
t_eq "oracle: expected.json serves 9 pods; pending-0 (not Running) and nomem-0 (no memory) left out" \
  "9 ml/nomem-0:no memory series ml/pending-0:not Running" \
  "$(res_expected '"\([.pods[] | select(.served)] | length) \([.pods[] | select(.served | not)
      | "\(.namespace)/\(.name):\(.left_out)"] | join(" "))"')"

before=$(adapter_log_lines)
kube_before=$(wc -l <"$KUBE_REQUEST_LOG")
t0=$(date -u +%s)
adapter_fetch "$G/pods"
t1=$(date -u +%s)
json_answer "all namespaces" 200
all=$R_BODY
t_json "all namespaces: kind, apiVersion, metadata {}" "$all" \
  '"\(.kind) \(.apiVersion) \(.metadata | tojson)"' "PodMetricsList metrics.k8s.io/v1beta1 {}"
t_eq "all namespaces: Running pods with both resources, sorted by namespace then name" \
  "$(want_pod_names)" "$(pod_names "$all")"
t_eq "all namespaces: every container's cpu (DecimalSI) and memory (BinarySI, Ki/Mi/Gi only when exact)" \
  "$(want_pod_rows)" "$(pod_rows "$all")"
t_json "all namespaces: window is the Go duration 5m0s" "$all" '[.items[].window] | unique | join(",")' "5m0s"
t_json "all namespaces: item fields in Go order" "$all" '.items[0] | keys_unsorted | join(",")' \
  "metadata,timestamp,window,containers"
t_json "all namespaces: metadata fields in Go order" "$all" '.items[0].metadata | keys_unsorted | join(",")' \
  "name,namespace,creationTimestamp,labels"
t_json "all namespaces: usage keys cpu, memory" "$all" \
  '[.items[].containers[].usage | keys_unsorted | join(",")] | unique | join(";")' "cpu,memory"
t_json "all namespaces: labels are the pods' own" "$all" \
  '[.items[] | "\(.metadata.namespace)/\(.metadata.name)=\(.metadata.labels | tojson)"] | join(" ")' \
  "$(res_expected '[.pods[] | select(.served)] | sort_by(.namespace, .name)
    | map("\(.namespace)/\(.name)=\(.labels | to_entries | sort_by(.key) | from_entries | tojson)") | join(" ")')"
ts_ok=$(printf '%s' "$all" | jq --argjson a "$((t0 - 1))" --argjson b "$((t1 + 1))" \
  '[.items[] | (.timestamp, .metadata.creationTimestamp) | fromdateiso8601 | . >= $a and . <= $b] | all')
t_eq "all namespaces: timestamp (the samples') and creationTimestamp (now) are this request's time" \
  true "$ts_ok"
t_ok "all namespaces: ml/bert-0 and vision/bert-0 keep their own values (never summed)" \
  jq -e '[.items[] | select(.metadata.name == "bert-0") | .containers[0].usage.cpu] == ["12m", "40m"]' \
  <<<"$all"
t_ok "all namespaces: the pod-level cgroup series (container=\"\") are not containers" \
  jq -e '[.items[].containers[].name] | all(. != "")' <<<"$all"
t_ok "all namespaces: the series of a pod the cluster does not have (ml/ghost-0) is not served" \
  jq -e '[.items[].metadata.name] | index("ghost-0") == null' <<<"$all"

# One query per resource, whatever the number of namespaces (upstream: 2 per namespace).
queries=$(adapter_log_after "$before" | grep -E 'prometheus (GET|POST) [^ ]*/api/v1/query')
t_eq "all namespaces: exactly one cpu and one memory query to Prometheus (3 namespaces)" \
  "2 1 1" "$(grep -c . <<<"$queries") $(grep -c container_cpu_usage_seconds_total <<<"$queries") $(grep -c container_memory_working_set_bytes <<<"$queries")"
promql=$(adapter_log_after "$before" | grep -E 'resource metrics cpu for [0-9]+ pods: ')
t_ok "all namespaces: the query groups by pod, container and namespace, without a namespace matcher" \
  grep -q 'sum by (pod,container,namespace) .*container_cpu_usage_seconds_total{pod=~"' <<<"$promql"
t_ok "all namespaces: one LIST of Running pods in all namespaces (PartialObjectMetadata)" \
  jq -e -s --argjson n "$kube_before" '.[$n:] | map(select(.path | endswith("/pods"))) | length == 1
    and .[0].path == "/api/v1/pods" and .[0].params.fieldSelector == ["status.phase=Running"]
    and (.[0].headers.Accept | contains("as=PartialObjectMetadataList"))' "$KUBE_REQUEST_LOG"

r=$(adapter_get "$G/namespaces/ml/pods")
t_eq "kubectl namespace ml: only ml's served pods, sorted" "$(want_pod_names '.namespace == "ml"')" \
  "$(pod_names "$r")"
t_eq "kubectl namespace ml: values" "$(want_pod_rows '.namespace == "ml"')" "$(pod_rows "$r")"
t_ok "namespace ml: the query matches the namespace" \
  grep -q 'container_memory_working_set_bytes{namespace="ml",pod=~' <<<"$(adapter_log_after "$before")"
adapter_fetch "$G/namespaces/nowhere/pods"
json_answer "namespace without pods" 200
t_ok "namespace without pods: the body says \"items\":[] literally" grep -qF '"items":[]' <<<"$R_BODY"

# negative and NaN values are served as 0 (metrics-server and prometheus-adapter do the same)
t_eq "ml/neg-0 (NaN cpu, negative memory): 0 and 0" "ml/neg-0 server 0 0" "$(pod_rows "$r" | grep '^ml/neg-0 ')"
t_eq "ml/half-0: a container with only cpu or only memory gets 0 for the other" \
  "ml/half-0 app 20m 0|ml/half-0 log 0 8Mi" "$(pod_rows "$r" | grep '^ml/half-0 ' | paste -sd'|')"
t_eq "vision/resnet-0: two containers, sorted by name" \
  "vision/resnet-0 server 900m 2Gi|vision/resnet-0 sidecar 5m 12345678" \
  "$(pod_rows "$all" | grep '^vision/resnet-0 ' | paste -sd'|')"

# --- GET one pod -------------------------------------------------------------------------------------
adapter_fetch "$G/namespaces/ml/pods/bert-1"
json_answer "GET ml/bert-1" 200
t_json "GET ml/bert-1: a PodMetrics with kind and apiVersion" "$R_BODY" \
  '"\(.kind) \(.apiVersion) \(.metadata.namespace)/\(.metadata.name) \(.window)"' \
  "PodMetrics metrics.k8s.io/v1beta1 ml/bert-1 5m0s"
t_json "GET ml/bert-1: usage" "$R_BODY" '.containers | map("\(.name) \(.usage.cpu) \(.usage.memory)") | join(";")' \
  "$(res_expected '.pods[] | select(.namespace == "ml" and .name == "bert-1") | .containers
    | map("\(.name) \(.cpu) \(.memory)") | join(";")')"
out=$(adapter_get "$G/namespaces/vision/pods/bert-0")
t_json "kubectl GET vision/bert-0: its own values" "$out" '.containers[0].usage | "\(.cpu) \(.memory)"' "40m 50Mi"
adapter_fetch "$G/namespaces/ml/pods/nomem-0"
status_answer "GET a pod without memory series (left out)" 404 NotFound \
  'podmetrics.metrics.k8s.io "ml/nomem-0" not found'
adapter_fetch "$G/namespaces/ml/pods/pending-0"
status_answer "GET a Pending pod" 404 NotFound 'podmetrics.metrics.k8s.io "ml/pending-0" not found'
out=$(adapter_get "$G/namespaces/ml/pods/no-such-pod" 2>&1)
t_eq "kubectl GET a missing pod: NotFound" \
  'Error from server (NotFound): podmetrics.metrics.k8s.io "ml/no-such-pod" not found' "$out"

# --- labelSelector and fieldSelector ----------------------------------------------------------------
adapter_fetch "$G/pods?labelSelector=app%3Dbert"
t_eq "labelSelector app=bert (all namespaces): the bert pods of ml and vision" \
  "$(want_pod_names '.labels.app == "bert"')" "$(pod_names "$R_BODY")"
adapter_fetch "$G/pods?labelSelector=app+in+%28resnet%2Ccuda-test%29"
t_eq "aggregator-encoded labelSelector 'app in (resnet,cuda-test)'" \
  "default/cuda-test-0 vision/resnet-0" "$(pod_names "$R_BODY")"
adapter_fetch "$G/namespaces/ml/pods?labelSelector=tier%3Dinference%2Capp%21%3Dbert"
t_eq "labelSelector 'tier=inference,app!=bert' in ml" "ml/other-0" "$(pod_names "$R_BODY")"
adapter_fetch "$G/pods?fieldSelector=metadata.name%3Dbert-0"
t_eq "fieldSelector metadata.name=bert-0 (all namespaces): both bert-0 pods" \
  "ml/bert-0 vision/bert-0" "$(pod_names "$R_BODY")"
adapter_fetch "$G/pods?fieldSelector=metadata.namespace%3Dvision"
t_eq "fieldSelector metadata.namespace=vision" "$(want_pod_names '.namespace == "vision"')" "$(pod_names "$R_BODY")"
adapter_fetch "$G/pods?fieldSelector=metadata.namespace!%3Dml,metadata.name!%3Dbert-0&labelSelector=app"
t_eq "fieldSelector 'metadata.namespace!=ml,metadata.name!=bert-0' with labelSelector 'app'" \
  "default/cuda-test-0 vision/resnet-0" "$(pod_names "$R_BODY")"
t_ok "the adapter passed status.phase=Running and the user's terms to the LIST" \
  jq -e -s 'any(.[]; .path == "/api/v1/pods" and .params.fieldSelector == ["status.phase=Running,metadata.namespace!=ml,metadata.name!=bert-0"]
    and .params.labelSelector == ["app"])' "$KUBE_REQUEST_LOG"
adapter_fetch "$G/namespaces/ml/pods/bert-0?fieldSelector=metadata.name%3Dbert-0"
json_answer "GET ml/bert-0 with a fieldSelector naming it" 200
adapter_fetch "$G/pods?fieldSelector=spec.nodeName%3Dres-node-1"
status_answer "fieldSelector on spec.nodeName" 400 BadRequest \
  "invalid fieldSelector \"spec.nodeName=res-node-1\": \"spec.nodeName\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
adapter_fetch "$G/pods?fieldSelector=metadata.name"
status_answer "fieldSelector without an operator" 400 BadRequest \
  "invalid fieldSelector \"metadata.name\": invalid selector: 'metadata.name'; can't understand 'metadata.name'"
adapter_fetch "$G/pods?fieldSelector=metadata.name%3Da%5C"
status_answer "fieldSelector value ending in a backslash" 400 BadRequest \
  "invalid fieldSelector \"metadata.name=a\\\": invalid field selector: invalid escape sequence: \\"
adapter_fetch "$G/pods?fieldSelector=metadata.name%3Da%3Db"
status_answer "fieldSelector value with an unescaped '='" 400 BadRequest \
  "invalid fieldSelector \"metadata.name=a=b\": invalid field selector: unescaped character in value: 61"
adapter_fetch "$G/pods?fieldSelector=metadata.name%3Dbert%5C%3D0,,"
json_answer "fieldSelector with an escaped '=' and empty terms" 200
t_json "fieldSelector metadata.name=bert\\=0 matches no pod" "$R_BODY" '.items | length' 0
adapter_fetch "$G/namespaces/ml/pods/bert-0?fieldSelector=metadata.name%3Dbert-1"
status_answer "GET ml/bert-0 with fieldSelector metadata.name=bert-1" 400 BadRequest \
  "fieldSelector metadata.name doesn't match requested name"
adapter_fetch "$G/namespaces/ml/pods?labelSelector=app%3D%3D%3Dx"
status_answer "malformed labelSelector app===x" 400 BadRequest \
  "invalid label selector \"app===x\": unable to parse requirement: found '=', expected: identifier"

# --- NodeMetrics -------------------------------------------------------------------------------------
nodes_want=$(res_expected '[.nodes[] | select(.served) | "\(.name) \(.cpu) \(.memory)"] | join("|")')
t_eq "oracle: nodes 1, 2 and 4 have series (4: NaN cpu, negative memory); 3 has none" \
  "res-node-1 1250m 8Gi|res-node-2 500m 3221225984|res-node-4 0 0" "$nodes_want"
r=$(adapter_get "$G/nodes")
t_json "kubectl NodeMetricsList: kind, apiVersion" "$r" '"\(.kind) \(.apiVersion)"' \
  "NodeMetricsList metrics.k8s.io/v1beta1"
t_json "kubectl NodeMetricsList: nodes with both series, sorted, NaN/negative → 0" "$r" \
  '[.items[] | "\(.metadata.name) \(.usage.cpu) \(.usage.memory)"] | join("|")' "$nodes_want"
t_json "NodeMetricsList: item fields in Go order, no namespace, window 5m0s" "$r" \
  '[.items[] | "\(keys_unsorted | join(",")) \(.metadata | has("namespace")) \(.window)"] | unique | join(";")' \
  "metadata,timestamp,window,usage false 5m0s"
t_json "NodeMetricsList: the nodes' labels" "$r" '.items[0].metadata.labels["kubernetes.io/hostname"]' res-node-1
adapter_fetch "$G/nodes/res-node-2"
json_answer "GET node res-node-2" 200
t_json "GET node res-node-2: NodeMetrics" "$R_BODY" '"\(.kind) \(.metadata.name) \(.usage.cpu) \(.usage.memory)"' \
  "NodeMetrics res-node-2 500m 3221225984"
adapter_fetch "$G/nodes/res-node-3"
status_answer "GET a node without series" 404 NotFound 'nodemetrics.metrics.k8s.io "res-node-3" not found'
adapter_fetch "$G/nodes/no-such-node"
status_answer "GET a missing node" 404 NotFound 'nodemetrics.metrics.k8s.io "no-such-node" not found'
adapter_fetch "$G/nodes?labelSelector=kubernetes.io%2Fhostname%3Dres-node-4"
t_json "nodes labelSelector kubernetes.io/hostname=res-node-4" "$R_BODY" '[.items[].metadata.name] | join(",")' res-node-4
adapter_fetch "$G/nodes?fieldSelector=metadata.name!%3Dres-node-1"
t_json "nodes fieldSelector metadata.name!=res-node-1 (applied by the adapter)" "$R_BODY" \
  '[.items[].metadata.name] | join(",")' "res-node-2,res-node-4"
adapter_fetch "$G/nodes?fieldSelector=metadata.namespace%3Dml"
t_json "nodes fieldSelector metadata.namespace=ml: cluster-scoped, so none" "$R_BODY" '.items | length' 0

# --- kubectl top through the test front --------------------------------------------------------------
if ! start_test_front "$RES_DIR/pods.json" "$ADAPTER_URL"; then
  t_fail "start the test front (fake kube-apiserver proxying metrics.k8s.io)"
else
  t_json "test front: /apis lists metrics.k8s.io" "$(front_kubectl get --raw /apis)" \
    '[.groups[].name] | index("metrics.k8s.io") != null' true
  t_json "test front: nodes carry allocatable cpu 3800m and memory 15Gi" \
    "$(front_kubectl get --raw /api/v1/nodes/res-node-1)" '.status.allocatable | "\(.cpu) \(.memory)"' "3800m 15Gi"
  front_before=$(wc -l <"$FRONT_REQUEST_LOG")

  out=$(front_kubectl top pod -n ml 2>&1)
  t_eq "kubectl top pod -n ml: header" "NAME CPU(cores) MEMORY(bytes)" "$(head -n 1 <<<"$out" | tr -s ' ' | sed 's/ $//')"
  t_eq "kubectl top pod -n ml: one row per served ml pod with kubectl's units (m, Mi)" \
    "$(res_expected '[.pods[] | select(.served and .namespace == "ml")] | sort_by(.name)[]
        | "\(.name) \(.kubectl.cpu) \(.kubectl.memory)"')" \
    "$(tail -n +2 <<<"$out" | tr -s ' ' | sed 's/ $//')"
  t_eq "kubectl top pod -n ml: bert-0 12m 34Mi, bert-1 250m 95Mi (100000000 bytes)" \
    "bert-0 12m 34Mi|bert-1 250m 95Mi" "$(tail -n +2 <<<"$out" | tr -s ' ' | grep -E '^bert-[01] ' | sed 's/ $//' | paste -sd'|')"

  out=$(front_kubectl top pod -A 2>&1)
  t_eq "kubectl top pod -A: rows with namespace, sums over containers (resnet-0 905m 2059Mi)" \
    "$(res_expected '[.pods[] | select(.served)] | sort_by(.namespace, .name)[]
        | "\(.namespace) \(.name) \(.kubectl.cpu) \(.kubectl.memory)"')" \
    "$(tail -n +2 <<<"$out" | tr -s ' ' | sed 's/ $//')"
  t_ok "kubectl top pod -A: vision resnet-0 905m 2059Mi" grep -Eq '^vision +resnet-0 +905m +2059Mi' <<<"$out"

  out=$(front_kubectl top node 2>&1)
  # CPU% and MEMORY% as kubectl computes them: usage / allocatable (3800m, 15Gi), truncated.
  want_nodes=$(res_expected '.nodes[] | select(.served)
      | "\(.name) \(.kubectl.cpu) \(.cpu_milli * 100 / 3800 | floor)% \(.kubectl.memory) \(.memory_bytes * 100 / (15 * 1073741824) | floor)%"')
  want_nodes+=$'\n'$(res_expected '.nodes[] | select(.served | not) | "\(.name) <unknown> <unknown> <unknown> <unknown>"')
  # kubectl 1.20 (Debian bookworm) prints "CPU%"/"MEMORY%"; newer kubectl "CPU(%)"/"MEMORY(%)".
  header=$(head -n 1 <<<"$out" | tr -s ' ' | sed 's/ $//')
  case $header in
    *"CPU(%)"*) want_header="NAME CPU(cores) CPU(%) MEMORY(bytes) MEMORY(%)" ;;
    *) want_header="NAME CPU(cores) CPU% MEMORY(bytes) MEMORY%" ;;
  esac
  t_eq "kubectl top node: header (as this kubectl version words it)" "$want_header" "$header"
  t_eq "kubectl top node: usage and percentages of allocatable; res-node-3 (no series) <unknown>" \
    "$want_nodes" "$(tail -n +2 <<<"$out" | tr -s ' ' | sed 's/ $//')"
  t_ok "kubectl top node: res-node-1 1250m 32% 8192Mi 53%" \
    grep -Eq '^res-node-1 +1250m +32% +8192Mi +53%' <<<"$out"

  # What kubectl asked for: discovery (/api, /apis), the metrics lists through the front, and
  # for nodes the core node list (allocatable).
  t_eq "kubectl top made these metrics.k8s.io and core requests (through the front)" \
    "/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods /apis/metrics.k8s.io/v1beta1/pods /apis/metrics.k8s.io/v1beta1/nodes /api/v1/nodes" \
    "$(jq -r -s --argjson n "$front_before" '.[$n:] | map(select(.path | test("^/apis/metrics.k8s.io|^/api/v1/"))
        | .path) | join(" ")' "$FRONT_REQUEST_LOG")"
  t_ok "kubectl top: every proxied request answered 200" \
    jq -e -s --argjson n "$front_before" '.[$n:] | map(select(.path | startswith("/apis/metrics.k8s.io"))) | all(.status == 200)' \
    "$FRONT_REQUEST_LOG"
  out=$(front_kubectl top pod -n ml nomem-0 2>&1)
  t_eq "kubectl top pod for a pod left out: NotFound from the adapter, through the front" \
    'Error from server (NotFound): podmetrics.metrics.k8s.io "ml/nomem-0" not found' "$out"
fi

# --- backend outage: the request fails (never a partial or empty 200) --------------------------------
stop_prometheus
sleep 6 # answers from before the outage may be served until --metrics-cache-ttl (5s) has passed
adapter_fetch "$G/pods"
json_answer "Prometheus down: pods list" 503
t_json "Prometheus down: ServiceUnavailable saying what failed" "$R_BODY" \
  '"\(.reason) \(.message | startswith("unable to fetch cpu metrics from prometheus: "))"' "ServiceUnavailable true"
adapter_fetch "$G"
json_answer "Prometheus down: discovery still answers" 200

stop_adapter
t_eq "the adapter exits 0 on SIGTERM" 0 "$?"
t_ok "no sanitizer report in the adapter log" \
  bash -c '! grep -Eq "AddressSanitizer|LeakSanitizer|runtime error" "$1"' _ "$ADAPTER_LOG"

# --- a rule that cannot name the namespace label: a clear 500 per request, not a crash ---------------
bad="$CMA_TMP/no-namespace-label.yaml"
sed '/^  cpu:/,/^  memory:/{/^        namespace:$/,/^          resource: namespace$/d}' \
  config/resource-rules.yaml >"$bad"
t_eq "oracle: the broken config drops only cpu's namespace override" 1 \
  "$(diff config/resource-rules.yaml "$bad" | grep -c '^< *namespace:$')"
if ! start_adapter "$bad"; then
  t_fail "start the adapter with resourceRules.cpu lacking the namespace override"
else
  # 503 until the first catalog (the RESTMapper) is there; the query is never built nor sent
  wait_status "$G/namespaces/ml/pods" 500 60
  status_answer "pods with no namespace label in resourceRules.cpu" 500 InternalError \
    "resourceRules.cpu.resources: unable to convert resource namespaces into label: no override or resources.template names it"
fi

t_summary
