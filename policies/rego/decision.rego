# The decision document callgate reads at data.callgate.authz.decision (docs/ENGINES.md):
#
#   {"effect": "allow" | "deny" | "confirm",
#    "reasons": [{"code": "...", "policy_id": "...", "message": "..."}]}
#
# Same combining algorithm and reason codes as the Cedar engine (docs/POLICIES.md):
#   a request that does not conform to the schema -> deny, policy_evaluation_error (schema.rego)
#   any forbid satisfied                          -> deny, policy_forbid + the forbids' ids
#   any satisfied permit with confirm[id]         -> confirm, confirm_required + those ids
#   any other permit satisfied                    -> allow, policy_permit + the permits' ids
#   nothing matched                               -> deny, no_matching_permit (the default)
# A broad permit never bypasses a confirmation: one satisfied confirm permit makes it confirm.
package callgate.authz

default decision := {"effect": "deny", "reasons": [{
	"code": "no_matching_permit",
	"policy_id": "",
	"message": "no permit policy matched (default deny)",
}]}

decision := {"effect": "deny", "reasons": [{
	"code": "policy_evaluation_error",
	"policy_id": "",
	"message": concat("", ["request does not conform to the schema: ", concat("; ", sort(request_errors))]),
}]} if {
	not conforms
} else := {"effect": "deny", "reasons": reasons} if {
	count(forbid) > 0
	reasons := [{"code": "policy_forbid", "policy_id": id} | some id in sort(forbid)]
} else := {"effect": "confirm", "reasons": reasons} if {
	reasons := [{"code": "confirm_required", "policy_id": id, "message": confirm[id]} |
		some id in sort(permit)
		confirm[id]
	]
	count(reasons) > 0
} else := {"effect": "allow", "reasons": reasons} if {
	count(permit) > 0
	reasons := [{"code": "policy_permit", "policy_id": id} | some id in sort(permit)]
}
