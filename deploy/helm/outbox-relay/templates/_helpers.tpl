{{/* The release's base name: the release name, with the chart's name when it does not hold it. */}}
{{- define "outbox-relay.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 55 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The labels of a component ("outbox-relay" or "outbox-relay-gateway"): its
app.kubernetes.io/name is the component, which the ServiceMonitors make the
job label, so the alerts' job=~"outbox-relay|outbox-relay-gateway" hold
whatever the release is called.
*/}}
{{- define "outbox-relay.selector" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{- define "outbox-relay.labels" -}}
{{ include "outbox-relay.selector" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "outbox-relay.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/*
The pod template of a component: dict root (the top scope), name (the
component), values (.Values.relay or .Values.gateway), args (the
container's), volumes (extra volumes and mounts, a dict or nil).
*/}}
{{- define "outbox-relay.pod" -}}
{{- $v := .values -}}
metadata:
  labels:
    {{- include "outbox-relay.selector" . | nindent 4 }}
  annotations:
    # A changed config rolls the pods.
    checksum/config: {{ $v.config | sha256sum }}
spec:
  terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
  automountServiceAccountToken: false
  {{- with .root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .root.Values.podSecurityContext | nindent 4 }}
  containers:
    - name: {{ .container }}
      image: {{ include "outbox-relay.image" .root }}
      imagePullPolicy: {{ .root.Values.image.pullPolicy }}
      args:
        {{- toYaml .args | nindent 8 }}
      {{- with .root.Values.envFromSecrets }}
      envFrom:
        {{- range . }}
        - secretRef:
            name: {{ . }}
        {{- end }}
      {{- end }}
      ports:
        - name: metrics
          containerPort: 9108
      {{- with $v.livenessProbe }}
      livenessProbe:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.readinessProbe }}
      readinessProbe:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      resources:
        {{- toYaml $v.resources | nindent 8 }}
      securityContext:
        {{- toYaml .root.Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: config
          mountPath: /etc/outbox-relay
          readOnly: true
        {{- if .state }}
        - name: state
          mountPath: /var/lib/outbox-relay
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ .configMap }}
    {{- if .state }}
    - name: state
      persistentVolumeClaim:
        claimName: {{ .state }}
    {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* The Service a component is scraped through (it takes no traffic). */}}
{{- define "outbox-relay.service" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ .fullname }}
  labels:
    {{- include "outbox-relay.labels" . | nindent 4 }}
spec:
  selector:
    {{- include "outbox-relay.selector" . | nindent 4 }}
  ports:
    - name: metrics
      port: 9108
      targetPort: metrics
  # Keep a pod that is not ready (a standby, a sink down) in the endpoints:
  # its metrics say why.
  publishNotReadyAddresses: true
{{- end -}}

{{- define "outbox-relay.pdb" -}}
{{- if .values.podDisruptionBudget.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .fullname }}
  labels:
    {{- include "outbox-relay.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ .values.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "outbox-relay.selector" . | nindent 6 }}
{{- end }}
{{- end -}}

{{- define "outbox-relay.servicemonitor" -}}
{{- if .root.Values.serviceMonitor.enabled }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ .fullname }}
  labels:
    {{- include "outbox-relay.labels" . | nindent 4 }}
    {{- with .root.Values.serviceMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  # job = the Service's app.kubernetes.io/name: what the alerts select.
  jobLabel: app.kubernetes.io/name
  selector:
    matchLabels:
      {{- include "outbox-relay.selector" . | nindent 6 }}
  endpoints:
    - port: metrics
      path: /metrics
      interval: {{ .root.Values.serviceMonitor.interval }}
{{- end }}
{{- end -}}
