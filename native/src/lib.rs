//! `callgate._native`: the compiled hot path of callgate's Propose decision.
//!
//! The Python stages (`callgate/propose/*`) are the reference; everything here answers exactly
//! as they do (tests/test_native_parity.py) or says `defer`, and the Python path then decides.

mod cedar;
mod json;
mod normalize;
mod schema;

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
    #[new]
    #[pyo3(signature = (name, version, normalizers, schema_json=None, normalized_schema_json=None))]
    fn new(
        name: String,
        version: String,
        normalizers: Vec<(String, String, String, HashMap<String, String>)>,
        schema_json: Option<String>,
        normalized_schema_json: Option<String>,
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
        })
    }

    /// True when both schemas run natively (else `front` defers after the parse).
    #[getter]
    fn schema_native(&self) -> bool {
        self.schema.is_some() && self.normalized_schema.is_some()
    }

    /// Normalize a JSON document (parity tests): `(code, value, canonical, applied)`.
    fn normalize<'py>(
        &self,
        py: Python<'py>,
        raw: &[u8],
        reference_clock: &str,
    ) -> PyResult<(
        Option<&'static str>,
        Bound<'py, PyAny>,
        Bound<'py, PyBytes>,
        Vec<String>,
    )> {
        let r = py.detach(|| {
            let mut v = json::parse_document(raw, &limits(usize::MAX, usize::MAX))?;
            let ctx = normalize::Ctx {
                today: normalize::reference_today(reference_clock).ok_or(Refusal::Defer)?,
            };
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
    fn front<'py>(
        &self,
        py: Python<'py>,
        raw: &[u8],
        tenant: &str,
        locale: &str,
        reference_clock: &str,
        max_bytes: usize,
        max_depth: usize,
    ) -> PyResult<FrontResult<'py>> {
        let l = limits(max_bytes, max_depth);
        let r = py.detach(|| self.run_front(raw, tenant, locale, reference_clock, &l));
        match r {
            Ok((keys, parsed, v, canonical, digest, applied)) => {
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
            Err(e) => {
                let none = py.None().into_bound(py);
                Ok((
                    Some(e.code()),
                    0,
                    none.clone(),
                    none,
                    PyBytes::new(py, b""),
                    String::new(),
                    vec![],
                ))
            }
        }
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

impl Tool {
    fn run_front(
        &self,
        raw: &[u8],
        tenant: &str,
        locale: &str,
        reference_clock: &str,
        l: &Limits,
    ) -> Result<FrontOk, Refusal> {
        let mut v = json::parse_arguments(raw, l)?;
        let keys = match &v {
            Value::Object(m) => m.len(),
            _ => 0,
        };
        let (Some(schema), Some(nschema)) = (&self.schema, &self.normalized_schema) else {
            return Err(Refusal::Defer);
        };
        if !schema.is_valid(&v)? {
            return Err(Refusal::SchemaViolation);
        }
        // an invalid context is the reference's to report
        let today = normalize::reference_today(reference_clock).ok_or(Refusal::Defer)?;
        if !normalize::locale_ok(locale) {
            return Err(Refusal::Defer);
        }
        let parsed = if self.steps.is_empty() {
            None
        } else {
            Some(v.clone())
        };
        let applied = normalize::apply(&mut v, &self.steps, &normalize::Ctx { today })?;
        let mut canonical = Vec::with_capacity(raw.len());
        json::canonicalize(&v, &mut canonical)?;
        let digest = digest_of(
            tenant,
            &format!("{}@{}", self.name, self.version),
            &canonical,
        );
        if !nschema.is_valid(&v)? {
            return Err(Refusal::SchemaViolation);
        }
        Ok((keys, parsed, v, canonical, digest, applied))
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(parse_code, m)?)?;
    m.add_function(wrap_pyfunction!(parse_value, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_of, m)?)?;
    m.add_function(wrap_pyfunction!(format_number, m)?)?;
    m.add_function(wrap_pyfunction!(invocation_digest, m)?)?;
    m.add_class::<Tool>()?;
    m.add_class::<cedar::CedarSnapshot>()?;
    Ok(())
}
