{{- /*
Shared by the ServiceMonitor, the PodMonitor and the PrometheusRule (templates/servicemonitor.yaml,
podmonitor.yaml, prometheusrule.yaml): how Prometheus verifies the adapter's serving certificate,
and the job label every scrape gets so that the alerting rules find it.
*/ -}}

{{- /*
cma.monitorTLS (dict "top" $ "monitor" <serviceMonitor or podMonitor values> "namespace" <the
monitor's namespace>): the tlsConfig. The monitor's own tlsConfig when set; else the serving
certificate's CA (cert-manager's ca.crt, or tls.ca from a ConfigMap this chart renders) with the
Service's DNS name, when the monitor lives in the release namespace (a CA Secret or ConfigMap must be
in the monitor's namespace); else insecureSkipVerify (the self-signed certificate has no CA to trust).
*/ -}}
{{- define "cma.monitorTLS" -}}
{{- $top := .top -}}
{{- $fullname := include "cma.fullname" $top -}}
{{- $ns := include "cma.namespace" $top -}}
{{- $mode := include "cma.tlsMode" $top -}}
{{- if .monitor.tlsConfig -}}
{{ toYaml .monitor.tlsConfig }}
{{- else if and (ne $mode "self-signed") (eq .namespace $ns) -}}
ca:
  {{- if eq $mode "cert-manager" }}
  secret:
    name: {{ $fullname }}
    key: ca.crt
  {{- else }}
  configMap:
    name: {{ $fullname }}-serving-ca
    key: ca.crt
  {{- end }}
serverName: {{ $fullname }}.{{ $ns }}.svc
{{- else -}}
insecureSkipVerify: true
{{- end -}}
{{- end -}}

{{- /* cma.monitorRelabelings: job="custom-metrics-adapter" (what the alerting rules select), then the user's. */ -}}
{{- define "cma.monitorRelabelings" -}}
- action: replace
  targetLabel: job
  replacement: custom-metrics-adapter
{{- with .relabelings }}
{{ toYaml . }}
{{- end }}
{{- end -}}
