{{/* At most 41 characters: "<fullname>-postgresql" names a StatefulSet, whose pods carry a
     controller-revision-hash label "<name>-<10-character hash>" that must fit in 63. */}}
{{- define "switchboard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 41 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 41 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "switchboard.labels" -}}
app.kubernetes.io/name: switchboard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "gateway"). */}}
{{- define "switchboard.selectorLabels" -}}
app.kubernetes.io/name: switchboard
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "switchboard.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "switchboard.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-env" (include "switchboard.fullname" .)) -}}
{{- end -}}

{{/* A key of the chart's Secret: the value given, else the value the release's Secret already
     holds (so upgrades keep it: a new ENCRYPTION_KEY would make stored data unreadable), else a
     generated one. `helm template` has no cluster to look in and generates; tools that render
     that way on every sync must set the value (see docs/kubernetes.md). */}}
{{- define "switchboard.secretValue" -}}
{{- /* Decided once per render: the checksum annotations render config.yaml again and must see the
     same value as the Secret, or every upgrade would restart the pods. */ -}}
{{- $memo := printf "_chosen%s" .key -}}
{{- if not (hasKey .root.Values.secrets $memo) -}}
{{- $existing := lookup "v1" "Secret" .root.Release.Namespace (include "switchboard.secretName" .root) -}}
{{- $kept := "" -}}
{{- if and $existing $existing.data -}}
{{- $kept = get $existing.data .key | default "" | b64dec -}}
{{- end -}}
{{- $_ := set .root.Values.secrets $memo (.given | default $kept | default .generated) -}}
{{- end -}}
{{- get .root.Values.secrets $memo -}}
{{- end -}}

{{- define "switchboard.configMapName" -}}
{{- printf "%s-config" (include "switchboard.fullname" .) -}}
{{- end -}}

{{- define "switchboard.databaseUrl" -}}
{{- if .Values.postgresql.enabled -}}
{{- printf "postgres://switchboard:%s@%s-postgresql:5432/switchboard" (.Values.postgresql.password | urlquery | replace "+" "%20") (include "switchboard.fullname" .) -}}
{{- else -}}
{{- required "externalDatabase.url is required when postgresql.enabled is false" .Values.externalDatabase.url -}}
{{- end -}}
{{- end -}}

{{- define "switchboard.natsUrl" -}}
{{- if .Values.nats.enabled -}}
{{- printf "nats://%s-nats:4222" (include "switchboard.fullname" .) -}}
{{- else -}}
{{- required "externalNats.url is required when nats.enabled is false" .Values.externalNats.url -}}
{{- end -}}
{{- end -}}

{{/* The gateway's environment: settings from the ConfigMap, every key of the Secret (it alone
     checks the administrative key). */}}
{{- define "switchboard.envFrom" -}}
- configMapRef:
    name: {{ include "switchboard.configMapName" . }}
- secretRef:
    name: {{ include "switchboard.secretName" . }}
{{- end -}}

{{/* The settings alone, for components given only the Secret's keys they use (switchboard.secretEnv). */}}
{{- define "switchboard.settingsFrom" -}}
- configMapRef:
    name: {{ include "switchboard.configMapName" . }}
{{- end -}}

{{/* Named keys of the Secret as env entries: (dict "root" $ "keys" (list "DATABASE_URL" …)). */}}
{{- define "switchboard.secretEnv" -}}
{{- range .keys }}
- name: {{ . }}
  valueFrom: { secretKeyRef: { name: {{ include "switchboard.secretName" $.root }}, key: {{ . }} } }
{{- end }}
{{- end -}}

{{/* Probes on /health (liveness) and /ready (readiness: database and bus). */}}
{{- define "switchboard.probes" -}}
livenessProbe:
  httpGet: { path: /health, port: http }
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet: { path: /ready, port: http }
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
startupProbe:
  httpGet: { path: /health, port: http }
  periodSeconds: 2
  failureThreshold: 450 # 15 min: each process migrates the database before it serves /health
{{- end -}}

{{- define "switchboard.podExtras" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The digest of the ConfigMap's and Secret's entries a session pod reads. A setting only the
gateway or the dispatcher reads (the rate limit, the retry schedule) then restarts none of the
session pods, one per instance, whose restarts reconnect every WhatsApp account at once. */}}
{{- define "switchboard.sessionConfigRevision" -}}
{{- $rendered := include (print .Template.BasePath "/config.yaml") . -}}
{{- regexFindAll "(?m)^  (PUBLIC_BASE_URL|NETWORK_DRIVER|LOG_LEVEL|MEDIA_LINK_TTL_SECONDS|PAIRING_TIMEOUT_MS|DATABASE_URL|NATS_URL|ENCRYPTION_KEY): .*$" $rendered -1 | join "\n" | sha256sum -}}
{{- end -}}
