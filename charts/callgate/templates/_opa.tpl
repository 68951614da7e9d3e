{{- /*
OPA's own authorization policy (opa run --authorization=basic), mounted into the OPA container only.

OPA listens on 127.0.0.1 inside the pod, and every container of a pod shares that loopback: the
agent container could reach it too. So the OPA beside callgate is read-only for everyone:
decisions (POST under /v1/data/callgate) and reads of the callgate policies and data (callgate's
readiness check compares them with its own files) are allowed; uploading, patching or deleting
policies or data, ad-hoc queries and everything else is refused (401). Policies change only
through the ConfigMap.
*/ -}}
{{- define "callgate.opaAuthzPolicy" -}}
# Written by the callgate Helm chart: the OPA beside callgate is read-only (docs/DEPLOY.md).
package system.authz

default allow := false

# Decisions: POST /v1/data/callgate/authz/decision (and any other rule under data.callgate).
allow if {
	input.method == "POST"
	input.path[0] == "v1"
	input.path[1] == "data"
	input.path[2] == "callgate"
}

# Probes (also served on the diagnostic port).
allow if {
	input.method == "GET"
	input.path == ["health"]
}

# callgate's readiness check: GET /v1/policies[/<id>] and GET /v1/data/callgate/<key>.
allow if {
	input.method == "GET"
	input.path[0] == "v1"
	input.path[1] == "policies"
}

allow if {
	input.method == "GET"
	input.path[0] == "v1"
	input.path[1] == "data"
	input.path[2] == "callgate"
}
{{ end -}}
