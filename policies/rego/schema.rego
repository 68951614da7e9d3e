# Request conformance: the Rego twin of policies/cedar/schema.cedarschema, driven by
# data.callgate.schema (policies/rego/data.json). Cedar validates every request against its
# schema and answers a deny with policy_evaluation_error when it does not conform; so does this:
# an undeclared capability, a missing, undeclared or mistyped context attribute or argument is a
# request error, and decision.rego turns any request error into that deny before any policy is
# consulted. Checking types here, rather than trusting comparisons, matters in Rego: `"481" > 480`
# is simply true (strings sort after numbers) and a built-in error would make a forbid undefined.
#
# Careful with `not`: OPA evaluates the arguments of a negated call *outside* the negation, so
# `not is_string(input.missing)` is undefined in OPA, while rego-cpp (the embedded engine)
# answers true. Every negated call below therefore only takes arguments that are known to be
# defined (each rule first checks `is_object(ctx)`, `is_object(args)`, ...); an absent value is
# detected inside a helper's body or with a bare `not ref`, which both engines agree on.
#
# `conforms` is the check decision.rego uses; `request_errors` explains a request that does not
# conform (it is only evaluated then: it costs more). The tests hold the two to the same verdict.
# Messages name attributes, never request values.
package callgate.authz

schema := data.callgate.schema

# The declared action the request names (undefined for an unknown capability or a group).
action := schema.actions[input.capability]

context_attributes contains name if some name, _ in schema.context

context_attributes contains "args"

# Context attributes a request carries only sometimes (`text`, callgate/policy/textflags.py:
# present when a string argument hides characters); absent from a legacy data.json.
optional_context := object.get(schema, "optional_context", {})

known_attribute(name) if name in context_attributes

known_attribute(name) if optional_context[name]

# context.usage: the declared meters (issue 30), sent only for tools that declare meters
context_attributes contains "usage" if is_object(input.context.usage)

# context.session.labels: the labels of results the session observed (issue 30), sent when a
# ToolSpec declares result labels
context_attributes contains "session" if is_object(input.context.session)

ctx := input.context if is_object(input.context)

args := ctx.args if is_object(ctx.args)

conforms if {
	valid_subject
	is_object(action)
	is_object(ctx)
	every name in object.keys(ctx) {
		known_attribute(name)
	}
	every name, type in schema.context {
		has_type(ctx[name], type)
	}
	every name, type in optional_context {
		absent_or_typed(name, type)
	}
	is_object(args)
	every name, value in args {
		has_type(value, action.args[name].type)
	}
	every name, attr in action.args {
		present_or_optional(name, attr)
	}
}

arg_names := object.keys(args)

present_or_optional(name, _) if name in arg_names

present_or_optional(_, attr) if attr.optional

absent_or_typed(name, _) if not name in object.keys(ctx)

absent_or_typed(name, type) if has_type(ctx[name], type)

valid_subject if {
	is_string(input.subject.tenant)
	is_string(input.subject.id)
}

request_errors contains "subject: tenant and id must be strings" if not valid_subject

request_errors contains "capability: not a declared action" if not action

request_errors contains "context: expected a record" if not ctx

request_errors contains sprintf("context.%s: not declared", [name]) if {
	some name, _ in ctx
	not known_attribute(name)
}

request_errors contains sprintf("context.%s: expected %s", [name, type]) if {
	is_object(ctx)
	some name, type in schema.context
	not attribute_has_type(ctx, name, type)
}

request_errors contains sprintf("context.%s: expected %s", [name, type]) if {
	is_object(ctx)
	some name, type in optional_context
	not absent_or_typed(name, type)
}

request_errors contains "context.args: expected a record" if not args

request_errors contains sprintf("context.args.%s: missing", [name]) if {
	is_object(args)
	some name, attr in action.args
	not object.get(attr, "optional", false)
	not name in object.keys(args)
}

request_errors contains sprintf("context.args.%s: not declared", [name]) if {
	is_object(action)
	some name, _ in args
	not name in object.keys(action.args)
}

request_errors contains sprintf("context.args.%s: expected %s", [name, attr.type]) if {
	some name, attr in action.args
	value := args[name]
	not has_type(value, attr.type)
}

attribute_has_type(obj, name, type) if has_type(obj[name], type)

has_type(v, "String") if is_string(v)

has_type(v, "Bool") if is_boolean(v)

# Cedar's Long: an integral number (callgate's request builder refuses numbers outside 64 bits).
has_type(v, "Long") if {
	is_number(v)
	floor(v) == v
}

# A decimal argument (the ToolSpec's `decimal` normalizer): a number (callgate/policy/declare.py).
has_type(v, "Decimal") if is_number(v)

has_type(v, "Set") if is_array(v)

has_type(v, "Record") if is_object(v)
