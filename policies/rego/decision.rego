# The decision document callgate reads at data.callgate.authz.decision (docs/ENGINES.md):
#
#   {"effect": "allow" | "deny" | "confirm",
#    "reasons": [{"code": "...", "policy_id": "...", "message": "..."}],
#    "shadow": {"effect": "...", "policy_ids": ["..."]}}      (only when shadow policies disagree)
#
# Same combining algorithm and reason codes as the Cedar engine (docs/POLICIES.md):
#   a request that does not conform to the schema -> deny, policy_evaluation_error (schema.rego)
#   any forbid satisfied                          -> deny, policy_forbid + the forbids' ids
#   any satisfied permit with confirm[id]         -> confirm, confirm_required + those ids
#   any other permit satisfied                    -> allow, policy_permit + the permits' ids
#   nothing matched                               -> deny, no_matching_permit (the default)
# A broad permit never bypasses a confirmation: one satisfied confirm permit makes it confirm.
#
# Shadow mode (Cedar's @shadow): the ids in data.callgate.shadow (data.json) and in input.shadow
# (the config's policy.shadow, sent by the engines) are evaluated but not enforced. The enforced
# decision ignores those permits and forbids; when the decision with every policy has another
# effect, the document carries "shadow": that effect and the ids that decided it.
package callgate.authz

default decision := {"effect": "deny", "reasons": [{
	"code": "no_matching_permit",
	"policy_id": "",
	"message": "no permit policy matched (default deny)",
}]}

# The default decision as a value (a default rule's value must be a literal; a test keeps the
# two equal).
no_match := {"effect": "deny", "reasons": [{
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
} else := enforced if {
	count(shadow_ids) == 0
	enforced := verdict(permit, forbid)
} else := doc if {
	enforced := verdict(permit - shadow_ids, forbid - shadow_ids)
	doc := with_shadow(enforced, verdict(permit, forbid))
}

# Policy ids in shadow mode. Data and input are both optional (undefined -> no ids).
shadow_ids contains id if some id in data.callgate.shadow

shadow_ids contains id if some id in input.shadow

# The combining algorithm over a set of satisfied permits and forbids (always defined).
verdict(permits, forbids) := {"effect": "deny", "reasons": reasons} if {
	count(forbids) > 0
	reasons := [{"code": "policy_forbid", "policy_id": id} | some id in sort(forbids)]
} else := {"effect": "confirm", "reasons": reasons} if {
	reasons := [{"code": "confirm_required", "policy_id": id, "message": confirm[id]} |
		some id in sort(permits)
		confirm[id]
	]
	count(reasons) > 0
} else := {"effect": "allow", "reasons": reasons} if {
	count(permits) > 0
	reasons := [{"code": "policy_permit", "policy_id": id} | some id in sort(permits)]
} else := no_match

# Agreement adds nothing; a different effect is reported with the ids that decided it.
with_shadow(enforced, would) := enforced if {
	enforced.effect == would.effect
} else := object.union(enforced, {"shadow": {
	"effect": would.effect,
	"policy_ids": [r.policy_id | some r in would.reasons; r.policy_id != ""],
}})
