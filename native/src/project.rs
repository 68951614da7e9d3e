//! The Cedar context projection of the one-call Propose decision (issue 15 A5): per action, the
//! part of the context its policies can read, computed once per snapshot, so a proposal's
//! arguments are built into Cedar values, type-checked and evaluated only where a policy looks.
//!
//! * [`Proj`]: what the policies of an action (its enforcing and shadow slices) read, from each
//!   policy's JSON EST: every maximal attribute chain rooted at `context` keeps that path and
//!   everything under it; `<chain> has a` keeps `<chain>.a` present (a record there keeps only
//!   the attributes something else reads: `has` tests presence); any other occurrence of `context`
//!   keeps everything under that point (the bare `context`: no projection). The walk descends into
//!   every object and array of the EST except `{"Value": ..}` literals, so no occurrence of
//!   `context` is missed (over-keeping costs time only).
//! * [`Eff`]: that projection intersected with the action's context type in the schema (a kept
//!   attribute whose type is a closed record is pruned by its sub-projection; anything else is
//!   kept whole), with the declared type ([`Shape`]) of every attribute left out; the same walk
//!   writes the pruned context type of the pruned schema requests are validated against.
//! * A context is projected only when what is left out conforms to its declared type exactly as
//!   Cedar would check it (a cheap walk, no Cedar values built): a member the schema does not
//!   declare, a required one missing, a value of another type, or one `to_cedar_value` refuses
//!   makes the caller build the whole context against the whole schema (today's path, today's
//!   answer). So a projected decision is the unprojected one.

use crate::json::{Num, Value};
use cedar_policy::{Context, RestrictedExpression as R};
use serde_json::{Map, Value as J};
use std::collections::{BTreeMap, HashMap};

/// What the policies read under a point of the context.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Proj {
    All,
    Fields(BTreeMap<String, Proj>),
}

impl Proj {
    fn empty() -> Self {
        Proj::Fields(BTreeMap::new())
    }

    /// Keep `path` and everything under it.
    fn keep(&mut self, path: &[String]) {
        match self {
            Proj::All => {}
            Proj::Fields(m) => match path.split_first() {
                None => *self = Proj::All,
                Some((head, rest)) => m.entry(head.clone()).or_insert_with(Proj::empty).keep(rest),
            },
        }
    }

    /// Keep `path` present (a `has` test): its record attributes only where something else reads
    /// them (an attribute of another type is kept whole by the schema intersection).
    fn touch(&mut self, path: &[String]) {
        if let (Proj::Fields(m), Some((head, rest))) = (&mut *self, path.split_first()) {
            m.entry(head.clone())
                .or_insert_with(Proj::empty)
                .touch(rest);
        }
    }

    pub(crate) fn union(&mut self, other: &Proj) {
        match (&mut *self, other) {
            (Proj::All, _) => {}
            (_, Proj::All) => *self = Proj::All,
            (Proj::Fields(a), Proj::Fields(b)) => {
                for (k, v) in b {
                    match a.get_mut(k) {
                        Some(mine) => mine.union(v),
                        None => {
                            a.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
        }
    }
}

/// `{"Var":"context"}` followed by `.attr` steps: the path, or None.
fn chain(v: &J) -> Option<Vec<String>> {
    let J::Object(m) = v else { return None };
    if m.len() != 1 {
        return None;
    }
    if let Some(J::String(name)) = m.get("Var") {
        return (name == "context").then(Vec::new);
    }
    let J::Object(dot) = m.get(".")? else {
        return None;
    };
    if dot.len() != 2 {
        return None;
    }
    let attr = dot.get("attr")?.as_str()?;
    let mut path = chain(dot.get("left")?)?;
    path.push(attr.to_string());
    Some(path)
}

/// Add to `out` what the EST fragment `v` reads of `context`.
pub(crate) fn walk(v: &J, out: &mut Proj) {
    if *out == Proj::All {
        return;
    }
    match v {
        J::Object(m) => {
            if m.len() == 1 {
                if m.contains_key("Value") {
                    return; // a literal: no expression inside
                }
                if let Some(path) = chain(v) {
                    out.keep(&path);
                    return;
                }
                if let Some(J::Object(has)) = m.get("has") {
                    if has.len() == 2 {
                        if let (Some(left), Some(J::String(attr))) =
                            (has.get("left"), has.get("attr"))
                        {
                            if let Some(mut path) = chain(left) {
                                path.push(attr.clone());
                                out.touch(&path);
                                return;
                            }
                        }
                    }
                }
            }
            for x in m.values() {
                walk(x, out);
            }
        }
        J::Array(items) => {
            for x in items {
                walk(x, out);
            }
        }
        // a bare "context" string outside `{"Var": ..}` is no variable (entity ids, names)
        _ => {}
    }
}

/// The declared type of a context attribute, as far as [`conforms`] can check it; `Unknown`
/// (entities, other extensions, open records, what cannot be resolved) never conforms, so such a
/// value is always checked by Cedar.
#[derive(Clone, Debug)]
pub(crate) enum Shape {
    Str,
    Long,
    Bool,
    Decimal,
    Set(Box<Shape>),
    Record(HashMap<String, (Shape, bool)>),
    Unknown,
}

/// The projection of one point of an action's context, against its schema type.
#[derive(Debug)]
pub(crate) enum Eff {
    All,
    Fields {
        keep: HashMap<String, Eff>,
        /// declared attributes no policy reads: (type, required)
        dropped: HashMap<String, (Shape, bool)>,
    },
}

impl Eff {
    /// Does the projection leave anything out?
    fn drops(&self) -> bool {
        match self {
            Eff::All => false,
            Eff::Fields { keep, dropped } => !dropped.is_empty() || keep.values().any(Eff::drops),
        }
    }

    /// What is kept, as JSON (`true`: whole; tests and diagnostics).
    pub(crate) fn describe(&self) -> J {
        match self {
            Eff::All => J::Bool(true),
            Eff::Fields { keep, .. } => {
                let mut keys: Vec<&String> = keep.keys().collect();
                keys.sort();
                J::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), keep[k].describe()))
                        .collect(),
                )
            }
        }
    }
}

const MAX_DEPTH: usize = 64;

/// The empty namespace of a schema in its JSON form: common types and entity type names.
struct View<'a> {
    common: Option<&'a Map<String, J>>,
    entities: Option<&'a Map<String, J>>,
}

impl<'a> View<'a> {
    /// The type behind common-type references (None when it cannot be resolved here).
    fn resolve(&self, t: &'a J, depth: usize) -> Option<&'a J> {
        if depth > MAX_DEPTH {
            return None;
        }
        let ty = t.get("type")?.as_str()?;
        match ty {
            "Record" | "Set" | "String" | "Long" | "Boolean" | "Entity" | "Extension" => Some(t),
            "EntityOrCommon" => {
                let name = t.get("name")?.as_str()?;
                match self.common.and_then(|c| c.get(name)) {
                    Some(c) => self.resolve(c, depth + 1),
                    None => Some(t),
                }
            }
            other => self.resolve(self.common?.get(other)?, depth + 1),
        }
    }

    fn shape(&self, t: &J, depth: usize) -> Shape {
        let Some(r) = self.resolve(t, depth) else {
            return Shape::Unknown;
        };
        let prim = |name: &str| match name.strip_prefix("__cedar::").unwrap_or(name) {
            "String" => Shape::Str,
            "Long" => Shape::Long,
            "Bool" | "Boolean" => Shape::Bool,
            "decimal" => Shape::Decimal,
            _ => Shape::Unknown,
        };
        match r.get("type").and_then(J::as_str).unwrap_or("") {
            "String" => Shape::Str,
            "Long" => Shape::Long,
            "Boolean" => Shape::Bool,
            "Extension" => match r.get("name").and_then(J::as_str) {
                Some(n) => match prim(n) {
                    Shape::Decimal => Shape::Decimal,
                    _ => Shape::Unknown,
                },
                None => Shape::Unknown,
            },
            "EntityOrCommon" => match r.get("name").and_then(J::as_str) {
                Some(n) if !self.entities.is_some_and(|e| e.contains_key(n)) => prim(n),
                _ => Shape::Unknown,
            },
            "Set" => match r.get("element") {
                Some(e) => Shape::Set(Box::new(self.shape(e, depth + 1))),
                None => Shape::Unknown,
            },
            "Record" => match closed_attributes(r) {
                Some(attrs) => Shape::Record(
                    attrs
                        .iter()
                        .map(|(k, a)| (k.clone(), (self.shape(a, depth + 1), required(a))))
                        .collect(),
                ),
                None => Shape::Unknown,
            },
            _ => Shape::Unknown,
        }
    }

    /// The pruned type of `t` under `p`, and the effective projection.
    fn prune(&self, t: &J, p: &Proj, depth: usize) -> (J, Eff) {
        let Proj::Fields(fields) = p else {
            return (t.clone(), Eff::All);
        };
        let Some(attrs) = self.resolve(t, depth).and_then(closed_attributes) else {
            return (t.clone(), Eff::All);
        };
        let mut out = Map::new();
        let mut keep = HashMap::new();
        let mut dropped = HashMap::new();
        for (k, a) in attrs {
            let req = required(a);
            match fields.get(k) {
                Some(sub) => {
                    let mut ty = a.clone();
                    if let J::Object(m) = &mut ty {
                        m.remove("required");
                        m.remove("annotations");
                    }
                    let (mut pruned, eff) = self.prune(&ty, sub, depth + 1);
                    if !req {
                        if let J::Object(m) = &mut pruned {
                            m.insert("required".into(), J::Bool(false));
                        }
                    }
                    out.insert(k.clone(), pruned);
                    keep.insert(k.clone(), eff);
                }
                None => {
                    dropped.insert(k.clone(), (self.shape(a, depth + 1), req));
                }
            }
        }
        // read but not declared: kept (a value there does not conform, as without projection)
        for k in fields.keys() {
            keep.entry(k.clone()).or_insert(Eff::All);
        }
        let ty = serde_json::json!({"type": "Record", "attributes": J::Object(out)});
        (ty, Eff::Fields { keep, dropped })
    }
}

fn required(a: &J) -> bool {
    a.get("required").and_then(J::as_bool).unwrap_or(true)
}

/// The attributes of a closed record type.
fn closed_attributes(r: &J) -> Option<&Map<String, J>> {
    if r.get("type")?.as_str()? != "Record" {
        return None;
    }
    if r.get("additionalAttributes")
        .and_then(J::as_bool)
        .unwrap_or(false)
    {
        return None;
    }
    r.get("attributes")?.as_object()
}

/// The pruned schema (JSON form) and the projection of every action of the empty namespace whose
/// projection leaves something out, given each action's [`Proj`]. None: the schema's shape is not
/// one this reads (the snapshot then projects nothing).
pub(crate) fn prune_schema(
    schema: &J,
    read: &dyn Fn(&str) -> Option<Proj>,
) -> Option<(J, HashMap<String, Eff>)> {
    let J::Object(namespaces) = schema else {
        return None;
    };
    if namespaces.keys().any(|k| !k.is_empty()) {
        return None; // named namespaces: requests name `Action::"..."`, kept simple
    }
    let ns = namespaces.get("")?;
    let view = View {
        common: ns.get("commonTypes").and_then(J::as_object),
        entities: ns.get("entityTypes").and_then(J::as_object),
    };
    let actions = ns.get("actions")?.as_object()?;
    let mut pruned = schema.clone();
    let mut out = HashMap::new();
    for (name, decl) in actions {
        let Some(ctx) = decl.get("appliesTo").and_then(|a| a.get("context")) else {
            continue;
        };
        let Some(p) = read(name) else { continue };
        let (ty, eff) = view.prune(ctx, &p, 0);
        if !eff.drops() {
            continue;
        }
        *pruned
            .get_mut("")?
            .get_mut("actions")?
            .get_mut(name)?
            .get_mut("appliesTo")?
            .get_mut("context")? = ty;
        out.insert(name.clone(), eff);
    }
    Some((pruned, out))
}

/// Would Cedar accept `v` (as `to_cedar_value` converts it) for `shape`? Only a sure yes is true.
fn conforms(v: &Value, shape: &Shape) -> bool {
    match (v, shape) {
        (Value::Bool(_), Shape::Bool) | (Value::Str(_), Shape::Str) => true,
        (Value::Num(Num::Int(_)), Shape::Long) => true,
        (Value::Num(Num::Float(f)), Shape::Long | Shape::Decimal) => {
            match (crate::cedar_float(*f), shape) {
                (Some(J::Number(n)), Shape::Long) => n.as_i64().is_some(),
                (Some(J::Object(_)), Shape::Decimal) => true,
                _ => false,
            }
        }
        (Value::Array(items), Shape::Set(el)) => items
            .iter()
            .all(|x| matches!(x, Value::Null) || conforms(x, el)),
        (Value::Object(members), Shape::Record(attrs)) => {
            let mut present = 0;
            for (k, x) in members {
                if k.starts_with("__") {
                    return false;
                }
                if matches!(x, Value::Null) {
                    continue;
                }
                match attrs.get(k) {
                    Some((s, req)) if conforms(x, s) => present += usize::from(*req),
                    _ => return false,
                }
            }
            present == attrs.values().filter(|(_, r)| *r).count()
        }
        _ => false,
    }
}

/// The members kept at a `Fields` point, checking what is left out; Err: build the whole context.
fn members<'a>(
    items: impl Iterator<Item = (&'a str, &'a Value)>,
    keep: &HashMap<String, Eff>,
    dropped: &HashMap<String, (Shape, bool)>,
    mut present: usize,
) -> Result<Vec<(String, R)>, ()> {
    let mut out = Vec::with_capacity(keep.len());
    let mut pending: Vec<(&str, &Value, &Eff)> = Vec::with_capacity(keep.len());
    for (k, x) in items {
        if k.starts_with("__") {
            return Err(());
        }
        if matches!(x, Value::Null) {
            continue;
        }
        if let Some(e) = keep.get(k) {
            pending.push((k, x, e));
        } else {
            match dropped.get(k) {
                Some((s, req)) if conforms(x, s) => present += usize::from(*req),
                _ => return Err(()),
            }
        }
    }
    if present != dropped.values().filter(|(_, r)| *r).count() {
        return Err(());
    }
    for (k, x, e) in pending {
        out.push((k.to_string(), restricted(x, e)?));
    }
    Ok(out)
}

fn restricted(v: &Value, e: &Eff) -> Result<R, ()> {
    match (e, v) {
        (Eff::All, _) => crate::cedar_restricted(v).map_err(|_| ()),
        (Eff::Fields { keep, dropped }, Value::Object(m)) => {
            let fields = members(m.iter().map(|(k, x)| (k.as_str(), x)), keep, dropped, 0)?;
            R::new_record(fields).map_err(|_| ())
        }
        _ => Err(()),
    }
}

/// The projected context of the top-level members (`tool`, `args`, `tenant`) and `now` (the
/// reference clock as a Cedar `datetime` text, for an action that declares it), or Err: the
/// caller builds the whole context (what is left out does not surely conform, or a value is
/// refused).
pub(crate) fn context(top: &[(&str, &Value)], now: Option<&str>, e: &Eff) -> Result<Context, ()> {
    let Eff::Fields { keep, dropped } = e else {
        return Err(());
    };
    // `now` left out counts as present (it is a datetime: it conforms); kept, it is added
    let now_dropped = now.is_some() && matches!(dropped.get(NOW), Some((_, true)));
    let mut pairs = members(top.iter().copied(), keep, dropped, usize::from(now_dropped))?;
    if let Some(t) = now.filter(|_| keep.contains_key(NOW)) {
        pairs.push((NOW.to_string(), R::new_datetime(t)));
    }
    Context::from_pairs(pairs).map_err(|_| ())
}

/// `context.now` (issue 30): the proposal's reference clock.
pub(crate) const NOW: &str = "now";

/// Cedar's explicit JSON form of a `datetime` text.
pub(crate) fn datetime_json(text: &str) -> J {
    serde_json::json!({"__extn": {"fn": "datetime", "arg": text}})
}

/// The JSON form of the projected context (for Cedar's schema-directed reading).
pub(crate) fn context_json(top: &[(&str, &Value)], now: Option<&str>, e: &Eff) -> J {
    let mut out = Map::new();
    if let Eff::Fields { keep, .. } = e {
        for (k, x) in top {
            if let Some(sub) = keep.get(*k) {
                out.insert(k.to_string(), json(x, sub));
            }
        }
        if let Some(t) = now.filter(|_| keep.contains_key(NOW)) {
            out.insert(NOW.to_string(), datetime_json(t));
        }
    }
    J::Object(out)
}

fn json(v: &Value, e: &Eff) -> J {
    match (e, v) {
        (Eff::Fields { keep, .. }, Value::Object(m)) => {
            let mut out = Map::new();
            for (k, x) in m {
                if matches!(x, Value::Null) {
                    continue;
                }
                if let Some(sub) = keep.get(k) {
                    out.insert(k.clone(), json(x, sub));
                }
            }
            J::Object(out)
        }
        _ => crate::cedar_value(v).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(policy: &str) -> Proj {
        let p = cedar_policy::Policy::parse(None, policy).expect("policy");
        let mut out = Proj::empty();
        walk(&p.to_json().expect("est"), &mut out);
        out
    }

    fn fields(pairs: &[(&str, Proj)]) -> Proj {
        Proj::Fields(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    #[test]
    fn chains_and_has() {
        let p = read(
            r#"permit(principal, action, resource) when { context.tenant == "a" && context.args has table && context.args.r.a == 1 };"#,
        );
        let want = fields(&[
            ("tenant", Proj::All),
            (
                "args",
                fields(&[("table", Proj::empty()), ("r", fields(&[("a", Proj::All)]))]),
            ),
        ]);
        assert_eq!(p, want);
    }

    #[test]
    fn bare_and_whole() {
        assert_eq!(
            read(r#"permit(principal, action, resource) when { context == {} };"#),
            Proj::All
        );
        assert_eq!(
            read(
                r#"permit(principal, action, resource) when { context.args == {"Var": "context"} };"#
            ),
            fields(&[("args", Proj::All)])
        );
        assert_eq!(
            read(
                r#"permit(principal, action, resource) when { {"Var": context}.Var.tool == "x" };"#
            ),
            Proj::All
        );
        assert_eq!(
            read(
                r#"permit(principal, action, resource) unless { (if context.args has x then context.args.x else context.tenant) like "a*" };"#
            ),
            fields(&[("args", fields(&[("x", Proj::All)])), ("tenant", Proj::All)])
        );
        assert_eq!(
            read(
                r#"permit(principal, action, resource) when { decimal(context.args.d).lessThan(decimal("1.0")) && ip(context.args.ip).isLoopback() };"#
            ),
            fields(&[("args", fields(&[("d", Proj::All), ("ip", Proj::All)]))])
        );
        assert_eq!(
            read(r#"permit(principal, action, resource) when { principal.tenant == "context" };"#),
            Proj::empty()
        );
    }

    fn val(j: &str) -> Value {
        crate::json::parse_document(j.as_bytes(), &crate::limits(usize::MAX, usize::MAX))
            .expect("json")
    }

    #[test]
    fn pruned_schema_and_conformance() {
        let text = r#"
            entity User; entity Resource;
            type Rec = { id: Long, name: String };
            type Args = { table: String, n?: Long, d?: decimal, recs?: Set<Rec>,
                          r?: { a?: Long, b: String } };
            action "a" appliesTo { principal: User, resource: Resource,
                                   context: { tenant: String, args: Args } };
            action "b" appliesTo { principal: User, resource: Resource,
                                   context: { tenant: String, args: Args } };
        "#;
        let (frag, _) = cedar_policy::SchemaFragment::from_cedarschema_str(text).expect("schema");
        let json = frag.to_json_value().expect("json");
        let reads = |action: &str| {
            Some(match action {
                "a" => read(
                    r#"permit(principal, action, resource) when { context.args.table == "t" && context.args has r && context.args.r.a == 1 };"#,
                ),
                _ => Proj::All,
            })
        };
        let (pruned, effs) = prune_schema(&json, &reads).expect("pruned");
        assert!(!effs.contains_key("b"), "b reads the whole context");
        let eff = &effs["a"];
        assert_eq!(
            eff.describe().to_string(),
            r#"{"args":{"r":{"a":true},"table":true}}"#
        );
        cedar_policy::Schema::from_json_value(pruned).expect("the pruned schema builds");
        let Eff::Fields { keep, .. } = eff else {
            panic!("a projection")
        };
        let Eff::Fields { dropped, .. } = &keep["args"] else {
            panic!("args projected")
        };
        let ok = |field: &str, v: &str| conforms(&val(v), &dropped[field].0);
        assert!(ok("n", "3") && ok("n", "3.0") && !ok("n", "3.5") && !ok("n", "\"3\""));
        assert!(ok("d", "1.25") && !ok("d", "1") && !ok("d", "1.00001"));
        assert!(ok("recs", r#"[{"id": 1, "name": "x"}, null]"#) && ok("recs", "[]"));
        assert!(
            !ok("recs", r#"[{"id": 1}]"#) && !ok("recs", r#"[{"id": 1, "name": "x", "z": 1}]"#)
        );
        assert!(!ok("recs", r#"[{"id": 1, "name": "x", "__entity": 1}]"#));
        assert!(dropped.contains_key("tenant") || !keep.contains_key("tenant"));
        let top = |args: &str| {
            let (t, a) = (Value::Str("acme".into()), val(args));
            context(&[("tenant", &t), ("args", &a)], None, eff).is_ok()
        };
        assert!(top(
            r#"{"table": "t", "recs": [{"id": 1, "name": "x"}], "r": {"b": "y"}}"#
        ));
        assert!(!top(r#"{"table": "t", "undeclared": 1}"#));
        assert!(!top(
            r#"{"table": "t", "recs": [{"id": "1", "name": "x"}]}"#
        ));
        assert!(!top(r#"{"table": "t", "r": {"a": 1, "c": 2}}"#));
        assert!(top(r#"{"table": 5}"#), "a kept value is Cedar's to check");
    }
}
