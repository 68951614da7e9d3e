# Entities as Cedar sees them (policies/cedar/entities.json), from data.callgate.entities
# (policies/rego/data.json): users with their tenant and roles, roles with their parent roles,
# static resources. A principal or resource that is not in the data gets what the Cedar engine
# adds for the request: the session's tenant, no roles, and kind/name from the resource id.
package callgate.authz

entities := data.callgate.entities

principal := p if {
	p := entities.users[input.subject.id]
} else := {"tenant": input.subject.tenant, "roles": []}

resource := r if {
	r := entities.resources[input.resource.id]
} else := {"kind": input.resource.kind, "name": input.resource.name, "tenant": input.subject.tenant}

role_graph := {role: object.get(r, "parents", []) | some role, r in entities.roles}

# Every role the principal is in, directly or through parent roles (Cedar's `in` is transitive).
principal_roles := graph.reachable(role_graph, principal.roles)

principal_in_role(role) if role in principal_roles

# Cedar `action in Action::"group"`: the action itself or one of the groups it is a member of.
action_in(group) if input.capability == group

action_in(group) if group in action.member_of
