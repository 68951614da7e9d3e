//! Cedar in the compiled core: one [`CedarSnapshot`] per policy snapshot, prepared once.
//!
//! The reference is `callgate/policy/engines/cedar.py` (cedarpy) with `cedar_slices.py`. The
//! snapshot is built from what the Python load already computed, so the two cannot drift:
//!
//! * the policy slices (one policy text per distinct slice, with the snapshot's positional id of
//!   each of its policies; `build_slices` decides what goes in a slice), parsed here once;
//! * the static entities as Cedar's explicit JSON, one fragment per entity, the edges a slice
//!   follows (parents and entity references) and the entities every slice holds; a request's
//!   entity set is the principal, resource and action with what they reach, plus the principal or
//!   resource built from the request when the file lacks it (checked against the schema), cached
//!   per (tenant, principal, resource, action) as the Python engine does.
//!
//! Fail closed as cedar.py: any diagnostics error is a deny (`policy_evaluation_error`), a request
//! that does not conform to the schema is one too, anything that cannot be built is an
//! `engine_error` deny. Decisions run with the GIL released.

use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityId, EntityTypeName, EntityUid, PolicySet,
    Request, Schema,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::{HashMap, HashSet, VecDeque};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

const PRINCIPAL_TYPE: &str = "User";
const RESOURCE_TYPE: &str = "Resource";
const ACTION_TYPE: &str = "Action";

/// (code, policy id, message)
type ReasonT = (String, String, String);
/// (effect, reasons, error code)
pub(crate) type Answer = (String, Vec<ReasonT>, String);

struct Slice {
    set: PolicySet,
    /// local positional id (`policyN` of this slice's text) -> the snapshot's positional id;
    /// empty: the slice was built from JSON with the snapshot's ids already.
    ids: Vec<String>,
}

impl Slice {
    fn global(&self, local: &str) -> String {
        if self.ids.is_empty() {
            return local.to_string();
        }
        match local
            .strip_prefix("policy")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(n) if n < self.ids.len() && local == format!("policy{n}") => self.ids[n].clone(),
            _ => local.to_string(),
        }
    }
}

struct EntityCache {
    map: HashMap<(String, String, String, String), Arc<Entities>>,
    order: VecDeque<(String, String, String, String)>,
}

#[pyclass(frozen, module = "callgate._native")]
pub struct CedarSnapshot {
    schema: Schema,
    slices: Vec<Slice>,
    enforcing: HashMap<String, usize>,
    enforcing_default: usize,
    shadow: Option<(HashMap<String, usize>, usize)>,
    policy_ids: HashMap<String, String>,
    confirm: HashMap<String, String>,
    /// snapshot positional id -> its number (to order reasons by position)
    position: HashMap<String, usize>,
    fragments: Vec<String>,
    index: HashMap<(String, String), usize>,
    edges: HashMap<usize, Vec<usize>>,
    always: Vec<usize>,
    cache: Mutex<EntityCache>,
    cache_max: usize,
}

fn uid(t: &str, id: &str) -> Result<EntityUid, String> {
    let tn = EntityTypeName::from_str(t).map_err(|e| e.to_string())?;
    Ok(EntityUid::from_type_name_and_id(tn, EntityId::new(id)))
}

fn fault(code: &str, message: &str) -> Answer {
    (
        "deny".into(),
        vec![(code.into(), String::new(), message.into())],
        code.into(),
    )
}

#[pymethods]
impl CedarSnapshot {
    /// `sources`: (text, is_json, positional ids) per distinct slice; `enforcing` action -> slice
    /// number, `enforcing_default` the slice of an action no scope names; `shadow` the same two
    /// for the shadow slices (or None). `fragments`: every static entity's explicit JSON, `edges`
    /// entity number -> the numbers it reaches, `always` the entities in every slice.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (schema_text, sources, enforcing, enforcing_default, shadow, policy_ids, confirm, fragments, edges, always, cache_max))]
    fn new(
        py: Python<'_>,
        schema_text: String,
        sources: Vec<(String, bool, Vec<String>)>,
        enforcing: HashMap<String, usize>,
        enforcing_default: usize,
        shadow: Option<(HashMap<String, usize>, usize)>,
        policy_ids: HashMap<String, String>,
        confirm: HashMap<String, String>,
        fragments: Vec<String>,
        edges: HashMap<usize, Vec<usize>>,
        always: Vec<usize>,
        cache_max: usize,
    ) -> PyResult<Self> {
        let built = py.detach(move || -> Result<CedarSnapshot, String> {
            let (schema, _warnings) =
                Schema::from_cedarschema_str(&schema_text).map_err(|e| format!("schema: {e}"))?;
            let mut slices = Vec::with_capacity(sources.len());
            for (text, is_json, ids) in sources {
                let set = if is_json {
                    PolicySet::from_json_str(&text).map_err(|e| format!("policies: {e}"))?
                } else {
                    PolicySet::from_str(&text).map_err(|e| format!("policies: {e}"))?
                };
                slices.push(Slice { set, ids });
            }
            let n = slices.len();
            let in_range = |i: &usize| *i < n;
            if !enforcing.values().all(in_range)
                || enforcing_default >= n
                || shadow
                    .as_ref()
                    .is_some_and(|(m, d)| *d >= n || !m.values().all(in_range))
            {
                return Err("slice number out of range".into());
            }
            let mut index = HashMap::with_capacity(fragments.len());
            for (k, f) in fragments.iter().enumerate() {
                let v: serde_json::Value =
                    serde_json::from_str(f).map_err(|e| format!("entity {k}: {e}"))?;
                let t = v["uid"]["type"].as_str().ok_or("entity without uid.type")?;
                let i = v["uid"]["id"].as_str().ok_or("entity without uid.id")?;
                index.insert((t.to_string(), i.to_string()), k);
            }
            if edges
                .values()
                .flatten()
                .chain(always.iter())
                .any(|t| *t >= fragments.len())
            {
                return Err("entity number out of range".into());
            }
            let position = policy_ids
                .keys()
                .filter_map(|k| {
                    k.strip_prefix("policy")
                        .and_then(|n| n.parse::<usize>().ok())
                        .map(|n| (k.clone(), n))
                })
                .collect();
            Ok(CedarSnapshot {
                schema,
                slices,
                enforcing,
                enforcing_default,
                shadow,
                policy_ids,
                confirm,
                position,
                fragments,
                index,
                edges,
                always,
                cache: Mutex::new(EntityCache {
                    map: HashMap::new(),
                    order: VecDeque::new(),
                }),
                cache_max,
            })
        });
        built.map_err(PyValueError::new_err)
    }

    /// One decision: `(enforcing, shadow)`, each `(effect, [(code, policy id, message)], error
    /// code)`; `shadow` is None when the snapshot has no shadow policies. With `detach` (the
    /// default) the GIL is released.
    #[pyo3(signature = (principal, action, resource, tenant, context_json, detach=true))]
    fn authorize(
        &self,
        py: Python<'_>,
        principal: &str,
        action: &str,
        resource: &str,
        tenant: &str,
        context_json: &str,
        detach: bool,
    ) -> (Answer, Option<Answer>) {
        if detach {
            py.detach(|| self.decide(principal, action, resource, tenant, context_json))
        } else {
            self.decide(principal, action, resource, tenant, context_json)
        }
    }

    /// Policies in the enforcing slice of `action` (diagnostics and tests).
    fn slice_size(&self, action: &str) -> usize {
        self.slices[*self
            .enforcing
            .get(action)
            .unwrap_or(&self.enforcing_default)]
        .set
        .policies()
        .count()
    }

    /// Entity slices in the per-snapshot cache.
    fn cached(&self) -> usize {
        self.cache.lock().map(|c| c.map.len()).unwrap_or(0)
    }
}

impl CedarSnapshot {
    fn decide(
        &self,
        principal: &str,
        action: &str,
        resource: &str,
        tenant: &str,
        context_json: &str,
    ) -> (Answer, Option<Answer>) {
        self.decide_with(principal, action, resource, tenant, |a| {
            Context::from_json_str(context_json, Some((&self.schema, a))).map_err(|_| ())
        })
    }

    /// One decision with the context already as a JSON value (the one-call Propose decision of
    /// `lib.rs`: the context built from the normalized arguments, never serialized to text).
    pub(crate) fn decide_value(
        &self,
        principal: &str,
        action: &str,
        resource: &str,
        tenant: &str,
        context: &serde_json::Value,
    ) -> (Answer, Option<Answer>) {
        self.decide_with(principal, action, resource, tenant, |a| {
            Context::from_json_value(context.clone(), Some((&self.schema, a))).map_err(|_| ())
        })
    }

    fn decide_with(
        &self,
        principal: &str,
        action: &str,
        resource: &str,
        tenant: &str,
        context: impl FnOnce(&EntityUid) -> Result<Context, ()>,
    ) -> (Answer, Option<Answer>) {
        let engine_error = || fault("engine_error", "the Cedar engine raised an exception");
        let entities = match self.entities_for(tenant, principal, resource, action) {
            Ok(e) => e,
            Err(()) => {
                let shadow = self.shadow.as_ref().map(|_| engine_error());
                return (engine_error(), shadow);
            }
        };
        let request = self.request(principal, action, resource, context);
        let enforcing = &self.slices[*self
            .enforcing
            .get(action)
            .unwrap_or(&self.enforcing_default)];
        let main = self.evaluate(&request, enforcing, &entities);
        let shadow = self.shadow.as_ref().map(|(m, d)| {
            let part = &self.slices[*m.get(action).unwrap_or(d)];
            self.evaluate(&request, part, &entities)
        });
        (main, shadow)
    }

    fn request(
        &self,
        principal: &str,
        action: &str,
        resource: &str,
        context: impl FnOnce(&EntityUid) -> Result<Context, ()>,
    ) -> Result<Request, ()> {
        let p = uid(PRINCIPAL_TYPE, principal).map_err(|_| ())?;
        let a = uid(ACTION_TYPE, action).map_err(|_| ())?;
        let r = uid(RESOURCE_TYPE, resource).map_err(|_| ())?;
        let ctx = context(&a)?;
        Request::new(p, a, r, ctx, Some(&self.schema)).map_err(|_| ())
    }

    fn evaluate(&self, request: &Result<Request, ()>, part: &Slice, entities: &Entities) -> Answer {
        let request = match request {
            Ok(r) => r,
            Err(()) => {
                return (
                    "deny".into(),
                    vec![(
                        "policy_evaluation_error".into(),
                        String::new(),
                        "request does not conform to the Cedar schema".into(),
                    )],
                    "policy_evaluation_error".into(),
                )
            }
        };
        let response = Authorizer::new().is_authorized(request, &part.set, entities);
        let diag = response.diagnostics();
        let errors: Vec<_> = diag.errors().collect();
        if !errors.is_empty() {
            let reasons = errors
                .iter()
                .map(|e| {
                    let cedar_policy::AuthorizationError::PolicyEvaluationError(pe) = e;
                    let pos = part.global(&pe.policy_id().to_string());
                    let pid = self.policy_ids.get(&pos).cloned().unwrap_or(pos);
                    let msg = format!("policy '{pid}' failed to evaluate");
                    ("policy_evaluation_error".to_string(), pid, msg)
                })
                .collect();
            return ("deny".into(), reasons, "policy_evaluation_error".into());
        }
        let mut determining: Vec<String> =
            diag.reason().map(|r| part.global(&r.to_string())).collect();
        // Cedar reports the determining policies as a set: order them by position in the file.
        determining.sort_by_key(|p| {
            (
                self.position.get(p).copied().unwrap_or(usize::MAX),
                p.clone(),
            )
        });
        let name = |p: &String| self.policy_ids.get(p).cloned().unwrap_or_else(|| p.clone());
        match response.decision() {
            Decision::Allow if !determining.is_empty() => {
                let confirms: Vec<&String> = determining
                    .iter()
                    .filter(|p| self.confirm.contains_key(*p))
                    .collect();
                if !confirms.is_empty() {
                    let reasons = confirms
                        .iter()
                        .map(|p| {
                            (
                                "confirm_required".to_string(),
                                name(p),
                                self.confirm[*p].clone(),
                            )
                        })
                        .collect();
                    return ("confirm".into(), reasons, String::new());
                }
                let reasons = determining
                    .iter()
                    .map(|p| ("policy_permit".to_string(), name(p), String::new()))
                    .collect();
                ("allow".into(), reasons, String::new())
            }
            Decision::Deny if !determining.is_empty() => {
                let reasons = determining
                    .iter()
                    .map(|p| ("policy_forbid".to_string(), name(p), String::new()))
                    .collect();
                ("deny".into(), reasons, String::new())
            }
            Decision::Deny => (
                "deny".into(),
                vec![(
                    "no_matching_permit".into(),
                    String::new(),
                    "no permit policy matched (default deny)".into(),
                )],
                String::new(),
            ),
            Decision::Allow => fault("engine_no_decision", "Cedar returned no decision"),
        }
    }

    fn closure(&self, roots: &[(String, String)]) -> Vec<usize> {
        let mut seen: HashSet<usize> = HashSet::new();
        let mut order = Vec::new();
        let mut todo: Vec<usize> = roots
            .iter()
            .filter_map(|u| self.index.get(u).copied())
            .collect();
        todo.extend(self.always.iter().copied());
        while let Some(n) = todo.pop() {
            if !seen.insert(n) {
                continue;
            }
            order.push(n);
            if let Some(e) = self.edges.get(&n) {
                todo.extend(e.iter().copied());
            }
        }
        order
    }

    fn entities_for(
        &self,
        tenant: &str,
        principal: &str,
        resource: &str,
        action: &str,
    ) -> Result<Arc<Entities>, ()> {
        let key = (
            tenant.to_string(),
            principal.to_string(),
            resource.to_string(),
            action.to_string(),
        );
        if let Ok(c) = self.cache.lock() {
            if let Some(hit) = c.map.get(&key) {
                return Ok(hit.clone());
            }
        }
        let mut added: Vec<String> = Vec::new();
        let p_key = (PRINCIPAL_TYPE.to_string(), principal.to_string());
        if !self.index.contains_key(&p_key) {
            added.push(
                serde_json::json!({
                    "uid": {"type": PRINCIPAL_TYPE, "id": principal},
                    "attrs": {"tenant": tenant},
                    "parents": [],
                })
                .to_string(),
            );
        }
        let r_key = (RESOURCE_TYPE.to_string(), resource.to_string());
        if !self.index.contains_key(&r_key) {
            let (kind, name) = resource.split_once(':').unwrap_or((resource, ""));
            added.push(
                serde_json::json!({
                    "uid": {"type": RESOURCE_TYPE, "id": resource},
                    "attrs": {"kind": kind, "name": name, "tenant": tenant},
                    "parents": [],
                })
                .to_string(),
            );
        }
        if !added.is_empty() {
            let doc = format!("[{}]", added.join(","));
            Entities::from_json_str(&doc, Some(&self.schema)).map_err(|_| ())?;
        }
        let roots = [p_key, r_key, (ACTION_TYPE.to_string(), action.to_string())];
        let numbers = self.closure(&roots);
        let mut doc = String::from("[");
        let mut first = true;
        for part in numbers
            .iter()
            .map(|n| self.fragments[*n].as_str())
            .chain(added.iter().map(String::as_str))
        {
            if !first {
                doc.push(',');
            }
            first = false;
            doc.push_str(part);
        }
        doc.push(']');
        let entities = Arc::new(Entities::from_json_str(&doc, None).map_err(|_| ())?);
        if let Ok(mut c) = self.cache.lock() {
            if !c.map.contains_key(&key) {
                c.map.insert(key.clone(), entities.clone());
                c.order.push_back(key);
                while c.map.len() > self.cache_max {
                    match c.order.pop_front() {
                        Some(old) => {
                            c.map.remove(&old);
                        }
                        None => break,
                    }
                }
            }
        }
        Ok(entities)
    }
}
