{{/* The release's full name: RELEASE-drover, or RELEASE when it holds the chart's name. */}}
{{- define "drover.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "drover.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; app.kubernetes.io/instance finds all of a release's. */}}
{{- define "drover.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "drover.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "drover.selectorLabels" -}}
app.kubernetes.io/name: {{ include "drover.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "drover.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "drover.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "drover.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{- define "drover.coordinatorSecret" -}}
{{- default (printf "%s-coordinator" (include "drover.fullname" .)) .Values.coordinator.existingSecret -}}
{{- end -}}

{{- define "drover.databaseSecret" -}}
{{- default (printf "%s-database" (include "drover.fullname" .)) .Values.coordinator.databaseSecret -}}
{{- end -}}

{{/* The Secret of the runner token, "" when each manager makes its own runner. */}}
{{- define "drover.runnerSecret" -}}
{{- if .Values.runners.secret -}}
{{- .Values.runners.secret -}}
{{- else if .Values.runnerToken -}}
{{- printf "%s-runner" (include "drover.fullname" .) -}}
{{- else if not .Values.coordinator.enabled -}}
{{- fail "runnerToken or runners.secret is required (or coordinator.enabled, for managers that create their runner on it)" -}}
{{- end -}}
{{- end -}}

{{- define "drover.coordinatorURL" -}}
{{- if .Values.coordinatorURL -}}
{{- .Values.coordinatorURL -}}
{{- else if .Values.coordinator.enabled -}}
{{- printf "http://%s-coordinator.%s.svc:%v" (include "drover.fullname" .) .Release.Namespace .Values.coordinator.port -}}
{{- else -}}
{{- fail "coordinatorURL is required (or coordinator.enabled)" -}}
{{- end -}}
{{- end -}}

{{- define "drover.jobNamespace" -}}
{{- default .Release.Namespace .Values.runners.kubernetes.namespace -}}
{{- end -}}

{{/* A TOML value of a YAML scalar or list. */}}
{{- define "drover.toml" -}}
{{- if kindIs "map" . -}}
{{- fail "runners.kubernetes: a table is not supported as a value; write it in runners.config" -}}
{{- else -}}
{{- toJson . -}}
{{- end -}}
{{- end -}}

{{/* config.toml. */}}
{{- define "drover.config" -}}
{{- if .Values.config -}}
{{ tpl .Values.config . }}
{{- else -}}
concurrent = {{ int .Values.concurrent }}
check_interval = {{ int .Values.checkInterval }}
shutdown_timeout = {{ int .Values.shutdownTimeout }}
log_level = {{ .Values.logLevel | quote }}
log_format = {{ .Values.logFormat | quote }}
listen_address = ":{{ .Values.metrics.port }}"

[[runners]]
  name = {{ .Values.runners.name | quote }}
  url = "$DROVER_URL"
  token = "$DROVER_TOKEN"
  executor = {{ .Values.runners.executor | quote }}
{{- with .Values.runners.config }}
{{ tpl . $ | indent 2 }}
{{- end }}
{{- if .Values.persistence.enabled }}
  [runners.store]
    name = "file"
    [runners.store.file]
      path = "/var/lib/drover/store"
{{- end }}
{{- if eq .Values.runners.executor "kubernetes" }}
  [runners.kubernetes]
    namespace = {{ include "drover.jobNamespace" . | quote }}
{{- if not .Values.runners.kubernetes.helper_image }}
{{- fail "runners.kubernetes.helper_image is required: the helper image (scripts/images.sh builds drover-helper:SHA12)" }}
{{- end }}
{{- range $k, $v := .Values.runners.kubernetes }}
{{- if and (ne $k "namespace") (not (and (kindIs "string" $v) (eq $v ""))) }}
    {{ $k }} = {{ include "drover.toml" $v }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
