{{- /*
callgate.toml and the policy directory, from values. Keys are those of callgate/config.py.
*/ -}}

{{- define "callgate.configToml" -}}
{{- include "callgate.validate" . -}}
{{- $v := .Values -}}
{{- $p := include "callgate.paths" . | fromYaml -}}
{{- $server := dict -}}
{{- range $role := list "agent" "confirmer" "authorizer" "executor" -}}
{{- if (get $v.listeners $role).enabled -}}
{{- $_ := set $server $role (dict "socket" (include "callgate.socketPath" (dict "ctx" $ "role" $role))) -}}
{{- else -}}
{{- $_ := set $server $role (dict) -}}
{{- end -}}
{{- end -}}
{{- $policy := dict
      "engine" $v.policy.engine
      "dir" $p.policies
      "watch" (eq $v.policy.reload "watch")
      "watch_interval_ms" $v.policy.watchIntervalMs
      "shadow" $v.policy.shadow -}}
{{- if eq $v.policy.engine "opa" -}}
{{- $_ := set $policy "opa_url" ($v.opa.url | default (printf "http://127.0.0.1:%d" (int $v.opa.port))) -}}
{{- $_ := set $policy "opa_timeout_ms" $v.opa.timeoutMs -}}
{{- $_ := set $policy "opa_upload_policies" false -}}
{{- end -}}
{{- $idem := dict
      "backend" $v.idempotency.backend
      "retention_seconds" $v.idempotency.retentionSeconds
      "expired_policy" $v.idempotency.expiredPolicy -}}
{{- if eq $v.idempotency.backend "postgres" -}}
{{- $_ := set $idem "dsn_file" (printf "%s/postgres/%s" $p.secrets $v.idempotency.postgres.key) -}}
{{- else -}}
{{- $_ := set $idem "path" (printf "%s/idempotency.db" $p.state) -}}
{{- end -}}
{{- $cred := dict
      "issuer" $v.credentials.issuer
      "ttl_seconds" $v.credentials.ttlSeconds
      "max_ttl_seconds" $v.credentials.maxTtlSeconds
      "rotation_seconds" $v.credentials.rotationSeconds
      "executors" $v.credentials.executors
      "key_dir" (printf "%s/ring" $p.keys) -}}
{{- $cfg := dict
      "server" $server
      "policy" $policy
      "store" (include "callgate.storeConfig" . | fromJson)
      "limits" (dict
          "max_argument_bytes" $v.limits.maxArgumentBytes
          "max_depth" $v.limits.maxDepth
          "max_sessions" $v.limits.maxSessions)
      "confirmation" (dict "ttl_seconds" $v.confirmation.ttlSeconds)
      "credentials" $cred
      "idempotency" $idem
      "budgets" (dict
          "max_model_calls" $v.budgets.maxModelCalls
          "max_tool_calls" $v.budgets.maxToolCalls
          "max_wall_clock_seconds" $v.budgets.maxWallClockSeconds
          "max_result_bytes" $v.budgets.maxResultBytes
          "max_external_cost_micros" $v.budgets.maxExternalCostMicros) -}}
{{- $o := $v.observability -}}
{{- $obs := dict -}}
{{- if $o.metrics.enabled -}}
{{- $_ := set $obs "metrics_address" (printf "0.0.0.0:%d" (int $o.metrics.port)) -}}
{{- end -}}
{{- if $o.decisionLog.enabled -}}
{{- $_ := set $obs "decision_log" (include "callgate.decisionLogTarget" .) -}}
{{- $_ := set $obs "decision_log_mode" $o.decisionLog.mode -}}
{{- $_ := set $obs "decision_log_queue" $o.decisionLog.queue -}}
{{- $_ := set $obs "decision_log_mask" $o.decisionLog.mask -}}
{{- end -}}
{{- if ne $o.tracing.exporter "none" -}}
{{- $_ := set $obs "tracing_exporter" $o.tracing.exporter -}}
{{- $_ := set $obs "tracing_sample_ratio" $o.tracing.sampleRatio -}}
{{- if and (eq $o.tracing.exporter "otlp") $o.tracing.endpoint -}}
{{- $_ := set $obs "tracing_endpoint" $o.tracing.endpoint -}}
{{- end -}}
{{- end -}}
{{- if $obs -}}
{{- $_ := set $cfg "observability" $obs -}}
{{- end -}}
{{- $_ := set $cfg "log" (dict "format" $v.log.format) -}}
{{- if $v.secrets -}}
{{- $secrets := list -}}
{{- range $s := $v.secrets -}}
{{- $secrets = append $secrets (dict
      "name" $s.name
      "file" (printf "%s/%s/%s" $p.secrets $s.name $s.key)
      "tools" $s.tools
      "resources" ($s.resources | default (list "*"))) -}}
{{- end -}}
{{- $_ := set $cfg "secrets" $secrets -}}
{{- end -}}
{{- $cfg = mustMergeOverwrite $cfg (deepCopy $v.config.extra) -}}
# callgate.toml rendered by the callgate Helm chart from its values (docs/DEPLOY.md).
{{- include "callgate.toml" $cfg }}
{{- end -}}

{{- /* The policy directory as a JSON map: path under it -> file content. Bundled files (the
engine's directory and tools/) first, then policies.files over them. JSON, not YAML: Helm's toYaml
drops the final newline of the last value, and policy bytes must stay exact (ToolSpec digests). */ -}}
{{- /* [store]: SQLite per pod, or the PostgreSQL database of idempotency.postgres (store.backend). */ -}}
{{- define "callgate.storeConfig" -}}
{{- $v := .Values -}}
{{- $p := include "callgate.paths" . | fromYaml -}}
{{- if eq ($v.store.backend | default "sqlite") "postgres" -}}
{{- if ne $v.idempotency.backend "postgres" -}}
{{- fail "store.backend: postgres needs idempotency.backend: postgres (the DSN Secret of idempotency.postgres)" -}}
{{- end -}}
{{- dict "backend" "postgres" "dsn_file" (printf "%s/postgres/%s" $p.secrets $v.idempotency.postgres.key) | toJson -}}
{{- else -}}
{{- dict "backend" "sqlite" "path" (printf "%s/callgate.db" $p.state) "synchronous" $v.store.synchronous "durability" ($v.store.durability | default "barrier") | toJson -}}
{{- end -}}
{{- end -}}

{{- define "callgate.policyFiles" -}}
{{- $files := dict -}}
{{- if .Values.policies.bundled -}}
{{- $engineDir := ternary "cedar/" "rego/" (eq .Values.policy.engine "cedar") -}}
{{- $bundled := include "callgate.bundledPolicies" . | fromYaml -}}
{{- range $path, $b64 := $bundled -}}
{{- if or (hasPrefix "tools/" $path) (hasPrefix $engineDir $path) -}}
{{- $_ := set $files $path (b64dec $b64) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $path, $content := .Values.policies.files -}}
{{- $_ := set $files $path $content -}}
{{- end -}}
{{- if not $files -}}
{{- fail "callgate: no policy files (set policies.bundled=true or give policies.files)" -}}
{{- end -}}
{{- toJson $files -}}
{{- end -}}

{{- /* ConfigMap key of a policy path: characters a key cannot hold become "_"; two paths with
the same key are an error. Returns the map key -> path as JSON. */ -}}
{{- define "callgate.policyKeys" -}}
{{- $files := include "callgate.policyFiles" . | fromJson -}}
{{- $keys := dict -}}
{{- range $path := keys $files | sortAlpha -}}
{{- $key := regexReplaceAll "[^-._a-zA-Z0-9]" $path "_" -}}
{{- if hasKey $keys $key -}}
{{- fail (printf "callgate: policy files %s and %s map to the same ConfigMap key %s" (get $keys $key) $path $key) -}}
{{- end -}}
{{- $_ := set $keys $key $path -}}
{{- end -}}
{{- toJson $keys -}}
{{- end -}}

{{- /* Checks across values that values.schema.json cannot express. */ -}}
{{- define "callgate.validate" -}}
{{- $v := .Values -}}
{{- if gt (int $v.credentials.ttlSeconds) (int $v.credentials.maxTtlSeconds) -}}
{{- fail "callgate: credentials.ttlSeconds must not exceed credentials.maxTtlSeconds" -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $s := $v.secrets -}}
{{- if hasKey $seen $s.name -}}
{{- fail (printf "callgate: two secrets are named %s" $s.name) -}}
{{- end -}}
{{- $_ := set $seen $s.name true -}}
{{- end -}}
{{- if and (eq $v.idempotency.backend "postgres") $v.networkPolicy.enabled $v.networkPolicy.egress.restrict (not $v.idempotency.postgres.to) -}}
{{- fail "callgate: idempotency.postgres.to must name the database (NetworkPolicy peers) while networkPolicy.egress.restrict is on" -}}
{{- end -}}
{{- if and (eq $v.policy.engine "opa") $v.opa.url $v.networkPolicy.enabled $v.networkPolicy.egress.restrict (not $v.networkPolicy.egress.rules) -}}
{{- fail "callgate: opa.url is outside the pod: add an egress rule for it to networkPolicy.egress.rules" -}}
{{- end -}}
{{- if eq (int $v.opa.port) (int $v.opa.diagnosticPort) -}}
{{- fail "callgate: opa.port and opa.diagnosticPort must differ" -}}
{{- end -}}
{{- $o := $v.observability -}}
{{- if and $o.metrics.enabled (include "callgate.opaContainer" .) (has (int $o.metrics.port) (list (int $v.opa.port) (int $v.opa.diagnosticPort))) -}}
{{- fail "callgate: observability.metrics.port must differ from opa.port and opa.diagnosticPort (the pod shares one network namespace)" -}}
{{- end -}}
{{- if and (eq $o.tracing.exporter "otlp") $v.networkPolicy.enabled $v.networkPolicy.egress.restrict (not $v.networkPolicy.egress.rules) -}}
{{- fail "callgate: observability.tracing.exporter otlp sends spans to a collector: add an egress rule for it to networkPolicy.egress.rules" -}}
{{- end -}}
{{- if and $v.networkPolicy.enabled $v.networkPolicy.egress.restrict (not $v.networkPolicy.egress.rules) -}}
{{- fail "callgate: networkPolicy.egress.restrict applies to every container of the pod, your agent included (a NetworkPolicy cannot select one container): list what the agent and executors reach (e.g. the model API) in networkPolicy.egress.rules, or set networkPolicy.egress.restrict=false" -}}
{{- end -}}
{{- if and $o.metrics.podMonitor.enabled (not $o.metrics.enabled) -}}
{{- fail "callgate: observability.metrics.podMonitor needs observability.metrics.enabled (the port it scrapes)" -}}
{{- end -}}
{{- end -}}

{{- /* [observability] decision_log: "stdout" or the file's path on the decision-log emptyDir. */ -}}
{{- define "callgate.decisionLogTarget" -}}
{{- $d := .Values.observability.decisionLog.destination -}}
{{- if eq $d "stdout" -}}
stdout
{{- else -}}
{{- $p := include "callgate.paths" . | fromYaml -}}
{{- printf "%s/%s" $p.decisionLog (trimPrefix "/var/log/callgate/" $d) -}}
{{- end -}}
{{- end -}}

{{- /* True ("true") when the decision log is a file on its own emptyDir. */ -}}
{{- define "callgate.decisionLogFile" -}}
{{- $d := .Values.observability.decisionLog -}}
{{- if and $d.enabled (ne $d.destination "stdout") -}}true{{- end -}}
{{- end -}}
