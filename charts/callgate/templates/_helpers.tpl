{{- /*
Names, labels, paths and the TOML writer.

Every named template of this chart takes a context with .Values (this chart's values) and .Release:
the chart's own templates pass ".", another chart that depends on this one passes
  (dict "Values" .Values.callgate "Release" .Release)
Nothing reads .Chart or .Files, so a template renders the same in either context (the policy files
of policies.bundled are embedded in _bundled_policies.tpl for that reason).
*/ -}}

{{- define "callgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else if contains "callgate" .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-callgate" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- /* Standard labels of the chart's objects. */ -}}
{{- define "callgate.labels" -}}
app.kubernetes.io/name: callgate
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Values.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{- /* The label that marks a pod carrying this release's callgate sidecar; the NetworkPolicy
selects pods by it. Add it to the pod template of a Deployment that includes the sidecar. */ -}}
{{- define "callgate.podLabels" -}}
callgate/sidecar: {{ include "callgate.fullname" . | quote }}
{{- end -}}

{{- /* Every path the chart renders, under .Values.paths.root (empty in clusters). A YAML map:
use it as (include "callgate.paths" . | fromYaml). */ -}}
{{- define "callgate.paths" -}}
{{- $r := .Values.paths.root -}}
config: {{ printf "%s/etc/callgate/config" $r | quote }}
configFile: {{ printf "%s/etc/callgate/config/callgate.toml" $r | quote }}
policies: {{ printf "%s/etc/callgate/policies" $r | quote }}
opaAuthz: {{ printf "%s/etc/callgate/opa" $r | quote }}
secrets: {{ printf "%s/etc/callgate/secrets" $r | quote }}
sockets: {{ printf "%s/run/callgate" $r | quote }}
keys: {{ printf "%s/run/callgate/keys" $r | quote }}
state: {{ printf "%s/var/lib/callgate" $r | quote }}
decisionLog: {{ printf "%s/var/log/callgate" $r | quote }}
tmp: {{ printf "%s/tmp" $r | quote }}
{{- end -}}

{{- /* The roles whose listener is enabled, as a YAML list. */ -}}
{{- define "callgate.roles" -}}
{{- range $role := list "agent" "executor" "confirmer" "authorizer" }}
{{- if (get $.Values.listeners $role).enabled }}
- {{ $role }}
{{- end }}
{{- end }}
{{- end -}}

{{- /* Unix socket of a role: (dict "ctx" $ctx "role" "agent"). */ -}}
{{- define "callgate.socketPath" -}}
{{- $p := include "callgate.paths" .ctx | fromYaml -}}
{{- printf "%s/%s/%s.sock" $p.sockets .role .role -}}
{{- end -}}

{{- define "callgate.image" -}}
{{- if .digest -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}
{{- end -}}

{{- /* True ("true") when the pod runs the OPA container. */ -}}
{{- define "callgate.opaContainer" -}}
{{- if and (eq .Values.policy.engine "opa") (not .Values.opa.url) -}}true{{- end -}}
{{- end -}}

{{- /*
TOML writer for callgate.toml: a map of sections. A map value is a [section] of key = value lines,
a non-empty list of maps is an array of tables ([[secrets]]), anything else is a top-level key.
Numbers from values files are float64: integral ones are written as integers, as callgate's
loader wants (it refuses 300.0 for an int key), except the keys of callgate.toml.floatKeys, which
are always written as floats (it refuses 1 for a float key).
*/ -}}
{{- define "callgate.toml" -}}
{{- $doc := . -}}
{{- range $k := keys $doc | sortAlpha -}}
{{- $v := get $doc $k -}}
{{- if not (or (kindIs "map" $v) (and (kindIs "slice" $v) (gt (len $v) 0) (kindIs "map" (first $v)))) }}
{{ include "callgate.toml.key" $k }} = {{ include "callgate.toml.value" $v }}
{{- end -}}
{{- end -}}
{{- range $k := keys $doc | sortAlpha -}}
{{- $v := get $doc $k -}}
{{- if kindIs "map" $v }}

[{{ include "callgate.toml.key" $k }}]
{{- range $kk := keys $v | sortAlpha }}
{{ include "callgate.toml.key" $kk }} = {{ include (ternary "callgate.toml.float" "callgate.toml.value" (has $kk (include "callgate.toml.floatKeys" . | fromYamlArray))) (get $v $kk) }}
{{- end -}}
{{- else if and (kindIs "slice" $v) (gt (len $v) 0) (kindIs "map" (first $v)) -}}
{{- range $item := $v }}

[[{{ include "callgate.toml.key" $k }}]]
{{- range $kk := keys $item | sortAlpha }}
{{ include "callgate.toml.key" $kk }} = {{ include "callgate.toml.value" (get $item $kk) }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}
{{ end -}}

{{- /* Keys of callgate.toml sections whose values are floats (callgate/config.py). */ -}}
{{- define "callgate.toml.floatKeys" -}}
- tracing_sample_ratio
{{- end -}}

{{- define "callgate.toml.float" -}}
{{- if not (or (kindIs "float64" .) (kindIs "float32" .) (kindIs "int" .) (kindIs "int64" .) (kindIs "int32" .)) -}}
{{- fail (printf "callgate.toml: %v is not a number" .) -}}
{{- end -}}
{{- $f := float64 . -}}
{{- if eq $f (float64 (int64 $f)) -}}{{ printf "%d.0" (int64 $f) }}{{- else -}}{{ $f }}{{- end -}}
{{- end -}}

{{- define "callgate.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{- define "callgate.toml.value" -}}
{{- $v := . -}}
{{- if kindIs "string" $v -}}
{{- toJson $v -}}
{{- else if kindIs "bool" $v -}}
{{- $v -}}
{{- else if or (kindIs "float64" $v) (kindIs "float32" $v) -}}
{{- if eq (float64 (int64 $v)) (float64 $v) -}}{{ int64 $v }}{{- else -}}{{ $v }}{{- end -}}
{{- else if or (kindIs "int" $v) (kindIs "int64" $v) (kindIs "int32" $v) -}}
{{- $v -}}
{{- else if kindIs "slice" $v -}}
[{{- range $i, $e := $v -}}{{- if $i }}, {{ end -}}{{ include "callgate.toml.value" $e }}{{- end -}}]
{{- else if kindIs "map" $v -}}
{ {{- range $i, $k := keys $v | sortAlpha -}}{{- if $i }},{{ end }} {{ include "callgate.toml.key" $k }} = {{ include "callgate.toml.value" (get $v $k) }}{{- end }} }
{{- else -}}
{{- fail (printf "callgate.toml: cannot write a %s (%v) to TOML" (kindOf $v) $v) -}}
{{- end -}}
{{- end -}}
