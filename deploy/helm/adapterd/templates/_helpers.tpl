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

{{- define "adapterd.claim" -}}
{{- default (printf "%s-registry" (include "adapterd.fullname" .)) .Values.registry.persistence.existingClaim -}}
{{- end -}}
