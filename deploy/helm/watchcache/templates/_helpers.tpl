{{- define "watchcache.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "watchcache.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "watchcache.labels" -}}
{{ include "watchcache.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "watchcache.serviceAccountName" -}}
{{- default (include "watchcache.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Refuses values that cannot work, naming the value to fix. */}}
{{- define "watchcache.validate" -}}
{{- if not (has .Values.mode (list "recommended" "proxy")) -}}
{{- fail (printf "mode: %q is neither recommended nor proxy" .Values.mode) -}}
{{- end -}}
{{- if and (eq .Values.mode "recommended") (empty .Values.etcd.endpoints) -}}
{{- fail "etcd.endpoints: the recommended set-up reads the cluster's etcd; name at least one endpoint (or set mode: proxy)" -}}
{{- end -}}
{{- if not (has .Values.antiAffinity (list "preferred" "required" "none")) -}}
{{- fail (printf "antiAffinity: %q is not preferred, required or none" .Values.antiAffinity) -}}
{{- end -}}
{{- end -}}
