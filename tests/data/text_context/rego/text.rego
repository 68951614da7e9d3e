# Free text that hides characters (issue 33 item 1): the twin of cedar/policies.cedar.
# input.context.text is present only when a string argument holds hidden characters, mixes
# scripts or has a whitespace run (callgate/policy/textflags.py); absent, its members are
# undefined and the rules below that read them do not hold.
package callgate.authz

hides if input.context.text.hidden

hides if input.context.text.mixed_script

poster if {
	input.capability == "notes.post"
	principal_in_role("poster")
	principal.tenant == input.context.tenant
}

permit contains "post" if {
	poster
	not hides
}

permit contains "confirm-hidden-text" if {
	poster
	hides
}

confirm["confirm-hidden-text"] := "free text hides characters or mixes scripts: the user confirms what the marks show"

forbid contains "forbid-hidden-title" if {
	input.capability == "notes.post"
	"/title" in input.context.text.hidden_at
}

forbid contains "forbid-spaced-channel" if {
	input.capability == "notes.post"
	"/channel" in input.context.text.whitespace_run_at
}
