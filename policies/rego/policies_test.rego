# `opa test policies/rego` (tests/test_engine_opa.py runs it): the example policies, one
# expectation per policy id and per edge, on the input document callgate sends (docs/ENGINES.md).
# The same requests run through Cedar, rego-cpp and OPA in tests/test_engines_parity.py.
package callgate.authz_test

import data.callgate.authz

req(subject, capability, resource, args) := {
	"subject": {"tenant": "acme", "id": subject},
	"capability": capability,
	"resource": {"id": resource, "kind": split(resource, ":")[0], "name": substring(resource, indexof(resource, ":") + 1, -1)},
	"context": {"tenant": "acme", "tool": "t@v1", "args": args},
}

weather := {"city": "Paris", "date": "2026-07-20"}

event(minutes) := {"calendar_id": "primary", "title": "standup", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": minutes}

effect_of(doc) := doc.effect

ids_of(doc) := [r.policy_id | some r in doc.reasons]

codes_of(doc) := [r.code | some r in doc.reasons]

test_weather_allowed_in_own_tenant if {
	d := authz.decision with input as req("alice", "weather.read", "weather:Paris", weather)
	d.effect == "allow"
	ids_of(d) == ["weather-read-own-tenant"]
	codes_of(d) == ["policy_permit"]
}

test_weather_unknown_user_is_of_the_session_tenant if {
	d := authz.decision with input as req("zed", "weather.read", "weather:Paris", weather)
	d.effect == "allow"
}

test_weather_other_tenant_denied if {
	r := json.patch(req("alice", "weather.read", "weather:Paris", weather), [
		{"op": "replace", "path": "/subject/tenant", "value": "globex"},
		{"op": "replace", "path": "/context/tenant", "value": "globex"},
	])
	d := authz.decision with input as r
	d.effect == "deny"
	codes_of(d) == ["no_matching_permit"]
}

test_calendar_scheduler_needs_confirmation if {
	d := authz.decision with input as req("alice", "calendar.create", "calendar:primary", event(30))
	d.effect == "confirm"
	ids_of(d) == ["calendar-create-scheduler"]
	codes_of(d) == ["confirm_required"]
}

test_calendar_480_minutes_is_at_the_limit if {
	d := authz.decision with input as req("alice", "calendar.create", "calendar:primary", event(480))
	d.effect == "confirm"
}

test_calendar_481_minutes_forbidden if {
	d := authz.decision with input as req("alice", "calendar.create", "calendar:primary", event(481))
	d.effect == "deny"
	ids_of(d) == ["calendar-max-duration"]
	codes_of(d) == ["policy_forbid"]
}

test_calendar_non_scheduler_denied if {
	d := authz.decision with input as req("bob", "calendar.create", "calendar:primary", event(30))
	codes_of(d) == ["no_matching_permit"]
}

test_calendar_duration_as_string_is_an_evaluation_error if {
	# "481" > 480 is true in Rego (strings sort after numbers); the schema check catches it first.
	d := authz.decision with input as req("alice", "calendar.create", "calendar:primary", event("481"))
	d.effect == "deny"
	codes_of(d) == ["policy_evaluation_error"]
}

test_calendar_missing_duration_is_an_evaluation_error if {
	args := json.remove(event(30), ["duration_minutes"])
	d := authz.decision with input as req("alice", "calendar.create", "calendar:primary", args)
	codes_of(d) == ["policy_evaluation_error"]
}

test_admin_deletes_files if {
	d := authz.decision with input as req("carol", "files.delete", "file:/tmp/x", {"path": "/tmp/x"})
	d.effect == "allow"
	ids_of(d) == ["files-delete-admin"]
}

test_nobody_deletes_under_etc if {
	d := authz.decision with input as req("carol", "files.delete", "file:/etc/passwd", {"path": "/etc/passwd"})
	d.effect == "deny"
	ids_of(d) == ["files-delete-protected"]
}

test_etc_itself_is_not_under_etc if {
	d := authz.decision with input as req("carol", "files.delete", "file:/etc", {"path": "/etc"})
	d.effect == "allow"
}

test_non_admin_cannot_delete if {
	d := authz.decision with input as req("bob", "files.delete", "file:/tmp/x", {"path": "/tmp/x"})
	codes_of(d) == ["no_matching_permit"]
}

test_admin_deletes_only_files if {
	d := authz.decision with input as req("carol", "files.delete", "calendar:primary", {"path": "/tmp/x"})
	codes_of(d) == ["no_matching_permit"]
}

test_unknown_capability_is_an_evaluation_error if {
	d := authz.decision with input as req("carol", "files.purge", "file:/tmp/x", {"path": "/tmp/x"})
	codes_of(d) == ["policy_evaluation_error"]
}

test_undeclared_argument_is_an_evaluation_error if {
	d := authz.decision with input as req("alice", "weather.read", "weather:Paris", object.union(weather, {"role": "admin"}))
	codes_of(d) == ["policy_evaluation_error"]
}

test_empty_input_is_denied if {
	d := authz.decision with input as {}
	d.effect == "deny"
}

test_roles_come_from_data if {
	# a role granted in data (not in the request) is what counts
	d := authz.decision with input as req("bob", "files.delete", "file:/tmp/x", {"path": "/tmp/x"})
		with data.callgate.entities.users.bob as {"tenant": "acme", "roles": ["admin"]}
	d.effect == "allow"
}

test_roles_are_transitive if {
	d := authz.decision with input as req("bob", "files.delete", "file:/tmp/x", {"path": "/tmp/x"})
		with data.callgate.entities.users.bob as {"tenant": "acme", "roles": ["ops"]}
		with data.callgate.entities.roles as {"ops": {"parents": ["admin"]}, "admin": {"parents": []}}
	d.effect == "allow"
}

# `conforms` (what decision.rego uses) and `request_errors` (what explains a refusal) agree.
samples := [
	{},
	{"subject": {"tenant": "acme", "id": "alice"}},
	req("alice", "weather.read", "weather:Paris", weather),
	req("alice", "weather.read", "weather:Paris", {"city": "Paris"}),
	req("alice", "weather.read", "weather:Paris", object.union(weather, {"x": 1})),
	req("alice", "weather.read", "weather:Paris", "Paris"),
	req("alice", "calendar.create", "calendar:primary", event(30)),
	req("alice", "calendar.create", "calendar:primary", event(480.5)),
	req("alice", "calendar.create", "calendar:primary", event("30")),
	req("carol", "files.delete", "file:/tmp/x", {"path": "/tmp/x"}),
	req("carol", "files.delete", "file:/tmp/x", {"path": "/tmp/x", "reason": "r"}),
	req("carol", "files.delete", "file:/tmp/x", {"path": "/tmp/x", "reason": 1}),
	req("carol", "files.delete", "file:/tmp/x", {"reason": "r"}),
	req("carol", "files.purge", "file:/tmp/x", {"path": "/tmp/x"}),
	json.remove(req("alice", "weather.read", "weather:Paris", weather), ["context/tool"]),
	json.patch(req("alice", "weather.read", "weather:Paris", weather), [{"op": "add", "path": "/context/extra", "value": 1}]),
	json.patch(req("alice", "weather.read", "weather:Paris", weather), [{"op": "replace", "path": "/subject/id", "value": 7}]),
]

test_conforms_agrees_with_request_errors if {
	every s in samples {
		verdicts_agree(s)
	}
}

verdicts_agree(s) if {
	authz.conforms with input as s
	count(authz.request_errors) == 0 with input as s
}

verdicts_agree(s) if {
	not authz.conforms with input as s
	count(authz.request_errors) > 0 with input as s
}

# Shadow mode: ids in data.callgate.shadow (data.json) or input.shadow (the config's
# policy.shadow) are evaluated, not enforced; a different would-be effect is reported.
test_no_policy_is_in_shadow_mode_by_default if {
	count(authz.shadow_ids) == 0 with input as req("alice", "weather.read", "weather:Paris", weather)
	d := authz.decision with input as req("alice", "weather.read", "weather:Paris", weather)
	not d.shadow
}

test_shadow_forbid_from_data_is_reported_not_enforced if {
	d := authz.decision with input as req("alice", "calendar.create", "calendar:primary", event(481))
		with data.callgate.shadow as ["calendar-max-duration"]
	d.effect == "confirm"
	ids_of(d) == ["calendar-create-scheduler"]
	d.shadow == {"effect": "deny", "policy_ids": ["calendar-max-duration"]}
}

test_shadow_forbid_from_input_is_reported_not_enforced if {
	r := object.union(req("alice", "calendar.create", "calendar:primary", event(481)), {"shadow": ["calendar-max-duration"]})
	d := authz.decision with input as r
	d.effect == "confirm"
	d.shadow == {"effect": "deny", "policy_ids": ["calendar-max-duration"]}
}

test_shadow_ids_from_data_and_input_add_up if {
	r := object.union(req("alice", "weather.read", "weather:Paris", weather), {"shadow": ["b"]})
	authz.shadow_ids == {"a", "b"} with input as r with data.callgate.shadow as ["a"]
}

test_shadow_permit_is_not_enforced if {
	d := authz.decision with input as req("alice", "weather.read", "weather:Paris", weather)
		with data.callgate.shadow as ["weather-read-own-tenant"]
	d.effect == "deny"
	codes_of(d) == ["no_matching_permit"]
	d.shadow == {"effect": "allow", "policy_ids": ["weather-read-own-tenant"]}
}

test_shadow_confirm_permit_reports_confirm if {
	d := authz.decision with input as req("alice", "calendar.create", "calendar:primary", event(30))
		with data.callgate.shadow as ["calendar-create-scheduler"]
	codes_of(d) == ["no_matching_permit"]
	d.shadow == {"effect": "confirm", "policy_ids": ["calendar-create-scheduler"]}
}

test_shadow_agreement_carries_no_shadow if {
	# the shadow forbid does not match: same effect, nothing to report
	d := authz.decision with input as req("alice", "calendar.create", "calendar:primary", event(30))
		with data.callgate.shadow as ["calendar-max-duration"]
	d.effect == "confirm"
	not d.shadow

	# a shadow permit beside an enforced forbid: deny either way
	e := authz.decision with input as req("alice", "calendar.create", "calendar:primary", event(481))
		with data.callgate.shadow as ["calendar-create-scheduler"]
	ids_of(e) == ["calendar-max-duration"]
	not e.shadow
}

test_shadow_does_not_bypass_the_schema_check if {
	d := authz.decision with input as req("alice", "calendar.create", "calendar:primary", event("481"))
		with data.callgate.shadow as ["calendar-max-duration"]
	codes_of(d) == ["policy_evaluation_error"]
	not d.shadow
}

test_unknown_shadow_ids_change_nothing if {
	d := authz.decision with input as req("alice", "calendar.create", "calendar:primary", event(481))
		with data.callgate.shadow as ["no-such-policy"]
	ids_of(d) == ["calendar-max-duration"]
	not d.shadow
}

# `no_match` (what the combining algorithm answers) is the `default decision` (what an undefined
# decision falls back to): a default rule's value must be a literal, so the two are spelled twice.
test_no_match_is_the_default_decision if {
	d := authz.decision with input as req("bob", "calendar.create", "calendar:primary", event(30))
	d == authz.no_match
	fallback := authz.decision with input as req("bob", "calendar.create", "calendar:primary", event(30))
		with authz.verdict as undefined_verdict
	fallback == authz.no_match
}

undefined_verdict(_, _) := 1 if false

# Meters and labels (docs/POLICIES.md "Meters and labels"): what the request sees of the session
# (context.session.labels) and of the `deletes` meter (context.usage).
seen(r, state) := object.union(r, {"context": state})

delete_x := req("carol", "files.delete", "file:/tmp/x", {"path": "/tmp/x"})

deletes(n) := {"usage": {"deletes": {"1h": {"before": n - 1, "after": n}}}}

test_delete_after_an_untrusted_read_needs_confirmation if {
	d := authz.decision with input as seen(delete_x, {"session": {"labels": ["untrusted"]}})
	d.effect == "confirm"
	ids_of(d) == ["files-delete-after-untrusted"]
	codes_of(d) == ["confirm_required"]
}

test_other_labels_change_nothing if {
	d := authz.decision with input as seen(delete_x, {"session": {"labels": ["pii"]}})
	d.effect == "allow"
	ids_of(d) == ["files-delete-admin"]
}

test_the_100th_delete_of_the_hour_is_allowed if {
	d := authz.decision with input as seen(delete_x, deletes(100))
	d.effect == "allow"
}

test_the_101st_delete_of_the_hour_is_forbidden if {
	d := authz.decision with input as seen(delete_x, deletes(101))
	d.effect == "deny"
	ids_of(d) == ["files-delete-rate"]
	codes_of(d) == ["policy_forbid"]
}

test_the_rate_wins_over_a_confirmation if {
	d := authz.decision with input as seen(delete_x, object.union(deletes(101), {"session": {"labels": ["untrusted"]}}))
	ids_of(d) == ["files-delete-rate"]
}

test_an_untrusted_read_never_lets_a_non_admin_delete if {
	r := req("bob", "files.delete", "file:/tmp/x", {"path": "/tmp/x"})
	d := authz.decision with input as seen(r, {"session": {"labels": ["untrusted"]}})
	codes_of(d) == ["no_matching_permit"]
}
