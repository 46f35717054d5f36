{{/* The release's name prefix, at most 63 characters (a DNS label). */}}
{{- define "tensorwire.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tensorwire.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tensorwire.labels" -}}
{{ include "tensorwire.selector" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* Where the services find each other: the dispatcher's client and service addresses, the hub's URL. */}}
{{- define "tensorwire.clientAddress" -}}
tcp://{{ include "tensorwire.fullname" . }}-dispatcher:{{ .Values.ports.client }}
{{- end -}}
{{- define "tensorwire.serviceAddress" -}}
tcp://{{ include "tensorwire.fullname" . }}-dispatcher:{{ .Values.ports.service }}
{{- end -}}
{{- define "tensorwire.hubUrl" -}}
http://{{ include "tensorwire.fullname" . }}-hub:{{ .Values.ports.hub }}
{{- end -}}

{{- define "tensorwire.image" -}}
image: {{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end -}}

{{/* The Dockerfile's user (uid 10001) everywhere; fsGroup makes the mounted Secret's files readable to it. */}}
{{- define "tensorwire.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
{{- end -}}

{{- define "tensorwire.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  capabilities: {drop: [ALL]}
{{- end -}}

{{/* The keys volume of a role: only the files that role reads (docs/security.md), plus the client's for the probes.
     .role is "dispatcher" or "service". */}}
{{- define "tensorwire.keysVolume" -}}
- name: keys
  secret:
    secretName: {{ .root.Values.keysSecret }}
    defaultMode: 0440
    items:
      - {key: dispatcher.key, path: dispatcher.key}
      - {key: client.key_secret, path: client.key_secret}
      - {key: client.token, path: client.token}
      - {key: service.token, path: service.token}
      {{- if eq .role "dispatcher" }}
      - {key: dispatcher.key_secret, path: dispatcher.key_secret}
      - {key: admin.token, path: admin.token}
      - {key: client.key, path: clients/client.key}
      - {key: service.key, path: services/service.key}
      {{- else }}
      - {key: service.key_secret, path: service.key_secret}
      {{- end }}
{{- end -}}

{{/* startup, readiness and liveness probes running .cmd (a list) */}}
{{- define "tensorwire.probes" -}}
{{- $p := .root.Values.probes -}}
startupProbe:
  exec: {command: {{ toJson .cmd }}}
  periodSeconds: 2
  timeoutSeconds: {{ $p.timeoutSeconds }}
  failureThreshold: 60
readinessProbe:
  exec: {command: {{ toJson .cmd }}}
  periodSeconds: {{ $p.periodSeconds }}
  timeoutSeconds: {{ $p.timeoutSeconds }}
  failureThreshold: {{ $p.failureThreshold }}
livenessProbe:
  exec: {command: {{ toJson .cmd }}}
  periodSeconds: {{ $p.periodSeconds }}
  timeoutSeconds: {{ $p.timeoutSeconds }}
  failureThreshold: {{ $p.failureThreshold }}
{{- end -}}

{{/* A shell line setting $devices to the worker pod's devices, space-separated: BACKEND:(k*N+i) for pod ordinal k. */}}
{{- define "tensorwire.podDevices" -}}
k=${HOSTNAME##*-}; devices=""; for i in $(seq 0 {{ sub .Values.workers.devicesPerPod 1 }}); do devices="$devices {{ .Values.workers.backend }}:$((k * {{ .Values.workers.devicesPerPod }} + i))"; done
{{- end -}}
