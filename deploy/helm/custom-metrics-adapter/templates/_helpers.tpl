{{- /*
Shared definitions: names (prometheus-adapter's chart rules: fullname = release name, plus the
chart name unless the release name contains it), labels, the namespace, the service account, and
"cma.groups", the one place that decides which API groups this release registers and serves.
*/ -}}

{{- define "cma.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cma.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "cma.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "cma.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cma.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "cma.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cma.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cma.labels" -}}
{{ include "cma.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.customLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- /* metadata lines every object carries: labels and customAnnotations. */ -}}
{{- define "cma.metadata" -}}
labels:
  {{- include "cma.labels" . | nindent 2 }}
{{- with .Values.customAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- /* The service account as an RBAC subject. */ -}}
{{- define "cma.subject" -}}
- kind: ServiceAccount
  name: {{ include "cma.serviceAccountName" . }}
  namespace: {{ include "cma.namespace" . }}
{{- end -}}

{{- /*
cma.groups: "custom: true|false", "external: ...", "resource: ..." (read it with fromYaml).
A group is on when apiGroups.<group> is true, or auto and the rule values give it rules
(prometheus-adapter's chart: custom = rules.default or rules.custom, external = rules.external,
resource = rules.resource), and the layout does not leave it to another server. Contradictions
stop the rendering with a message naming the values involved.
*/ -}}
{{- define "cma.groups" -}}
{{- $v := .Values -}}
{{- $layout := toString (default "all" $v.layout) -}}
{{- $leftOut := dict "all" (list) "next-to-keda" (list "external" "resource") "next-to-metrics-server" (list "resource") -}}
{{- if not (hasKey $leftOut $layout) -}}
{{- fail (printf "layout: %q is not one of: all, next-to-keda, next-to-metrics-server" $layout) -}}
{{- end -}}
{{- $owner := dict "external" "KEDA" "resource" "metrics-server" -}}
{{- $rules := default (dict) $v.rules -}}
{{- $hasRules := dict "custom" (or (eq (toString $rules.default) "true") (not (empty $rules.custom))) "external" (not (empty $rules.external)) "resource" (not (empty $rules.resource)) -}}
{{- $ruleKey := dict "custom" "rules.default or rules.custom" "external" "rules.external" "resource" "rules.resource" -}}
{{- $switches := default (dict) $v.apiGroups -}}
{{- range $g := list "custom" "external" "resource" }}
{{- $want := "auto" -}}
{{- if and (hasKey $switches $g) (not (kindIs "invalid" (get $switches $g))) -}}
{{- $want = toString (get $switches $g) -}}
{{- end -}}
{{- $layoutAllows := not (has $g (get $leftOut $layout)) -}}
{{- $on := false -}}
{{- if eq $want "auto" -}}
{{- $on = and (get $hasRules $g) $layoutAllows -}}
{{- else if eq $want "true" -}}
{{- if not $layoutAllows -}}
{{- fail (printf "apiGroups.%s is true but layout %s leaves that group to %s (only one server can own an API group version)" $g $layout (get $owner $g)) -}}
{{- end -}}
{{- if and (not (get $hasRules $g)) (not $rules.existing) -}}
{{- fail (printf "apiGroups.%s is true but %s is empty and rules.existing is not set: the adapter would not serve the group its APIService points at" $g (get $ruleKey $g)) -}}
{{- end -}}
{{- $on = true -}}
{{- else if ne $want "false" -}}
{{- fail (printf "apiGroups.%s: %q is not one of: auto, true, false" $g $want) -}}
{{- end }}
{{ $g }}: {{ $on }}
{{- end -}}
{{- end -}}

{{- /* cma.tlsMode: "values" (tls.enable), "cert-manager" or "self-signed". */ -}}
{{- define "cma.tlsMode" -}}
{{- if and .Values.tls.enable .Values.certManager.enabled -}}
{{- fail "tls.enable and certManager.enabled are both true: choose one source for the serving certificate" -}}
{{- else if .Values.tls.enable -}}
{{- range $k := list "ca" "certificate" -}}
{{- if not (contains "-----BEGIN CERTIFICATE-----" (toString (get $.Values.tls $k))) -}}
{{- fail (printf "tls.enable is true but tls.%s is not a PEM certificate" $k) -}}
{{- end -}}
{{- end -}}
{{- if not (regexMatch "-----BEGIN [A-Z ]*PRIVATE KEY-----" (toString .Values.tls.key)) -}}
{{- fail "tls.enable is true but tls.key is not a PEM private key" -}}
{{- end -}}
values
{{- else if .Values.certManager.enabled -}}
cert-manager
{{- else -}}
self-signed
{{- end -}}
{{- end -}}

{{- /* cma.apiservice: one APIService. Argument: dict "root" $ "group" G "version" V "priority" N. */ -}}
{{- define "cma.apiservice" -}}
{{- $ := .root -}}
{{- $tls := include "cma.tlsMode" $ -}}
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: {{ .version }}.{{ .group }}
  labels:
    {{- include "cma.labels" $ | nindent 4 }}
  {{- if or (eq $tls "cert-manager") $.Values.customAnnotations }}
  annotations:
    {{- if eq $tls "cert-manager" }}
    cert-manager.io/inject-ca-from: {{ printf "%s/%s-root-cert" (include "cma.namespace" $) (include "cma.fullname" $) }}
    {{- end }}
    {{- with $.Values.customAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
spec:
  group: {{ .group }}
  version: {{ .version }}
  groupPriorityMinimum: 100
  versionPriority: {{ .priority }}
  service:
    name: {{ include "cma.fullname" $ }}
    namespace: {{ include "cma.namespace" $ }}
    port: {{ $.Values.service.port }}
  {{- if eq $tls "values" }}
  caBundle: {{ $.Values.tls.ca | b64enc }}
  insecureSkipTLSVerify: false
  {{- else if eq $tls "cert-manager" }}
  insecureSkipTLSVerify: false
  {{- else }}
  # The adapter's certificate is self-signed (tls.enable or certManager.enabled verify it).
  insecureSkipTLSVerify: true
  {{- end }}
{{- end -}}

{{- /* cma.hpaReader: the HPA controller's read access to one group. Argument: dict "root" $
"group" G "short" S "resources" LIST "verbs" LIST. */ -}}
{{- define "cma.hpaReader" -}}
{{- $ := .root -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "cma.fullname" $ }}-{{ .short }}-reader
  {{- include "cma.metadata" $ | nindent 2 }}
rules:
- apiGroups: [{{ .group }}]
  resources: {{ toJson .resources }}
  verbs: {{ toJson .verbs }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ include "cma.fullname" $ }}-{{ .short }}-reader-hpa
  {{- include "cma.metadata" $ | nindent 2 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ include "cma.fullname" $ }}-{{ .short }}-reader
subjects:
- kind: ServiceAccount
  name: horizontal-pod-autoscaler
  namespace: kube-system
{{- end -}}
