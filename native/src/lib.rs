//! `callgate._native`: the compiled hot path of callgate's Propose decision.
//!
//! The Python stages (`callgate/propose/*`) are the reference; everything here answers exactly
//! as they do (tests/test_native_parity.py) or says `defer`, and the Python path then decides.

mod cedar;
mod json;
mod normalize;
mod project;
mod schema;
mod vocab;
mod zone;

use json::{Limits, Num, Refusal, Value};
use normalize::{Case, Leaf, Mode, Step};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

fn limits(max_bytes: usize, max_depth: usize) -> Limits {
    Limits {
        max_bytes,
        max_depth,
    }
}

fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        Value::Num(Num::Int(i)) => i.into_pyobject(py)?.into_any(),
        Value::Num(Num::Big(s)) => py
            .import("builtins")?
            .getattr("int")?
            .call1((s.as_str(),))?,
        Value::Num(Num::Float(f)) => f.into_pyobject(py)?.into_any(),
        Value::Str(s) => s.into_pyobject(py)?.into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(members) => {
            let d = PyDict::new(py);
            for (k, item) in members {
                d.set_item(k, to_py(py, item)?)?;
            }
            d.into_any()
        }
    })
}

/// A context member handed over as Python values (issue 30: `usage`, `session`): dicts with
/// string keys, lists, strings and exact `int`s that fit i64, at most 16 levels deep. None for
/// anything else (a `Decimal` sum, a bool, a float): the caller leaves the decision to the
/// engine, which writes such values as Cedar does.
fn plain_value(v: &Bound<'_, PyAny>, depth: usize) -> Option<Value> {
    if depth > 16 {
        return None;
    }
    if v.is_exact_instance_of::<pyo3::types::PyInt>() {
        return v.extract::<i64>().ok().map(|i| Value::Num(Num::Int(i)));
    }
    if let Ok(s) = v.cast::<pyo3::types::PyString>() {
        return s.to_str().ok().map(|t| Value::Str(t.to_owned()));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut out = Vec::with_capacity(d.len());
        for (k, x) in d.iter() {
            let k = k
                .cast::<pyo3::types::PyString>()
                .ok()?
                .to_str()
                .ok()?
                .to_owned();
            out.push((k, plain_value(&x, depth + 1)?));
        }
        return Some(Value::Object(out));
    }
    if let Ok(l) = v.cast::<PyList>() {
        let mut out = Vec::with_capacity(l.len());
        for x in l.iter() {
            out.push(plain_value(&x, depth + 1)?);
        }
        return Some(Value::Array(out));
    }
    None
}

/// The code of the refusal of `parse_arguments` (or `parse_json_document` when `document`), or
/// None when the bytes parse.
#[pyfunction]
#[pyo3(signature = (raw, max_bytes, max_depth, document=false))]
fn parse_code(
    py: Python<'_>,
    raw: &[u8],
    max_bytes: usize,
    max_depth: usize,
    document: bool,
) -> Option<&'static str> {
    let l = limits(max_bytes, max_depth);
    let r = py.detach(|| {
        if document {
            json::parse_document(raw, &l)
        } else {
            json::parse_arguments(raw, &l)
        }
    });
    r.err().map(Refusal::code)
}

/// Parse any JSON document and return `(code, value)`: the Python value when it parses.
#[pyfunction]
fn parse_value<'py>(
    py: Python<'py>,
    raw: &[u8],
    max_bytes: usize,
    max_depth: usize,
) -> PyResult<(Option<&'static str>, Bound<'py, PyAny>)> {
    let l = limits(max_bytes, max_depth);
    match py.detach(|| json::parse_document(raw, &l)) {
        Ok(v) => Ok((None, to_py(py, &v)?)),
        Err(e) => Ok((Some(e.code()), py.None().into_bound(py))),
    }
}

/// Parse a JSON document and return `(code, canonical bytes)` (RFC 8785 of the parsed value).
#[pyfunction]
fn canonical_of<'py>(
    py: Python<'py>,
    raw: &[u8],
    max_bytes: usize,
    max_depth: usize,
) -> (Option<&'static str>, Bound<'py, PyBytes>) {
    let l = limits(max_bytes, max_depth);
    let r = py.detach(|| {
        let v = json::parse_document(raw, &l)?;
        let mut out = Vec::with_capacity(raw.len());
        json::canonicalize(&v, &mut out)?;
        Ok::<_, Refusal>(out)
    });
    match r {
        Ok(b) => (None, PyBytes::new(py, &b)),
        Err(e) => (Some(e.code()), PyBytes::new(py, b"")),
    }
}

/// ECMAScript form of a finite double (RFC 8785 number serialization).
#[pyfunction]
fn format_number(f: f64) -> String {
    json::format_float(f)
}

fn digest_of(tenant: &str, tool: &str, canonical: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(tenant.as_bytes());
    h.update([0u8]);
    h.update(tool.as_bytes());
    h.update([0u8]);
    h.update(canonical);
    let out = h.finalize();
    let mut s = String::with_capacity(7 + 64);
    s.push_str("sha256:");
    for b in out {
        s.push_str(&format!("{:02x}", b));
    }
    s
}

/// `invocation_digest` of digest.py (the caller checked the identity strings).
#[pyfunction]
fn invocation_digest(
    tenant: &str,
    tool_name: &str,
    tool_version: &str,
    canonical: &[u8],
) -> String {
    digest_of(tenant, &format!("{tool_name}@{tool_version}"), canonical)
}

/// One tool prepared once per snapshot: its identity, normalizer chain and (when the schema is
/// in the native subset) its input and normalized schemas.
#[pyclass(frozen, module = "callgate._native")]
struct Tool {
    name: String,
    version: String,
    steps: Vec<Step>,
    schema: Option<schema::Schema>,
    normalized_schema: Option<schema::Schema>,
    /// The ToolSpec's `resource_template` (`kind:{field}`), for the one-call decision.
    resource: Option<String>,
}

fn parse_text(text: &str) -> PyResult<Value> {
    json::parse_document(text.as_bytes(), &limits(usize::MAX, usize::MAX))
        .map_err(|e| PyValueError::new_err(format!("not strict JSON: {}", e.code())))
}

#[pymethods]
impl Tool {
    /// `normalizers`: `(kind, field, options_json, alias_table)` per declaration, in order, as
    /// validated by `NormalizerChain.build`; `alias_table` maps `_text_key(alias)` to its target.
    /// `schema_json` / `normalized_schema_json`: the schema documents when in the native subset.
    /// `resource_template`: the ToolSpec's, when the one-call decision (`decide`) may run.
    #[new]
    #[pyo3(signature = (name, version, normalizers, schema_json=None, normalized_schema_json=None, resource_template=None))]
    fn new(
        name: String,
        version: String,
        normalizers: Vec<(String, String, String, HashMap<String, String>)>,
        schema_json: Option<String>,
        normalized_schema_json: Option<String>,
        resource_template: Option<String>,
    ) -> PyResult<Self> {
        let mut steps = Vec::new();
        for (kind, field, options_json, table) in normalizers {
            let options = parse_text(&options_json)?;
            let mut segs = normalize::parse_pointer(&field);
            let leaf = match kind.as_str() {
                "relative_date" => Leaf::RelativeDate,
                "text" => {
                    let collapse =
                        matches!(options.get("collapse_whitespace"), Some(Value::Bool(true)));
                    let case = match options.get("case") {
                        Some(Value::Str(c)) if c == "lower" => Case::Lower,
                        Some(Value::Str(c)) if c == "upper" => Case::Upper,
                        _ => Case::Keep,
                    };
                    Leaf::Text { collapse, case }
                }
                "enum_alias" => {
                    let mut canonical: Vec<String> = table.values().cloned().collect();
                    canonical.sort();
                    canonical.dedup();
                    Leaf::Alias { canonical, table }
                }
                "default" => {
                    let value = options.get("value").cloned().unwrap_or(Value::Null);
                    let last = segs
                        .pop()
                        .ok_or_else(|| PyValueError::new_err("empty field"))?;
                    Leaf::Default {
                        key: last.key,
                        value,
                    }
                }
                "round" => {
                    let decimals = match options.get("decimals") {
                        Some(Value::Num(Num::Int(d))) => *d as i32,
                        _ => return Err(PyValueError::new_err("round needs decimals")),
                    };
                    let mode = match options.get("mode") {
                        Some(Value::Str(m)) if m == "half_up" => Mode::HalfUp,
                        _ => Mode::HalfEven,
                    };
                    Leaf::Round { decimals, mode }
                }
                "datetime" => Leaf::DateTime,
                "decimal" => {
                    let scale = match options.get("scale") {
                        Some(Value::Num(Num::Int(d))) if (0..=4).contains(d) => *d as u32,
                        _ => return Err(PyValueError::new_err("decimal needs a scale of 0-4")),
                    };
                    let bound = |name: &str| -> PyResult<Option<i128>> {
                        match options.get(name) {
                            None | Some(Value::Null) => Ok(None),
                            Some(Value::Str(t)) => normalize::parse_decimal_text(t, 19)
                                .map(|(units, _)| Some(units))
                                .ok_or_else(|| {
                                    PyValueError::new_err(format!(
                                        "decimal {name} is not exact here"
                                    ))
                                }),
                            _ => Err(PyValueError::new_err(format!(
                                "decimal {name} must be a decimal text"
                            ))),
                        }
                    };
                    Leaf::Decimal {
                        scale,
                        low: bound("minimum")?,
                        high: bound("maximum")?,
                    }
                }
                other => return Err(PyValueError::new_err(format!("kind {other} is not native"))),
            };
            steps.push(Step {
                name: format!("{kind}:{field}"),
                segs,
                leaf,
            });
        }
        let schema = match schema_json {
            Some(s) => Some(schema::Schema::compile(&s).map_err(PyValueError::new_err)?),
            None => None,
        };
        let normalized_schema = match normalized_schema_json {
            Some(s) => Some(schema::Schema::compile(&s).map_err(PyValueError::new_err)?),
            None => None,
        };
        Ok(Tool {
            name,
            version,
            steps,
            schema,
            normalized_schema,
            resource: resource_template,
        })
    }

    /// True when both schemas run natively (else `front` defers after the parse).
    #[getter]
    fn schema_native(&self) -> bool {
        self.schema.is_some() && self.normalized_schema.is_some()
    }

    /// Normalize a JSON document (parity tests): `(code, value, canonical, applied)`.
    #[pyo3(signature = (raw, reference_clock, zone=None, vocab=None))]
    fn normalize<'py>(
        &self,
        py: Python<'py>,
        raw: &[u8],
        reference_clock: &str,
        zone: Option<Bound<'py, zone::Zone>>,
        vocab: Option<Bound<'py, vocab::Vocab>>,
    ) -> PyResult<(
        Option<&'static str>,
        Bound<'py, PyAny>,
        Bound<'py, PyBytes>,
        Vec<String>,
    )> {
        let z = zone.as_ref().map(|b| b.get());
        let w = vocab.as_ref().map(|b| b.get());
        let r = py.detach(|| {
            let mut v = json::parse_document(raw, &limits(usize::MAX, usize::MAX))?;
            let ctx = normalize::context(reference_clock, z, w).ok_or(Refusal::Defer)?;
            let applied = normalize::apply(&mut v, &self.steps, &ctx)?;
            let mut out = Vec::new();
            json::canonicalize(&v, &mut out)?;
            Ok::<_, Refusal>((v, out, applied))
        });
        match r {
            Ok((v, out, applied)) => Ok((None, to_py(py, &v)?, PyBytes::new(py, &out), applied)),
            Err(e) => Ok((
                Some(e.code()),
                py.None().into_bound(py),
                PyBytes::new(py, b""),
                vec![],
            )),
        }
    }

    /// Schema yes/no on a JSON document (parity tests). None when no native schema.
    #[pyo3(signature = (raw, normalized=false))]
    fn is_valid(&self, py: Python<'_>, raw: &[u8], normalized: bool) -> PyResult<Option<bool>> {
        let s = if normalized {
            &self.normalized_schema
        } else {
            &self.schema
        };
        let Some(s) = s else { return Ok(None) };
        let v = parse_text(std::str::from_utf8(raw).map_err(|_| PyValueError::new_err("utf-8"))?)?;
        Ok(py.detach(|| s.is_valid(&v)).ok())
    }

    /// The front of Propose in one call with the GIL released: strict parse → schema yes/no →
    /// normalizers → RFC 8785 → digest → normalized schema yes/no.
    ///
    /// Returns `(code, top_level_keys, parsed, normalized, canonical, digest, applied)`; `code` is None on
    /// success, a refusal code (the Python stages then produce the full error), or `"defer"`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (raw, tenant, locale, reference_clock, max_bytes, max_depth, detach=true, zone=None, vocab=None))]
    fn front<'py>(
        &self,
        py: Python<'py>,
        raw: &[u8],
        tenant: &str,
        locale: &str,
        reference_clock: &str,
        max_bytes: usize,
        max_depth: usize,
        detach: bool,
        zone: Option<Bound<'py, zone::Zone>>,
        vocab: Option<Bound<'py, vocab::Vocab>>,
    ) -> PyResult<FrontResult<'py>> {
        let l = limits(max_bytes, max_depth);
        let z = zone.as_ref().map(|b| b.get());
        let w = vocab.as_ref().map(|b| b.get());
        let work = || self.run_front(raw, tenant, locale, reference_clock, &l, z, w);
        let r = if detach { py.detach(work) } else { work() };
        match r {
            Ok(ok) => front_ok(py, ok, true),
            Err(e) => Ok(front_err(py, e)),
        }
    }

    /// The whole Propose decision in one call: the front stages of `front`, then the resource
    /// (`resource_template` over the normalized value), the Cedar context built from the
    /// normalized value with `to_cedar_value`'s rules, and one Cedar decision per capability on
    /// `cedar` (the snapshot's `CedarSnapshot`). With `detach` the GIL is released for all of it.
    ///
    /// Returns the 7 values of `front` and `authz`: None when the front did not accept or when
    /// the authorization cannot be answered exactly here (a resource field missing or not a
    /// string/integer, a value the context conversion refuses or cannot match exactly: the
    /// Python engine then decides, and reports the fault), else `(resource, [(enforcing,
    /// shadow)] per capability)` as `CedarSnapshot.authorize` answers.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (raw, tenant, locale, reference_clock, max_bytes, max_depth, cedar, principal, capabilities, detach, zone=None, vocab=None, now=None))]
    fn decide<'py>(
        &self,
        py: Python<'py>,
        raw: &[u8],
        tenant: &str,
        locale: &str,
        reference_clock: &str,
        max_bytes: usize,
        max_depth: usize,
        cedar: &Bound<'py, cedar::CedarSnapshot>,
        principal: &str,
        capabilities: Vec<String>,
        detach: bool,
        zone: Option<Bound<'py, zone::Zone>>,
        vocab: Option<Bound<'py, vocab::Vocab>>,
        now: Option<&str>,
    ) -> PyResult<(FrontResult<'py>, Option<Authz>)> {
        let l = limits(max_bytes, max_depth);
        let snap = cedar.get();
        let z = zone.as_ref().map(|b| b.get());
        let w = vocab.as_ref().map(|b| b.get());
        let work = || {
            let ok = self.run_front(raw, tenant, locale, reference_clock, &l, z, w)?;
            let authz = self.authorize(&ok.2, snap, tenant, principal, &capabilities, now, &[]);
            Ok::<_, Refusal>((ok, authz))
        };
        let r = if detach { py.detach(work) } else { work() };
        match r {
            // decided here: nothing in Python reads the values, so they are not built (at 60 KB
            // that was ~1 ms of objects made and freed per call)
            Ok((ok, authz)) => Ok((front_ok(py, ok, authz.is_none())?, authz)),
            Err(e) => Ok((front_err(py, e), None)),
        }
    }

    /// The decision of `decide` for arguments already normalized (`canonical`: their canonical
    /// JSON) with more context members (issue 30: `members`, a dict such as `{"usage": ...,
    /// "session": {"labels": [...]}}` read after the idempotency claim, handed over as Python
    /// values: no JSON text is written or read for them). None when it cannot be answered
    /// exactly here (as `decide`; also when a capability's policies have no context projection,
    /// or a member holds anything but dicts, lists, strings and exact integers, e.g. a decimal
    /// sum): the Python engine decides.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (canonical, tenant, cedar, principal, capabilities, members, now=None))]
    fn decide_metered(
        &self,
        canonical: &[u8],
        tenant: &str,
        cedar: &Bound<'_, cedar::CedarSnapshot>,
        principal: &str,
        capabilities: Vec<String>,
        members: &Bound<'_, PyDict>,
        now: Option<&str>,
    ) -> Option<Authz> {
        let Value::Object(extra) = plain_value(members.as_any(), 0)? else {
            return None;
        };
        let l = limits(canonical.len() + 1, 1024);
        let normalized = json::parse_document(canonical, &l).ok()?;
        self.authorize(
            &normalized,
            cedar.get(),
            tenant,
            principal,
            &capabilities,
            now,
            &extra,
        )
    }
}

type FrontResult<'py> = (
    Option<&'static str>,
    usize,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyBytes>,
    String,
    Vec<String>,
);

type FrontOk = (usize, Option<Value>, Value, Vec<u8>, String, Vec<String>);

/// `(resource, [(enforcing, shadow)] per capability)`
type Authz = (String, Vec<(cedar::Answer, Option<cedar::Answer>)>);

/// `values`: build the parsed and normalized values as Python objects (else both are None).
fn front_ok<'py>(py: Python<'py>, ok: FrontOk, values: bool) -> PyResult<FrontResult<'py>> {
    let (keys, parsed, v, canonical, digest, applied) = ok;
    if !values {
        let none = py.None().into_bound(py);
        return Ok((
            None,
            keys,
            none.clone(),
            none,
            PyBytes::new(py, &canonical),
            digest,
            applied,
        ));
    }
    let normalized = to_py(py, &v)?;
    // the parsed value is the same object when no normalizer changed anything
    let parsed = match (&parsed, applied.is_empty()) {
        (Some(p), false) => to_py(py, p)?,
        _ => normalized.clone(),
    };
    Ok((
        None,
        keys,
        parsed,
        normalized,
        PyBytes::new(py, &canonical),
        digest,
        applied,
    ))
}

fn front_err<'py>(py: Python<'py>, e: Refusal) -> FrontResult<'py> {
    let none = py.None().into_bound(py);
    (
        Some(e.code()),
        0,
        none.clone(),
        none,
        PyBytes::new(py, b""),
        String::new(),
        vec![],
    )
}

/// `to_cedar_value` of `callgate/policy/engines/cedar.py` on a parsed value, or None where the
/// reference refuses the value (a `__` key, an integer outside Long, a number that is no Cedar
/// decimal) or where this could not match it exactly (a non-integral number of 10^14 or more):
/// the Python engine then decides and reports it.
fn cedar_value(v: &Value) -> Option<serde_json::Value> {
    use serde_json::Value as J;
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => J::Bool(*b),
        Value::Str(s) => J::String(s.clone()),
        Value::Num(Num::Int(i)) => J::from(*i),
        Value::Num(Num::Big(_)) => return None,
        Value::Num(Num::Float(f)) => cedar_float(*f)?,
        Value::Array(items) => J::Array(
            items
                .iter()
                .filter(|x| !matches!(x, Value::Null))
                .map(cedar_value)
                .collect::<Option<Vec<_>>>()?,
        ),
        Value::Object(members) => {
            let mut out = serde_json::Map::new();
            for (k, x) in members {
                if k.starts_with("__") {
                    return None;
                }
                if matches!(x, Value::Null) {
                    continue;
                }
                out.insert(k.clone(), cedar_value(x)?);
            }
            J::Object(out)
        }
    })
}

/// The whole Cedar context of a one-call decision.
enum Full {
    Built(cedar_policy::Context),
    Json(serde_json::Value),
}

/// Why [`cedar_restricted`] gave no value: `cedar_value` refuses it (the Python engine decides),
/// or it is not in the explicit form `cedar::restricted` builds (the JSON form decides).
enum Miss {
    Refused,
    NotFast,
}

/// `cedar::restricted(cedar_value(v))` in one walk, without the JSON form in between: the same
/// Cedar values (nulls dropped from arrays and records, a `__` key or an unconvertible number
/// refused, a float as a Long or a `decimal`); `NotFast` where that pair would need the JSON
/// form (the caller then takes it, so a refusal elsewhere in the value is still found).
fn cedar_restricted(v: &Value) -> Result<cedar_policy::RestrictedExpression, Miss> {
    use cedar_policy::RestrictedExpression as R;
    Ok(match v {
        Value::Null => return Err(Miss::Refused),
        Value::Bool(b) => R::new_bool(*b),
        Value::Str(s) => R::new_string(s.clone()),
        Value::Num(Num::Int(i)) => R::new_long(*i),
        Value::Num(Num::Big(_)) => return Err(Miss::Refused),
        Value::Num(Num::Float(f)) => match cedar_float(*f).ok_or(Miss::Refused)? {
            serde_json::Value::Number(n) => R::new_long(n.as_i64().ok_or(Miss::NotFast)?),
            other => R::new_decimal(other["__extn"]["arg"].as_str().ok_or(Miss::NotFast)?),
        },
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for x in items {
                if !matches!(x, Value::Null) {
                    out.push(cedar_restricted(x)?);
                }
            }
            R::new_set(out)
        }
        Value::Object(members) => {
            if members.iter().any(|(k, _)| k.starts_with("__")) {
                return Err(Miss::Refused);
            }
            let mut fields = Vec::with_capacity(members.len());
            for (k, x) in members {
                if !matches!(x, Value::Null) {
                    fields.push((k.clone(), cedar_restricted(x)?));
                }
            }
            R::new_record(fields).map_err(|_| Miss::NotFast)?
        }
    })
}

/// A float as `to_cedar_value` converts it: an integral value below 2^53 is a Long, else a
/// Cedar `decimal` of Python's `repr` digits (the shortest round-trip digits, as Rust's
/// `Display` writes them) with at most 4 fractional digits.
fn cedar_float(f: f64) -> Option<serde_json::Value> {
    if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
        return Some(serde_json::Value::from(f as i64));
    }
    if !(f.abs() < 1e14) {
        return None;
    }
    let text = format!("{f}");
    if text.contains(['e', 'E']) || text.split_once('.').map_or(0, |(_, b)| b.len()) > 4 {
        return None;
    }
    Some(serde_json::json!({"__extn": {"fn": "decimal", "arg": text}}))
}

/// `ResourceTemplate.render` of toolspecs.py over the normalized value, or None where it would
/// raise (or where this cannot match it exactly): the Python engine then decides.
fn render(template: &str, args: &Value) -> Option<String> {
    let b = template.as_bytes();
    let (mut out, mut i, mut last) = (String::with_capacity(template.len() + 16), 0, 0);
    while i < b.len() {
        if b[i] != b'{' {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < b.len() && b[j] != b'{' && b[j] != b'}' {
            j += 1;
        }
        if j < b.len() && b[j] == b'}' && j > i + 1 {
            out.push_str(&template[last..i]);
            out.push_str(&render_field(&template[i + 1..j], args)?);
            i = j + 1;
            last = i;
        } else {
            i = j; // the regex retries from the next brace
        }
    }
    out.push_str(&template[last..]);
    Some(out)
}

fn render_field(name: &str, args: &Value) -> Option<String> {
    let parts: Vec<&str> = match name.strip_prefix('/') {
        Some(rest) => rest.split('/').collect(),
        None => vec![name],
    };
    let mut node = args;
    for part in parts {
        let part = part.replace("~1", "/").replace("~0", "~");
        node = match node {
            Value::Object(_) => node.get(&part)?,
            Value::Array(items) => {
                if part.is_empty() || !part.bytes().all(|c| c.is_ascii_digit()) {
                    return None;
                }
                items.get(part.parse::<usize>().ok()?)?
            }
            _ => return None,
        };
    }
    match node {
        Value::Str(s) => Some(s.clone()),
        Value::Num(Num::Int(i)) => Some(i.to_string()),
        _ => None,
    }
}

/// `to_cedar_value` of a JSON document as Cedar JSON text, or None (parity tests).
#[pyfunction]
fn cedar_context_of(raw: &[u8]) -> Option<String> {
    let v = json::parse_document(raw, &limits(usize::MAX, usize::MAX)).ok()?;
    cedar_value(&v).map(|j| j.to_string())
}

/// Install the `text` / `enum_alias` character table (`normalize::TextTable`): the ranges of
/// its characters, and (lower, upper, casefold) as the reference maps those not mapped to
/// themselves. Once per process; false if already set.
#[pyfunction]
fn set_text_table(
    ranges: Vec<(u32, u32)>,
    mapped: std::collections::HashMap<char, (String, String, String)>,
) -> bool {
    normalize::set_text_table(
        ranges,
        mapped
            .into_iter()
            .map(|(c, (lower, upper, fold))| (c, normalize::TextChar { lower, upper, fold }))
            .collect(),
    )
}

/// `ResourceTemplate.render` of a JSON document, or None (parity tests).
#[pyfunction]
fn render_resource(template: &str, raw: &[u8]) -> Option<String> {
    let v = json::parse_document(raw, &limits(usize::MAX, usize::MAX)).ok()?;
    render(template, &v)
}

impl Tool {
    fn authorize(
        &self,
        normalized: &Value,
        snap: &cedar::CedarSnapshot,
        tenant: &str,
        principal: &str,
        capabilities: &[String],
        now: Option<&str>,
        extra: &[(String, Value)],
    ) -> Option<Authz> {
        let resource = render(self.resource.as_deref()?, normalized)?;
        let tool = format!("{}@{}", self.name, self.version);
        // Per capability, the context its policies read (issue 15 A5: the projection of the
        // snapshot), built as Cedar values straight from the parsed arguments; the whole context
        // (once, for every capability without a projection or whose left-out part does not
        // surely conform) as before: Cedar values, or the JSON form below.
        let (tool_v, tenant_v) = (Value::Str(tool.clone()), Value::Str(tenant.to_string()));
        let mut top = vec![
            ("tool", &tool_v),
            ("args", normalized),
            ("tenant", &tenant_v),
        ];
        for (k, v) in extra {
            top.push((k.as_str(), v));
        }
        let mut full: Option<Full> = None;
        let mut answers = Vec::with_capacity(capabilities.len());
        for cap in capabilities {
            // `context.now` (issue 30) for the actions that declare it
            let now = now.filter(|_| snap.declares_now(cap));
            if let Some(eff) = snap.projection_of(cap) {
                if let Ok(ctx) = project::context(&top, now, eff) {
                    let json = || project::context_json(&top, now, eff);
                    answers.push(
                        snap.decide_built(principal, cap, &resource, tenant, &ctx, &json, true),
                    );
                    continue;
                }
            }
            if !extra.is_empty() {
                return None; // `usage` outside a projection: the Python engine decides
            }
            if full.is_none() {
                full = Some(self.full_context(normalized, &tool, tenant)?);
            }
            answers.push(match full.as_ref()? {
                Full::Built(ctx) => {
                    let json = || {
                        let mut context = serde_json::Map::new();
                        context.insert("tool".into(), tool.clone().into());
                        context.insert("args".into(), cedar_value(normalized).unwrap_or_default());
                        context.insert("tenant".into(), tenant.into());
                        if let Some(t) = now {
                            context.insert(project::NOW.into(), project::datetime_json(t));
                        }
                        serde_json::Value::Object(context)
                    };
                    let with_now;
                    let ctx = match now {
                        Some(t) => {
                            with_now = ctx
                                .clone()
                                .merge([(
                                    project::NOW.to_string(),
                                    cedar_policy::RestrictedExpression::new_datetime(t),
                                )])
                                .ok()?;
                            &with_now
                        }
                        None => ctx,
                    };
                    snap.decide_built(principal, cap, &resource, tenant, ctx, &json, false)
                }
                Full::Json(context) => match now {
                    Some(t) => {
                        let mut context = context.clone();
                        if let serde_json::Value::Object(m) = &mut context {
                            m.insert(project::NOW.into(), project::datetime_json(t));
                        }
                        snap.decide_value(principal, cap, &resource, tenant, &context)
                    }
                    None => snap.decide_value(principal, cap, &resource, tenant, context),
                },
            });
        }
        Some((resource, answers))
    }

    /// The whole context: as Cedar values straight from the parsed arguments (no JSON form in
    /// between), else the JSON form; None where `to_cedar_value` refuses a value.
    fn full_context(&self, normalized: &Value, tool: &str, tenant: &str) -> Option<Full> {
        let built = match cedar_restricted(normalized) {
            Ok(args) => cedar_policy::Context::from_pairs([
                (
                    "tool".to_string(),
                    cedar_policy::RestrictedExpression::new_string(tool.to_string()),
                ),
                ("args".to_string(), args),
                (
                    "tenant".to_string(),
                    cedar_policy::RestrictedExpression::new_string(tenant.to_string()),
                ),
            ])
            .ok(),
            Err(Miss::Refused) => return None,
            Err(Miss::NotFast) => None,
        };
        if let Some(ctx) = built {
            return Some(Full::Built(ctx));
        }
        let mut context = serde_json::Map::new();
        context.insert("tool".into(), tool.into());
        context.insert("args".into(), cedar_value(normalized)?);
        context.insert("tenant".into(), tenant.into());
        Some(Full::Json(serde_json::Value::Object(context)))
    }

    fn run_front(
        &self,
        raw: &[u8],
        tenant: &str,
        locale: &str,
        reference_clock: &str,
        l: &Limits,
        zone: Option<&zone::Zone>,
        vocab: Option<&vocab::Vocab>,
    ) -> Result<FrontOk, Refusal> {
        let mut v = json::parse_arguments(raw, l)?;
        let keys = match &v {
            Value::Object(m) => m.len(),
            _ => 0,
        };
        let (Some(schema), Some(nschema)) = (&self.schema, &self.normalized_schema) else {
            return Err(Refusal::Defer);
        };
        // one conversion for both schemas when no normalizer runs (the value cannot change)
        let same = if self.steps.is_empty() {
            let j = schema::to_serde(&v)?;
            if !schema.is_valid_serde(&j)? {
                return Err(Refusal::SchemaViolation);
            }
            Some(j)
        } else {
            if !schema.is_valid(&v)? {
                return Err(Refusal::SchemaViolation);
            }
            None
        };
        // an invalid context is the reference's to report
        let ctx = normalize::context(reference_clock, zone, vocab).ok_or(Refusal::Defer)?;
        if !normalize::locale_ok(locale) {
            return Err(Refusal::Defer);
        }
        let parsed = if self.steps.is_empty() {
            None
        } else {
            Some(v.clone())
        };
        let applied = normalize::apply(&mut v, &self.steps, &ctx)?;
        let mut canonical = Vec::with_capacity(raw.len());
        json::canonicalize(&v, &mut canonical)?;
        let digest = digest_of(
            tenant,
            &format!("{}@{}", self.name, self.version),
            &canonical,
        );
        let valid = match &same {
            Some(j) => nschema.is_valid_serde(j)?,
            None => nschema.is_valid(&v)?,
        };
        if !valid {
            return Err(Refusal::SchemaViolation);
        }
        drop(same);
        Ok((keys, parsed, v, canonical, digest, applied))
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("__build__", env!("CALLGATE_NATIVE_BUILD"))?; // native/build.rs
    m.add("__source__", env!("CALLGATE_NATIVE_SOURCE"))?; // native/build.rs, scripts/native
    m.add_function(wrap_pyfunction!(parse_code, m)?)?;
    m.add_function(wrap_pyfunction!(parse_value, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_of, m)?)?;
    m.add_function(wrap_pyfunction!(format_number, m)?)?;
    m.add_function(wrap_pyfunction!(invocation_digest, m)?)?;
    m.add_function(wrap_pyfunction!(cedar_context_of, m)?)?;
    m.add_function(wrap_pyfunction!(render_resource, m)?)?;
    m.add_function(wrap_pyfunction!(set_text_table, m)?)?;
    m.add_class::<Tool>()?;
    m.add_class::<cedar::CedarSnapshot>()?;
    m.add_class::<zone::Zone>()?;
    m.add_class::<vocab::Vocab>()?;
    Ok(())
}
