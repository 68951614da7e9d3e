# Time in the context (issue 30 item 1): the twin of cedar/policies.cedar. input.context.now is
# the reference clock (RFC 3339); input.context.millis holds it and every time argument as
# milliseconds (since the epoch; a duration: its length).
package callgate.authz

day_ms := 86400000

hour_ms := 3600000

in_window if {
	m := input.context.millis
	m.now <= m.args.start
	m.args.start < m.now + (30 * day_ms)
	m.args.repeat_until < m.now + (90 * day_ms)
}

permit contains "schedule-within-30-days" if {
	input.capability == "events.schedule"
	principal_in_role("scheduler")
	principal.tenant == input.context.tenant
	in_window
	input.context.millis.args.length <= 4 * hour_ms
}

permit contains "schedule-long-confirm" if {
	input.capability == "events.schedule"
	principal_in_role("scheduler")
	principal.tenant == input.context.tenant
	in_window
	input.context.millis.args.length > 4 * hour_ms
}

confirm["schedule-long-confirm"] := "an event longer than 4 hours needs the user's confirmation"

# 2027-01-01T00:00:00Z in epoch milliseconds
permit contains "reports-until-2027" if {
	input.capability == "reports.fetch"
	principal.tenant == input.context.tenant
	input.context.millis.now < 1798761600000
}

# no forbid in this folder (decision.rego reads the set)
forbid := set()
