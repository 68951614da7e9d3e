# Meters (issue 30 items 2-3): the twin of cedar/policies.cedar.
package callgate.authz

permit contains "mail-5-per-hour" if {
	input.capability == "mail.send"
	principal.tenant == input.context.tenant
	input.context.usage.sends["1h"].after <= 5
	not "private" in input.context.session.labels
}

permit contains "mail-after-private" if {
	input.capability == "mail.send"
	principal.tenant == input.context.tenant
	input.context.usage.sends["1h"].after <= 5
	"private" in input.context.session.labels
}

confirm["mail-after-private"] := "the session read a private document: sending needs the user's confirmation"

permit contains "docs-read-own-tenant" if {
	input.capability == "docs.read"
	principal.tenant == input.context.tenant
}

permit contains "refund-within-total" if {
	input.capability == "payments.refund"
	principal_in_role("payer")
	principal.tenant == input.context.tenant
	input.context.usage.refunded["24h"].after <= 100
}

permit contains "refund-confirm-large" if {
	input.capability == "payments.refund"
	principal_in_role("payer")
	principal.tenant == input.context.tenant
	input.context.usage.refunded["24h"].after <= 500
	input.context.usage.refunded["24h"].after > 100
}

confirm["refund-confirm-large"] := "refunds above 100.00 a day need the user's confirmation"

forbid := set()

permit contains "sms-any" if {
	input.capability == "sms.send"
	principal.tenant == input.context.tenant
	input.context.usage.texts["24h"].after <= 100000
}

permit contains "delete-3-a-day" if {
	input.capability == "records.delete"
	principal.tenant == input.context.tenant
	input.context.usage.deletes["24h"].after <= 3
}

permit contains "delete-confirm-beyond-3" if {
	input.capability == "records.delete"
	principal.tenant == input.context.tenant
	input.context.usage.deletes["24h"].after > 3
}

confirm["delete-confirm-beyond-3"] := "more than 3 deletes a day need the user's confirmation"
