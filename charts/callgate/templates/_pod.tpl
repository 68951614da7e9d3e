{{- /*
The pod parts of the callgate sidecar: what a Deployment (this chart's example, or another
chart's) includes to run callgate beside its own containers. See docs/DEPLOY.md, "Including".

  metadata.labels        callgate.podLabels        (the NetworkPolicy selects pods by it)
  metadata.annotations   callgate.podAnnotations   (checksums: a config change rolls the pods;
                                                    prometheus.io/* with observability.metrics)
  spec.securityContext   callgate.podSecurityContext
  spec.initContainers    callgate.initContainers   (callgate + OPA when sidecar.native)
  spec.containers        callgate.containers       (callgate + OPA when not sidecar.native)
  a container's mounts   callgate.socketMount      (dict "ctx" $ctx "role" "agent"|"executor"|...)
  spec.volumes           callgate.volumes
*/ -}}

{{- define "callgate.podAnnotations" -}}
checksum/callgate-config: {{ include "callgate.configToml" . | sha256sum }}
{{- if eq .Values.policy.reload "roll" }}
checksum/callgate-policies: {{ include "callgate.policyFiles" . | sha256sum }}
{{- end }}
{{- if include "callgate.opaContainer" . }}
checksum/callgate-opa: {{ include "callgate.opaAuthzPolicy" . | sha256sum }}
{{- end }}
{{- with .Values.observability.metrics }}
{{- if and .enabled .annotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | int | toString | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end }}
{{- end -}}

{{- define "callgate.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.podSecurityContext.runAsUser }}
runAsGroup: {{ .Values.podSecurityContext.runAsGroup }}
fsGroup: {{ .Values.podSecurityContext.fsGroup }}
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- /* The securityContext of every container the chart renders: not overridable. */ -}}
{{- define "callgate.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- /* The mount of a role's socket directory, for the container that plays the role. */ -}}
{{- define "callgate.socketMount" -}}
{{- $p := include "callgate.paths" .ctx | fromYaml -}}
{{- if not (get .ctx.Values.listeners .role).enabled -}}
{{- fail (printf "callgate.socketMount: the %s listener is not enabled (listeners.%s.enabled)" .role .role) -}}
{{- end -}}
- name: callgate-{{ .role }}-socket
  mountPath: {{ printf "%s/%s" $p.sockets .role | quote }}
  readOnly: true
{{- end -}}

{{- /* exec probe command: python -m callgate.server.healthcheck over every enabled socket
(.service: a health service name, e.g. the policy snapshot's; .live: any answer counts). */ -}}
{{- define "callgate.probeCommand" -}}
{{- $ctx := .ctx -}}
- python
- -m
- callgate.server.healthcheck
- --timeout
- {{ sub .probe.timeoutSeconds 1 | max 1 | quote }}
{{- if .live }}
- --live
{{- end }}
{{- with .service }}
- --service
- {{ . | quote }}
{{- end }}
{{- range $role := include "callgate.roles" $ctx | fromYamlArray }}
- {{ printf "unix:%s" (include "callgate.socketPath" (dict "ctx" $ctx "role" $role)) | quote }}
{{- end }}
{{- end -}}

{{- define "callgate.probeTiming" -}}
periodSeconds: {{ .periodSeconds }}
timeoutSeconds: {{ .timeoutSeconds }}
failureThreshold: {{ .failureThreshold }}
{{- end -}}

{{- define "callgate.sidecarContainer" -}}
{{- $v := .Values -}}
{{- $p := include "callgate.paths" . | fromYaml -}}
- name: callgate
  image: {{ include "callgate.image" $v.image | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if $v.sidecar.native }}
  restartPolicy: Always
  {{- end }}
  command:
    - callgate
  args:
    {{- if $v.sidecar.verbose }}
    - --verbose
    {{- end }}
    - serve
    - --config
    - {{ $p.configFile | quote }}
  {{- with $v.sidecar.extraEnv }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if $v.observability.metrics.enabled }}
  ports:
    - name: metrics
      containerPort: {{ $v.observability.metrics.port }}
      protocol: TCP
  {{- end }}
  startupProbe:
    exec:
      command:
        {{- include "callgate.probeCommand" (dict "ctx" . "probe" $v.sidecar.probes.startup) | nindent 8 }}
    {{- include "callgate.probeTiming" $v.sidecar.probes.startup | nindent 4 }}
  readinessProbe:
    exec:
      command:
        {{- include "callgate.probeCommand" (dict "ctx" . "probe" $v.sidecar.probes.readiness "service" "callgate.v1.PolicySnapshot") | nindent 8 }}
    {{- include "callgate.probeTiming" $v.sidecar.probes.readiness | nindent 4 }}
  livenessProbe:
    exec:
      command:
        {{- include "callgate.probeCommand" (dict "ctx" . "probe" $v.sidecar.probes.liveness "live" true) | nindent 8 }}
    {{- include "callgate.probeTiming" $v.sidecar.probes.liveness | nindent 4 }}
  resources:
    {{- toYaml $v.sidecar.resources | nindent 4 }}
  securityContext:
    {{- include "callgate.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: callgate-config
      mountPath: {{ $p.config | quote }}
      readOnly: true
    - name: callgate-policies
      mountPath: {{ $p.policies | quote }}
      readOnly: true
    {{- range $role := include "callgate.roles" . | fromYamlArray }}
    - name: callgate-{{ $role }}-socket
      mountPath: {{ printf "%s/%s" $p.sockets $role | quote }}
    {{- end }}
    - name: callgate-keys
      mountPath: {{ $p.keys | quote }}
    - name: callgate-state
      mountPath: {{ $p.state | quote }}
    - name: callgate-tmp
      mountPath: {{ $p.tmp | quote }}
    {{- if include "callgate.decisionLogFile" . }}
    - name: callgate-decision-log
      mountPath: {{ $p.decisionLog | quote }}
    {{- end }}
    {{- range $s := $v.secrets }}
    - name: callgate-secret-{{ $s.name }}
      mountPath: {{ printf "%s/%s" $p.secrets $s.name | quote }}
      readOnly: true
    {{- end }}
    {{- if eq $v.idempotency.backend "postgres" }}
    - name: callgate-postgres-dsn
      mountPath: {{ printf "%s/postgres" $p.secrets | quote }}
      readOnly: true
    {{- end }}
{{- end -}}

{{- define "callgate.opaSidecarContainer" -}}
{{- $v := .Values -}}
{{- $p := include "callgate.paths" . | fromYaml -}}
- name: opa
  image: {{ include "callgate.image" $v.opa.image | quote }}
  imagePullPolicy: {{ $v.opa.image.pullPolicy }}
  {{- if $v.sidecar.native }}
  restartPolicy: Always
  {{- end }}
  args:
    - run
    - --server
    - {{ printf "--addr=127.0.0.1:%d" (int $v.opa.port) | quote }}
    - {{ printf "--diagnostic-addr=127.0.0.1:%d" (int $v.opa.diagnosticPort) | quote }}
    - --authorization=basic
    - --ignore=.*
    - --ignore=*_test.rego
    - --log-format=json
    {{- if eq $v.policy.reload "watch" }}
    - --watch
    {{- end }}
    - {{ printf "%s/rego" $p.policies | quote }}
    - {{ $p.opaAuthz | quote }}
  {{- /* No kubelet probes: they would dial the pod IP, and OPA listens on loopback only. The
  kubelet restarts OPA when it exits; callgate's probes report whether OPA serves callgate's
  revision (startup waits for it, readiness fails while it does not). */}}
  resources:
    {{- toYaml $v.opa.resources | nindent 4 }}
  securityContext:
    {{- include "callgate.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: callgate-policies
      mountPath: {{ $p.policies | quote }}
      readOnly: true
    - name: callgate-opa-authz
      mountPath: {{ $p.opaAuthz | quote }}
      readOnly: true
{{- end -}}

{{- /* callgate (after OPA, which it asks) as list items of containers or initContainers. */ -}}
{{- define "callgate.allContainers" -}}
{{- if include "callgate.opaContainer" . -}}
{{ include "callgate.opaSidecarContainer" . }}
{{ end -}}
{{ include "callgate.sidecarContainer" . }}
{{- end -}}

{{- define "callgate.initContainers" -}}
{{- if .Values.sidecar.native -}}
{{- include "callgate.allContainers" . -}}
{{- end -}}
{{- end -}}

{{- define "callgate.containers" -}}
{{- if not .Values.sidecar.native -}}
{{- include "callgate.allContainers" . -}}
{{- end -}}
{{- end -}}

{{- define "callgate.volumes" -}}
{{- $v := .Values -}}
{{- $name := include "callgate.fullname" . -}}
- name: callgate-config
  configMap:
    name: {{ printf "%s-config" $name }}
- name: callgate-policies
  configMap:
    name: {{ printf "%s-policies" $name }}
    items:
      {{- range $key, $path := include "callgate.policyKeys" . | fromJson }}
      - key: {{ $key | quote }}
        path: {{ $path | quote }}
      {{- end }}
{{- if include "callgate.opaContainer" . }}
- name: callgate-opa-authz
  configMap:
    name: {{ printf "%s-opa" $name }}
{{- end }}
{{- range $role := include "callgate.roles" . | fromYamlArray }}
- name: callgate-{{ $role }}-socket
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}
- name: callgate-keys
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
- name: callgate-state
  emptyDir:
    sizeLimit: {{ $v.state.sizeLimit }}
- name: callgate-tmp
  emptyDir:
    medium: Memory
    sizeLimit: 16Mi
{{- if include "callgate.decisionLogFile" . }}
- name: callgate-decision-log
  emptyDir:
    sizeLimit: {{ $v.observability.decisionLog.sizeLimit }}
{{- end }}
{{- range $s := $v.secrets }}
- name: callgate-secret-{{ $s.name }}
  secret:
    secretName: {{ $s.secretName }}
    defaultMode: 0440
    items:
      - key: {{ $s.key | quote }}
        path: {{ $s.key | quote }}
{{- end }}
{{- if eq $v.idempotency.backend "postgres" }}
- name: callgate-postgres-dsn
  secret:
    secretName: {{ $v.idempotency.postgres.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ $v.idempotency.postgres.key | quote }}
        path: {{ $v.idempotency.postgres.key | quote }}
{{- end }}
{{- end -}}
