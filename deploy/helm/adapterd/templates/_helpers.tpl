{{/* Names and labels shared by the templates. */}}
{{- define "adapterd.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "adapterd.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "adapterd.labels" -}}
{{ include "adapterd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "adapterd.adminSecret" -}}
{{- default (printf "%s-admin" (include "adapterd.fullname" .)) .Values.admin.existingSecret -}}
{{- end -}}

{{/* A probe of path (list $ path): HTTP, HTTPS with tls.secretName, a TCP connect with mutual TLS (the kubelet
has no client certificate to present). */}}
{{- define "adapterd.probe" -}}
{{- $ := index . 0 -}}
{{- if and $.Values.tls.secretName $.Values.tls.clientCA -}}
tcpSocket:
  port: http
{{- else -}}
httpGet:
  path: {{ index . 1 }}
  port: http
  {{- if $.Values.tls.secretName }}
  scheme: HTTPS
  {{- end }}
{{- end -}}
{{- end -}}

{{- define "adapterd.claim" -}}
{{- default (printf "%s-registry" (include "adapterd.fullname" .)) .Values.registry.persistence.existingClaim -}}
{{- end -}}
