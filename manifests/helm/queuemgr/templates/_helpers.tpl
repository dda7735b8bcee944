{{/*
Labels every object of the chart carries beside its own app.kubernetes.io/name (and
component): they name the chart, the release and the version. Selectors never use
them, so a selector is the same as the kustomize base's.
*/}}
{{- define "queuemgr.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | trunc 63 | quote }}
{{- end }}

{{/*
The image: repository@digest when a digest is set, else repository:tag, the tag
defaulting to the chart's appVersion.
*/}}
{{- define "queuemgr.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}
