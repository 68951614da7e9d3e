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

use crate::project::{self, Eff, Proj};
use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityId, EntityTypeName, EntityUid, PolicySet,
    Request, RestrictedExpression, Schema, SchemaFragment,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const PRINCIPAL_TYPE: &str = "User";
const RESOURCE_TYPE: &str = "Resource";
const ACTION_TYPE: &str = "Action";
/// Entities of `entities.json` read at once by `CedarSnapshot::load` (its peak memory follows it).
const ENTITY_CHUNK: usize = 4096;

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

#[derive(Default)]
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
    store: EntityStore,
    edges: HashMap<usize, Vec<usize>>,
    always: Vec<usize>,
    cache: Mutex<EntityCache>,
    cache_max: usize,
    /// The schema with each projected action's context type pruned to its projection (requests
    /// of those actions are validated against it; entities always against `schema`).
    pruned: Option<Schema>,
    /// action -> its context projection (issue 15 A5), for actions whose policies read part of
    /// the context only.
    projections: HashMap<String, Eff>,
    /// Decisions made on a projected context (diagnostics and tests).
    projected: AtomicU64,
    /// The actions whose context declares `now: datetime` (issue 30), told once after the load
    /// (`declare_now`): the one-call decision adds the reference clock to their context.
    now_actions: OnceLock<HashSet<String>>,
}

/// The three entity type names of every request, parsed once per process: Cedar's name parser
/// costs more than the rest of building a request (three parses per decision before).
fn known_type(t: &str) -> Option<&'static EntityTypeName> {
    static TYPES: OnceLock<[(&'static str, EntityTypeName); 3]> = OnceLock::new();
    let types = TYPES.get_or_init(|| {
        [PRINCIPAL_TYPE, RESOURCE_TYPE, ACTION_TYPE].map(|name| {
            (
                name,
                EntityTypeName::from_str(name).expect("a constant entity type name"),
            )
        })
    });
    types.iter().find(|(name, _)| *name == t).map(|(_, tn)| tn)
}

fn uid(t: &str, id: &str) -> Result<EntityUid, String> {
    let tn = match known_type(t) {
        Some(tn) => tn.clone(),
        None => EntityTypeName::from_str(t).map_err(|e| e.to_string())?,
    };
    Ok(EntityUid::from_type_name_and_id(tn, EntityId::new(id)))
}

fn fault(code: &str, message: &str) -> Answer {
    (
        "deny".into(),
        vec![(code.into(), String::new(), message.into())],
        code.into(),
    )
}

/// The schema and every distinct policy slice, parsed once.
fn prepare(
    schema_text: &str,
    sources: Vec<(String, bool, Vec<String>)>,
) -> Result<(Schema, Vec<Slice>), String> {
    let (schema, _warnings) =
        Schema::from_cedarschema_str(schema_text).map_err(|e| format!("schema: {e}"))?;
    let mut slices = Vec::with_capacity(sources.len());
    for (text, is_json, ids) in sources {
        let set = if is_json {
            PolicySet::from_json_str(&text).map_err(|e| format!("policies: {e}"))?
        } else {
            PolicySet::from_str(&text).map_err(|e| format!("policies: {e}"))?
        };
        slices.push(Slice { set, ids });
    }
    Ok((schema, slices))
}

/// What the policies of one slice read of the context (templates included); All when a policy
/// has no JSON form here. `seen`: each policy's reads by its snapshot id (a policy is in many
/// slices: its JSON form is made and walked once).
fn slice_reads(part: &Slice, seen: &mut HashMap<String, Proj>) -> Proj {
    let mut out = Proj::Fields(Default::default());
    for p in part.set.policies() {
        let reads = seen
            .entry(part.global(&p.id().to_string()))
            .or_insert_with(|| match p.to_json() {
                Ok(est) => {
                    let mut r = Proj::Fields(Default::default());
                    project::walk(&est, &mut r);
                    r
                }
                Err(_) => Proj::All,
            });
        out.union(reads);
        if out == Proj::All {
            return out;
        }
    }
    for t in part.set.templates() {
        match t.to_json() {
            Ok(est) => project::walk(&est, &mut out),
            Err(_) => return Proj::All,
        }
    }
    out
}

/// Every action's context projection (the union over its enforcing and shadow slices) and the
/// pruned schema, or nothing when the schema is not in a shape this reads or the pruned schema
/// does not build (no projection then: today's full context, still fully validated).
fn projections(
    schema_text: &str,
    slices: &[Slice],
    enforcing: &HashMap<String, usize>,
    enforcing_default: usize,
    shadow: &Option<(HashMap<String, usize>, usize)>,
) -> Option<(Schema, HashMap<String, Eff>)> {
    let (fragment, _warnings) = SchemaFragment::from_cedarschema_str(schema_text).ok()?;
    let json = fragment.to_json_value().ok()?;
    let mut seen = HashMap::new();
    let reads: Vec<Proj> = slices.iter().map(|s| slice_reads(s, &mut seen)).collect();
    let read = |action: &str| {
        let mut p = reads[*enforcing.get(action).unwrap_or(&enforcing_default)].clone();
        if let Some((m, d)) = shadow {
            p.union(&reads[*m.get(action).unwrap_or(d)]);
        }
        Some(p)
    };
    let (pruned, effs) = project::prune_schema(&json, &read)?;
    if effs.is_empty() {
        return None;
    }
    let schema = Schema::from_json_value(pruned).ok()?;
    Some((schema, effs))
}

#[allow(clippy::too_many_arguments)]
fn assemble(
    schema: Schema,
    slices: Vec<Slice>,
    enforcing: HashMap<String, usize>,
    enforcing_default: usize,
    shadow: Option<(HashMap<String, usize>, usize)>,
    policy_ids: HashMap<String, String>,
    confirm: HashMap<String, String>,
    store: EntityStore,
    edges: HashMap<usize, Vec<usize>>,
    always: Vec<usize>,
    cache_max: usize,
    project_from: Option<&str>,
) -> Result<CedarSnapshot, String> {
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
    let (pruned, projections) = match project_from
        .and_then(|text| projections(text, &slices, &enforcing, enforcing_default, &shadow))
    {
        Some((s, p)) => (Some(s), p),
        None => (None, HashMap::new()),
    };
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
        store,
        edges,
        always,
        cache: Mutex::new(EntityCache {
            map: HashMap::new(),
            order: VecDeque::new(),
        }),
        cache_max,
        pruned,
        projections,
        projected: AtomicU64::new(0),
        now_actions: OnceLock::new(),
    })
}

/// How an entity's fragment starts: `{"uid":{"type":<t>,"id":<id>}` (the form both loads write,
/// so a hash hit is confirmed against the fragment itself).
fn head(t: &str, id: &str) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    format!("{{\"uid\":{{\"type\":{},\"id\":{}}}", q(t), q(id))
}

fn key_hash(t: &str, id: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    t.hash(&mut h);
    id.hash(&mut h);
    h.finish()
}

/// Entity uids referenced in an explicit-form JSON value (`__entity` escapes and `{"type",
/// "id"}` objects; over-inclusion is harmless, as in `cedar_slices._refs`).
fn collect_refs(v: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::Object(m) => {
            if let (Some(serde_json::Value::String(t)), Some(serde_json::Value::String(i))) =
                (m.get("type"), m.get("id"))
            {
                out.push((t.clone(), i.clone()));
            }
            for x in m.values() {
                collect_refs(x, out);
            }
        }
        serde_json::Value::Array(a) => {
            for x in a {
                collect_refs(x, out);
            }
        }
        _ => {}
    }
}

fn reach(roots: &[usize], edges: &HashMap<usize, Vec<usize>>) -> Vec<usize> {
    let mut seen: HashSet<usize> = HashSet::new();
    let mut order = Vec::new();
    let mut todo: Vec<usize> = roots.to_vec();
    while let Some(n) = todo.pop() {
        if !seen.insert(n) {
            continue;
        }
        order.push(n);
        if let Some(e) = edges.get(&n) {
            todo.extend(e.iter().copied());
        }
    }
    order
}

/// The static entities once: every entity's explicit JSON in one buffer, its offsets, and the
/// key hashes sorted with their entity numbers (no per-entity strings or map entries).
#[derive(Default)]
struct EntityStore {
    blob: String,
    offsets: Vec<u32>,
    hashes: Vec<(u64, u32)>,
}

impl EntityStore {
    fn push_raw(&mut self, t: &str, id: &str, fragment: &str) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        let n = self.hashes.len() as u32;
        self.hashes.push((key_hash(t, id), n));
        self.blob.push_str(fragment);
        self.offsets.push(self.blob.len() as u32);
    }

    fn finish(&mut self) -> Result<(), String> {
        if self.blob.len() > u32::MAX as usize {
            return Err("entities: more than 4 GiB of JSON".into());
        }
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.hashes.sort_unstable();
        self.hashes.shrink_to_fit();
        self.blob.shrink_to_fit();
        self.offsets.shrink_to_fit();
        Ok(())
    }

    fn len(&self) -> usize {
        self.hashes.len()
    }

    fn fragment(&self, n: usize) -> &str {
        &self.blob[self.offsets[n] as usize..self.offsets[n + 1] as usize]
    }

    fn lookup(&self, t: &str, id: &str) -> Option<usize> {
        let h = key_hash(t, id);
        let start = self.hashes.partition_point(|(x, _)| *x < h);
        let want = head(t, id);
        self.hashes[start..]
            .iter()
            .take_while(|(x, _)| *x == h)
            .map(|(_, n)| *n as usize)
            .find(|n| {
                let f = self.fragment(*n);
                f.starts_with(&want) && f[want.len()..].starts_with([',', '}'])
            })
    }
}

/// The context as Cedar values built directly from the JSON (`to_cedar_value`'s explicit form:
/// records, sets, strings, Longs, booleans and `{"__extn": decimal}`), or None for anything
/// else. Cedar's own JSON reader (`Context::from_json_str`) deserializes every value through an
/// untagged enum that formats an error for each variant it rejects: ~25 ms for 60 KB of records.
fn fast_context(v: &serde_json::Value) -> Option<Context> {
    let serde_json::Value::Object(map) = v else {
        return None;
    };
    let mut pairs = Vec::with_capacity(map.len());
    for (k, v) in map {
        pairs.push((k.clone(), restricted(v)?));
    }
    Context::from_pairs(pairs).ok()
}

fn restricted(v: &serde_json::Value) -> Option<RestrictedExpression> {
    Some(match v {
        serde_json::Value::Bool(b) => RestrictedExpression::new_bool(*b),
        serde_json::Value::String(s) => RestrictedExpression::new_string(s.clone()),
        serde_json::Value::Number(n) => RestrictedExpression::new_long(n.as_i64()?),
        serde_json::Value::Array(a) => {
            let mut items = Vec::with_capacity(a.len());
            for x in a {
                items.push(restricted(x)?);
            }
            RestrictedExpression::new_set(items)
        }
        serde_json::Value::Object(m) => {
            if m.keys().any(|k| k.starts_with("__")) {
                if m.len() != 1 {
                    return None;
                }
                let e = m.get("__extn")?.as_object()?;
                if e.len() != 2 {
                    return None;
                }
                let arg = e.get("arg")?.as_str()?;
                return Some(match e.get("fn")?.as_str()? {
                    "decimal" => RestrictedExpression::new_decimal(arg),
                    "datetime" => RestrictedExpression::new_datetime(arg),
                    "duration" => RestrictedExpression::new_duration(arg),
                    _ => return None,
                });
            }
            let mut fields = Vec::with_capacity(m.len());
            for (k, x) in m {
                fields.push((k.clone(), restricted(x)?));
            }
            RestrictedExpression::new_record(fields).ok()?
        }
        serde_json::Value::Null => return None,
    })
}

/// Where a decision's context comes from: the Authorizer's JSON text, or the one-call Propose
/// decision's value built from the normalized arguments (`lib.rs`, never serialized to text),
/// or (`Built`) that decision's context already built as Cedar values straight from the parsed
/// arguments (`lib.rs` `cedar_restricted`, the same values `restricted` builds from the JSON
/// form), with the JSON form made only if Cedar's schema-directed reading is needed.
#[derive(Clone, Copy)]
enum ContextSrc<'a> {
    Text(&'a str),
    Value(&'a serde_json::Value),
    Built(&'a Context, &'a dyn Fn() -> serde_json::Value),
    /// `Built` projected to the action's projection: validated against the pruned schema.
    Projected(&'a Context, &'a dyn Fn() -> serde_json::Value),
}

/// Snapshots whose heavy parts were handed to a thread of their own (`Drop`; read by tests).
static DROPPED_APART: AtomicU64 = AtomicU64::new(0);

/// A large snapshot is freed in a thread of its own, without the GIL: its policy sets and entity
/// buffer take hundreds of ms to drop at 10,000 policies on a loaded box (measured), and the last
/// reference to a retired snapshot goes away on the event loop. The schemas and the context
/// projections go too: at 10,000 policies over 1,000 actions they alone took 16-27 ms to drop
/// in the dropping thread (measured: the longest health check during a hot reload, 5 s after the
/// swap, when the retired snapshot's last reference goes).
impl Drop for CedarSnapshot {
    fn drop(&mut self) {
        const LARGE: usize = 256;
        let policies: usize = self.slices.iter().map(|s| s.ids.len().max(1)).sum();
        if policies < LARGE && self.store.len() < LARGE * 16 && self.projections.len() < LARGE {
            return;
        }
        let schema = match Schema::from_cedarschema_str("") {
            Ok((empty, _)) => Some(std::mem::replace(&mut self.schema, empty)),
            Err(_) => None, // cannot happen (an empty schema parses); then it is dropped here
        };
        let heavy = (
            std::mem::take(&mut self.slices),
            std::mem::take(&mut self.store),
            std::mem::take(&mut self.policy_ids),
            std::mem::take(&mut self.confirm),
            std::mem::take(&mut self.position),
            std::mem::take(&mut self.edges),
            std::mem::take(&mut self.enforcing),
            (
                schema,
                self.pruned.take(),
                std::mem::take(&mut self.projections),
                self.shadow.take(),
            ),
        );
        let cache = self.cache.get_mut().map(std::mem::take).ok();
        match std::thread::Builder::new()
            .name("callgate-cedar-drop".into())
            .spawn(move || drop((heavy, cache)))
        {
            Ok(_) => {
                DROPPED_APART.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                // no thread: dropped here (the returned closure, and what it holds, go with the error)
                drop(e);
            }
        }
    }
}

#[pymethods]
impl CedarSnapshot {
    /// How many snapshots this process freed apart from the dropping thread (large ones: their
    /// heavy parts go to a thread of their own, see `Drop`); for tests.
    #[staticmethod]
    fn dropped_apart() -> u64 {
        DROPPED_APART.load(Ordering::Relaxed)
    }

    /// `sources`: (text, is_json, positional ids) per distinct slice; `enforcing` action -> slice
    /// number, `enforcing_default` the slice of an action no scope names; `shadow` the same two
    /// for the shadow slices (or None). `fragments`: every static entity's explicit JSON (as
    /// `cedar_slices.EntityIndex` renders it: `{"uid":{"type":..,"id":..},...}`), `edges` entity
    /// number -> the numbers it reaches, `always` the entities in every slice.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (schema_text, sources, enforcing, enforcing_default, shadow, policy_ids, confirm, fragments, edges, always, cache_max, project=true))]
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
        project: bool,
    ) -> PyResult<Self> {
        let built = py.detach(move || -> Result<CedarSnapshot, String> {
            let (schema, slices) = prepare(&schema_text, sources)?;
            let mut store = EntityStore::default();
            for (k, f) in fragments.iter().enumerate() {
                let v: serde_json::Value =
                    serde_json::from_str(f).map_err(|e| format!("entity {k}: {e}"))?;
                let t = v["uid"]["type"].as_str().ok_or("entity without uid.type")?;
                let i = v["uid"]["id"].as_str().ok_or("entity without uid.id")?;
                if !f.starts_with(&head(t, i)) {
                    return Err(format!("entity {k}: not in the expected form"));
                }
                store.push_raw(t, i, f);
            }
            if edges
                .values()
                .flatten()
                .chain(always.iter())
                .any(|t| *t >= store.len())
            {
                return Err("entity number out of range".into());
            }
            store.finish()?;
            assemble(
                schema,
                slices,
                enforcing,
                enforcing_default,
                shadow,
                policy_ids,
                confirm,
                store,
                edges,
                always,
                cache_max,
                project.then_some(schema_text.as_str()),
            )
        });
        built.map_err(PyValueError::new_err)
    }

    /// The same snapshot with the static entities read here from `entities.json` (checked
    /// against the schema, with the schema's action entities, as cedarpy's load does) and held
    /// once: one buffer of Cedar's explicit JSON, offsets and sorted key hashes (issue 15: the
    /// compiled core serving alone, no cedarpy copy). `literals`: the entity uids named in the
    /// policies' conditions (their closure is in every slice). Everything runs with the GIL
    /// released; an error (ValueError) means the caller loads the set with cedarpy instead.
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (schema_text, sources, enforcing, enforcing_default, shadow, policy_ids, confirm, entities_json, literals, cache_max, project=true))]
    fn load(
        py: Python<'_>,
        schema_text: String,
        sources: Vec<(String, bool, Vec<String>)>,
        enforcing: HashMap<String, usize>,
        enforcing_default: usize,
        shadow: Option<(HashMap<String, usize>, usize)>,
        policy_ids: HashMap<String, String>,
        confirm: HashMap<String, String>,
        entities_json: String,
        literals: Vec<(String, String)>,
        cache_max: usize,
        project: bool,
    ) -> PyResult<Self> {
        let built = py.detach(move || -> Result<CedarSnapshot, String> {
            let (schema, slices) = prepare(&schema_text, sources)?;
            let (store, edges) = {
                // Read in chunks of ENTITY_CHUNK entities (issue 34 item 6): Cedar's reader holds
                // several forms of what it reads at once (~40x the JSON at its peak), so the
                // whole file at once peaked at 440 MiB for 8.5 MiB of JSON. Each chunk is checked
                // against the schema as the whole file was; Cedar adds the schema's action
                // entities to every chunk, kept once (as an entity listed twice). A chunk's `parents` may name an entity of
                // another chunk: each request's entities are read again with their closure
                // (`closure`), where Cedar computes the ancestors over all of them.
                let items: Vec<&serde_json::value::RawValue> =
                    serde_json::from_str(&entities_json).map_err(|e| format!("entities: {e}"))?;
                let empty: [&serde_json::value::RawValue; 0] = [];
                let chunks: Vec<&[&serde_json::value::RawValue]> = if items.is_empty() {
                    vec![&empty[..]]
                } else {
                    items.chunks(ENTITY_CHUNK).collect()
                };
                let mut store = EntityStore::default();
                let mut refs: Vec<(usize, Vec<(String, String)>)> = Vec::new();
                let mut seen: HashMap<(String, String), usize> = HashMap::new();
                let mut n = 0usize;
                for chunk in chunks {
                    let doc = format!(
                        "[{}]",
                        chunk.iter().map(|r| r.get()).collect::<Vec<_>>().join(",")
                    );
                    let entities = Entities::from_json_str(&doc, Some(&schema))
                        .map_err(|e| format!("entities: {e}"))?;
                    drop(doc);
                    for entity in entities.iter() {
                        let uid = entity.uid();
                        let t = uid.type_name().to_string();
                        let i = uid.id().unescaped().to_string();
                        let earlier = seen.get(&(t.clone(), i.clone())).copied();
                        let value = entity
                            .to_json_value()
                            .map_err(|e| format!("entities: {e}"))?;
                        let mut text = head(&t, &i);
                        let mut out: Vec<(String, String)> = Vec::new();
                        if let serde_json::Value::Object(map) = &value {
                            for (k, v) in map {
                                let empty =
                                    matches!(v, serde_json::Value::Object(m) if m.is_empty());
                                if k == "uid" || (k == "tags" && empty) {
                                    continue;
                                }
                                text.push(',');
                                text.push_str(
                                    &serde_json::to_string(k).map_err(|e| e.to_string())?,
                                );
                                text.push(':');
                                text.push_str(
                                    &serde_json::to_string(v).map_err(|e| e.to_string())?,
                                );
                                if k == "parents" || k == "attrs" || k == "tags" {
                                    collect_refs(v, &mut out);
                                }
                            }
                        } else {
                            return Err("entities: an entity is not an object".into());
                        }
                        text.push('}');
                        if let Some(m) = earlier {
                            // Read twice (the schema's actions come with every chunk; an entity
                            // may be listed twice): the same entity is kept once, as Cedar does
                            // within one read; a different one is refused with Cedar's words.
                            if store.fragment(m) == text {
                                continue;
                            }
                            return Err(format!("entities: duplicate entity entry `{uid}`"));
                        }
                        seen.insert((t.clone(), i.clone()), n);
                        store.push_raw(&t, &i, &text);
                        out.retain(|u| u.0 != t || u.1 != i);
                        if !out.is_empty() {
                            refs.push((n, out));
                        }
                        n += 1;
                    }
                }
                drop(seen);
                drop(items);
                drop(entities_json);
                store.finish()?;
                let mut edges: HashMap<usize, Vec<usize>> = HashMap::new();
                for (n, out) in refs {
                    let mut targets: Vec<usize> = Vec::new();
                    for (t, i) in out {
                        if let Some(m) = store.lookup(&t, &i) {
                            if !targets.contains(&m) {
                                targets.push(m);
                            }
                        }
                    }
                    if !targets.is_empty() {
                        edges.insert(n, targets);
                    }
                }
                (store, edges)
            };
            let roots: Vec<usize> = literals
                .iter()
                .filter_map(|(t, i)| store.lookup(t, i))
                .collect();
            let always = reach(&roots, &edges);
            assemble(
                schema,
                slices,
                enforcing,
                enforcing_default,
                shadow,
                policy_ids,
                confirm,
                store,
                edges,
                always,
                cache_max,
                project.then_some(schema_text.as_str()),
            )
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
    /// The actions whose context declares `now: datetime` (the Python loader reads them from
    /// the schema). Once per snapshot: false when already told.
    fn declare_now(&self, actions: Vec<String>) -> bool {
        self.now_actions.set(actions.into_iter().collect()).is_ok()
    }

    fn slice_size(&self, action: &str) -> usize {
        self.slices[*self
            .enforcing
            .get(action)
            .unwrap_or(&self.enforcing_default)]
        .set
        .policies()
        .count()
    }

    /// The context projection of `action` as JSON (`true`: kept whole), or None when its
    /// requests carry the whole context (diagnostics and tests).
    fn projection(&self, action: &str) -> Option<String> {
        self.projections
            .get(action)
            .map(|e| e.describe().to_string())
    }

    /// How many actions run with a context projection.
    fn projected_actions(&self) -> usize {
        self.projections.len()
    }

    /// How many decisions this snapshot made on a projected context.
    fn projected_decisions(&self) -> u64 {
        self.projected.load(Ordering::Relaxed)
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
        self.decide_with(
            principal,
            action,
            resource,
            tenant,
            ContextSrc::Text(context_json),
        )
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
        self.decide_with(
            principal,
            action,
            resource,
            tenant,
            ContextSrc::Value(context),
        )
    }

    /// [`Self::decide_value`] with the context already built as Cedar values; `json` gives its
    /// JSON form (the one `decide_value` would take) when Cedar's schema-directed reading must
    /// decide (a context that does not conform as explicit values). `projected`: the context
    /// was built to `action`'s projection ([`Self::projection_of`]); the request is then
    /// validated against the pruned schema.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn decide_built(
        &self,
        principal: &str,
        action: &str,
        resource: &str,
        tenant: &str,
        context: &Context,
        json: &dyn Fn() -> serde_json::Value,
        projected: bool,
    ) -> (Answer, Option<Answer>) {
        let src = if projected {
            self.projected.fetch_add(1, Ordering::Relaxed);
            ContextSrc::Projected(context, json)
        } else {
            ContextSrc::Built(context, json)
        };
        self.decide_with(principal, action, resource, tenant, src)
    }

    /// The context projection of `action`, if it has one (`lib.rs` builds the projected context).
    pub(crate) fn projection_of(&self, action: &str) -> Option<&Eff> {
        self.projections.get(action)
    }

    /// Whether `action`'s context declares `now` (see `declare_now`).
    pub(crate) fn declares_now(&self, action: &str) -> bool {
        self.now_actions.get().is_some_and(|s| s.contains(action))
    }

    fn decide_with(
        &self,
        principal: &str,
        action: &str,
        resource: &str,
        tenant: &str,
        context: ContextSrc<'_>,
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
        context: ContextSrc<'_>,
    ) -> Result<Request, ()> {
        let p = uid(PRINCIPAL_TYPE, principal).map_err(|_| ())?;
        let a = uid(ACTION_TYPE, action).map_err(|_| ())?;
        let r = uid(RESOURCE_TYPE, resource).map_err(|_| ())?;
        let schema = match (context, &self.pruned) {
            (ContextSrc::Projected(..), Some(pruned)) => pruned,
            (ContextSrc::Projected(..), None) => return Err(()),
            _ => &self.schema,
        };
        let fast = match context {
            ContextSrc::Text(t) => serde_json::from_str::<serde_json::Value>(t)
                .ok()
                .and_then(|v| fast_context(&v)),
            ContextSrc::Value(v) => fast_context(v),
            ContextSrc::Built(c, _) | ContextSrc::Projected(c, _) => Some(c.clone()),
        };
        if let Some(ctx) = fast {
            if let Ok(req) = Request::new(p.clone(), a.clone(), r.clone(), ctx, Some(schema)) {
                return Ok(req);
            }
        }
        // Not built or not conforming as explicit values: Cedar's schema-directed reading (the
        // reference: implicit entity and extension forms, and the deny of a non-conforming one).
        let ctx = match context {
            ContextSrc::Text(t) => Context::from_json_str(t, Some((schema, &a))),
            ContextSrc::Value(v) => Context::from_json_value(v.clone(), Some((schema, &a))),
            ContextSrc::Built(_, json) | ContextSrc::Projected(_, json) => {
                Context::from_json_value(json(), Some((schema, &a)))
            }
        }
        .map_err(|_| ())?;
        Request::new(p, a, r, ctx, Some(schema)).map_err(|_| ())
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
            .filter_map(|u| self.store.lookup(&u.0, &u.1))
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
        if self.store.lookup(&p_key.0, &p_key.1).is_none() {
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
        if self.store.lookup(&r_key.0, &r_key.1).is_none() {
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
            .map(|n| self.store.fragment(*n))
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
