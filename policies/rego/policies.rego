# callgate example policies in Rego: the twin of policies/cedar/policies.cedar, with the same
# meaning and the same ids. Each policy is one `permit` or `forbid` rule whose value is the
# policy id (Cedar's @id): the ids come back as the decision's reasons, exactly as Cedar's do.
# `confirm[id]` plays the part of Cedar's @confirm("why") on a permit.
#
# Helpers (entities.rego): `principal` (tenant, roles), `resource` (kind, name, tenant),
# `principal_in_role(r)` (Cedar `principal in Role::"r"`), `action_in(g)` (Cedar
# `action in Action::"g"`). The combining algorithm is decision.rego; the request schema is
# schema.rego (a request that does not conform never reaches these rules' verdict).
package callgate.authz

# ALLOW: anyone may read the weather, within their own tenant.
permit contains "weather-read-own-tenant" if {
	input.capability == "weather.read"
	principal.tenant == input.context.tenant
}

# CONFIRM: schedulers may create events in their tenant's calendars, confirmed by the user.
permit contains "calendar-create-scheduler" if {
	input.capability == "calendar.create"
	principal_in_role("scheduler")
	principal.tenant == input.context.tenant
	resource.tenant == input.context.tenant
}

confirm["calendar-create-scheduler"] := "creating a calendar event needs the user's confirmation"

# DENY: no event longer than 8 hours, whoever asks.
forbid contains "calendar-max-duration" if {
	input.capability == "calendar.create"
	input.context.args.duration_minutes > 480
}

# Only admins may delete files, and nobody deletes under /etc.
admin_deletes_file if {
	action_in("delete")
	principal_in_role("admin")
	principal.tenant == input.context.tenant
	resource.kind == "file"
}

permit contains "files-delete-admin" if {
	admin_deletes_file
	not untrusted_read
}

# LABEL: weather.get's results are labelled `untrusted`; once the session has taken one in, a
# delete needs the user's confirmation (input.context.session.labels).
untrusted_read if "untrusted" in input.context.session.labels

permit contains "files-delete-after-untrusted" if {
	admin_deletes_file
	untrusted_read
}

confirm["files-delete-after-untrusted"] := "the session read untrusted content: deleting needs the user's confirmation"

# METER (rate): at most 100 deletes per subject per hour (the `deletes` meter of files.delete@v1).
forbid contains "files-delete-rate" if {
	input.capability == "files.delete"
	input.context.usage.deletes["1h"].after > 100
}

# Cedar: context.args.path like "/etc/*" (`*` matches any characters, "/" included).
forbid contains "files-delete-protected" if {
	input.capability == "files.delete"
	startswith(input.context.args.path, "/etc/")
}
