//! JSON Schema 2020-12 yes/no through the `jsonschema` crate, with `pattern` on the `regress`
//! engine (ECMA-262, Unicode mode, as `RegExp(source, "u").test(text)`).
//!
//! Only schemas that the Python side found in the native subset come here (the fast check's
//! subset: see callgate/propose/core.py); a `format` this module does not port from formats.py
//! fails the build of the validator, so the tool stays on Python. `patternProperties` (and then
//! `additionalProperties`) are keywords of this module, so that property names are matched on
//! `regress` as `pattern` is. The parity suite proves the answers equal to python-jsonschema's on
//! the official test suite and on generated schemas.

use crate::json::{Num, Refusal, Value};
use crate::normalize::days_in_month;
use jsonschema::paths::Location;
use jsonschema::{Draft, Keyword, ValidationError, Validator};
use serde_json::{Map, Value as J};

pub struct Schema {
    validator: Validator,
}

/// A custom keyword's `validate` from its `is_valid` (the core asks yes/no only; the reference
/// reports violations).
fn yes_no<'i>(ok: bool, message: &'static str) -> Result<(), ValidationError<'i>> {
    if ok {
        Ok(())
    } else {
        Err(ValidationError::custom(message))
    }
}

struct Pattern {
    re: regress::Regex,
}

impl<'i> Keyword<'i> for Pattern {
    fn validate(&self, instance: &'i J) -> Result<(), ValidationError<'i>> {
        yes_no(self.is_valid(instance), "does not match the pattern")
    }

    fn is_valid(&self, instance: &'i J) -> bool {
        match instance {
            J::String(s) => self.re.find(s).is_some(),
            _ => true,
        }
    }
}

fn pattern_factory<'a>(
    _parent: &'a Map<String, J>,
    value: &'a J,
    _path: Location,
) -> Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'a>> {
    let J::String(source) = value else {
        return Err(ValidationError::custom("pattern must be a string"));
    };
    Ok(Box::new(Pattern {
        re: ecma_regex(source)?,
    }))
}

/// A `pattern` or a `patternProperties` name as ECMA-262 reads it (`RegExp(source, "u")`).
fn ecma_regex(source: &str) -> Result<regress::Regex, ValidationError<'static>> {
    regress::Regex::with_flags(source, "u")
        .map_err(|_| ValidationError::custom("pattern is not an ECMA-262 regular expression"))
}

/// The crate's options for a schema: `pattern` on `regress`, `format` from formats.py and, for a
/// document with `patternProperties`, that keyword and `additionalProperties` done here too, so
/// that property names are matched on `regress` as well (the crate would put them on
/// `fancy-regex`). Without `patternProperties` the crate's own fused `properties` /
/// `additionalProperties` validators run.
fn options(own_properties: bool) -> jsonschema::ValidationOptions<'static> {
    let o = jsonschema::options()
        .with_draft(Draft::Draft202012)
        .should_validate_formats(false)
        .with_keyword("pattern", pattern_factory)
        .with_keyword("format", format_factory);
    if own_properties {
        o.with_keyword("patternProperties", pattern_properties_factory)
            .with_keyword("additionalProperties", additional_properties_factory)
    } else {
        o
    }
}

/// A subschema of `patternProperties` / `additionalProperties`, compiled on its own (the native
/// subset has no `$ref`, so a subschema needs nothing from its root).
fn subschema(value: &J) -> Result<Validator, ValidationError<'static>> {
    options(true)
        .build(value)
        .map_err(|e| ValidationError::custom(format!("subschema refused: {e}")))
}

fn object_keys(parent: &Map<String, J>, keyword: &str) -> Vec<String> {
    match parent.get(keyword) {
        Some(J::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// `patternProperties`: every member whose name the regex finds satisfies the subschema
/// (`_Compiler.pattern_properties` of fastcheck.py).
struct PatternProperties {
    subs: Vec<(regress::Regex, Validator)>,
}

impl<'i> Keyword<'i> for PatternProperties {
    fn validate(&self, instance: &'i J) -> Result<(), ValidationError<'i>> {
        yes_no(self.is_valid(instance), "a pattern property is not valid")
    }

    fn is_valid(&self, instance: &'i J) -> bool {
        let J::Object(members) = instance else {
            return true;
        };
        self.subs.iter().all(|(re, sub)| {
            members
                .iter()
                .all(|(name, value)| re.find(name).is_none() || sub.is_valid(value))
        })
    }
}

fn pattern_properties_factory<'a>(
    _parent: &'a Map<String, J>,
    value: &'a J,
    _path: Location,
) -> Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'a>> {
    let J::Object(pats) = value else {
        return Err(ValidationError::custom(
            "patternProperties must be an object",
        ));
    };
    let subs = pats
        .iter()
        .map(|(source, sub)| Ok((ecma_regex(source)?, subschema(sub)?)))
        .collect::<Result<Vec<_>, ValidationError<'static>>>()?;
    Ok(Box::new(PatternProperties { subs }))
}

enum Additional {
    Any,
    Nothing,
    Schema(Validator),
}

/// `additionalProperties`: the members named by neither `properties` nor a `patternProperties`
/// regex of the same schema satisfy the subschema (`_Compiler.additional_properties`).
struct AdditionalProperties {
    known: std::collections::HashSet<String>,
    pats: Vec<regress::Regex>,
    sub: Additional,
}

impl AdditionalProperties {
    fn additional(&self, name: &str) -> bool {
        !self.known.contains(name) && self.pats.iter().all(|re| re.find(name).is_none())
    }
}

impl<'i> Keyword<'i> for AdditionalProperties {
    fn validate(&self, instance: &'i J) -> Result<(), ValidationError<'i>> {
        yes_no(
            self.is_valid(instance),
            "an additional property is not allowed",
        )
    }

    fn is_valid(&self, instance: &'i J) -> bool {
        let J::Object(members) = instance else {
            return true;
        };
        match &self.sub {
            Additional::Any => true,
            Additional::Nothing => members.keys().all(|name| !self.additional(name)),
            Additional::Schema(sub) => members
                .iter()
                .all(|(name, value)| !self.additional(name) || sub.is_valid(value)),
        }
    }
}

fn additional_properties_factory<'a>(
    parent: &'a Map<String, J>,
    value: &'a J,
    _path: Location,
) -> Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'a>> {
    let pats = object_keys(parent, "patternProperties")
        .iter()
        .map(|source| ecma_regex(source))
        .collect::<Result<Vec<_>, _>>()?;
    let sub = match value {
        J::Bool(true) => Additional::Any,
        J::Bool(false) => Additional::Nothing,
        other => Additional::Schema(subschema(other)?),
    };
    Ok(Box::new(AdditionalProperties {
        known: object_keys(parent, "properties").into_iter().collect(),
        pats,
        sub,
    }))
}

/// `format`, asserted, for the formats whose checker is ported exactly from
/// callgate/arguments/validate/formats.py; any other format keeps the tool on the Python stages.
#[derive(Clone, Copy)]
enum Format {
    Date,
    DateTime,
    Time,
    Duration,
    Uuid,
    Ipv4,
    Ipv6,
    JsonPointer,
    RelativeJsonPointer,
    Hostname,
    Email,
    IdnHostname,
    IdnEmail,
    Uri,
    UriReference,
    Iri,
    IriReference,
    UriTemplate,
}

thread_local! {
    /// Set by a format check that cannot answer exactly here (an `xn--` label, or any
    /// internationalized name, needs the reference's IDNA tables): the whole schema check then
    /// defers ([`Schema::check`]).
    static UNDECIDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn undecided() -> bool {
    UNDECIDED.with(|c| c.set(true));
    false
}

struct FormatKw {
    format: Format,
}

impl<'i> Keyword<'i> for FormatKw {
    fn validate(&self, instance: &'i J) -> Result<(), ValidationError<'i>> {
        yes_no(self.is_valid(instance), "does not match the format")
    }

    fn is_valid(&self, instance: &'i J) -> bool {
        let J::String(s) = instance else { return true };
        match self.format {
            Format::Date => is_date(s.as_bytes()),
            Format::DateTime => is_date_time(s.as_bytes()),
            Format::Time => is_time(s.as_bytes()),
            Format::Duration => duration_re().is_match(s),
            Format::Uuid => is_uuid(s.as_bytes()),
            Format::Ipv4 => is_ipv4(s),
            Format::Ipv6 => is_ipv6(s),
            Format::JsonPointer => is_json_pointer(s.as_bytes()),
            Format::RelativeJsonPointer => is_relative_json_pointer(s.as_bytes()),
            Format::Hostname => hostname(s).unwrap_or_else(undecided),
            Format::Email => email(s).unwrap_or_else(undecided),
            Format::IdnHostname => idn_hostname(s).unwrap_or_else(undecided),
            Format::IdnEmail => idn_email(s).unwrap_or_else(undecided),
            Format::Uri => uri_ok(s, &uri_res().absolute, None),
            Format::UriReference => uri_ok(s, &uri_res().absolute, Some(&uri_res().relative)),
            Format::Iri => uri_ok(s, &iri_res().absolute, None),
            Format::IriReference => uri_ok(s, &iri_res().absolute, Some(&iri_res().relative)),
            Format::UriTemplate => uri_template_re().is_match(s),
        }
    }
}

fn format_factory<'a>(
    _parent: &'a Map<String, J>,
    value: &'a J,
    _path: Location,
) -> Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'a>> {
    let format = match value.as_str() {
        Some("date") => Format::Date,
        Some("date-time") => Format::DateTime,
        Some("time") => Format::Time,
        Some("duration") => Format::Duration,
        Some("uuid") => Format::Uuid,
        Some("ipv4") => Format::Ipv4,
        Some("ipv6") => Format::Ipv6,
        Some("json-pointer") => Format::JsonPointer,
        Some("relative-json-pointer") => Format::RelativeJsonPointer,
        Some("hostname") => Format::Hostname,
        Some("email") => Format::Email,
        Some("idn-hostname") => Format::IdnHostname,
        Some("idn-email") => Format::IdnEmail,
        Some("uri") => Format::Uri,
        Some("uri-reference") => Format::UriReference,
        Some("iri") => Format::Iri,
        Some("iri-reference") => Format::IriReference,
        Some("uri-template") => Format::UriTemplate,
        _ => {
            return Err(ValidationError::custom(
                "format not supported by the native core",
            ))
        }
    };
    Ok(Box::new(FormatKw { format }))
}

/// `_DURATION_RE` of formats.py (RFC 3339 Appendix A; `\d` is ASCII there).
fn duration_re() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        let t = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)";
        regex::Regex::new(&format!(
            r"^P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)(?:{t})?|{t}|[0-9]+W)$"
        ))
        .expect("the duration pattern")
    })
}

/// `_UUID_RE`: 8-4-4-4-12 ASCII hex digits.
fn is_uuid(b: &[u8]) -> bool {
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                *c == b'-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

/// A decimal octet as `_DEC_OCTET` (and `ipaddress._parse_octet`) reads it: 0-255, no leading
/// zero, ASCII digits.
fn octet(p: &str) -> Option<u32> {
    let b = p.as_bytes();
    if b.is_empty()
        || b.len() > 3
        || !b.iter().all(u8::is_ascii_digit)
        || (b.len() > 1 && b[0] == b'0')
    {
        return None;
    }
    p.parse::<u32>().ok().filter(|v| *v <= 255)
}

/// `_IPV4_RE`: four dotted decimal octets.
fn ipv4(s: &str) -> Option<u32> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    parts
        .iter()
        .try_fold(0u32, |acc, p| Some(acc << 8 | octet(p)?))
}

fn is_ipv4(s: &str) -> bool {
    ipv4(s).is_some()
}

/// `_is_ipv6`: ASCII, no zone id, and what `ipaddress.IPv6Address` accepts
/// (`IPv6Address._ip_int_from_string`, step by step).
fn is_ipv6(s: &str) -> bool {
    if s.is_empty() || !s.is_ascii() || s.contains('%') || s.contains('/') {
        return false;
    }
    let mut parts: Vec<String> = s.split(':').map(str::to_owned).collect();
    if parts.len() < 3 {
        return false;
    }
    if parts[parts.len() - 1].contains('.') {
        let Some(v4) = parts.pop().and_then(|p| ipv4(&p)) else {
            return false;
        };
        parts.push(format!("{:x}", v4 >> 16));
        parts.push(format!("{:x}", v4 & 0xFFFF));
    }
    let n = parts.len();
    if n > 9 {
        return false;
    }
    let mut skip = None;
    for (i, p) in parts.iter().enumerate().take(n - 1).skip(1) {
        if p.is_empty() {
            if skip.is_some() {
                return false;
            }
            skip = Some(i);
        }
    }
    let (hi, lo) = match skip {
        Some(k) => {
            let (mut hi, mut lo) = (k, n - k - 1);
            if parts[0].is_empty() {
                hi -= 1;
                if hi != 0 {
                    return false;
                }
            }
            if parts[n - 1].is_empty() {
                lo -= 1;
                if lo != 0 {
                    return false;
                }
            }
            if hi + lo >= 8 {
                return false;
            }
            (hi, lo)
        }
        None => {
            if n != 8 || parts[0].is_empty() || parts[n - 1].is_empty() {
                return false;
            }
            (n, 0)
        }
    };
    let hextet =
        |p: &String| !p.is_empty() && p.len() <= 4 && p.bytes().all(|c| c.is_ascii_hexdigit());
    parts[..hi].iter().all(hextet) && parts[n - lo..].iter().all(hextet)
}

/// `_JSON_POINTER`: empty, or `/`-separated tokens where `~` is only `~0` or `~1`.
fn json_pointer(b: &[u8]) -> bool {
    if !b.is_empty() && b[0] != b'/' {
        return false;
    }
    b.iter()
        .enumerate()
        .all(|(i, c)| *c != b'~' || matches!(b.get(i + 1), Some(b'0' | b'1')))
}

fn is_json_pointer(b: &[u8]) -> bool {
    json_pointer(b)
}

/// `_RELATIVE_JSON_POINTER_RE`: a non-negative integer, an optional signed index offset, then
/// `#` or a JSON pointer (ASCII digits).
fn is_relative_json_pointer(b: &[u8]) -> bool {
    fn non_neg(b: &[u8]) -> usize {
        match b.first() {
            Some(b'0') => 1,
            Some(b'1'..=b'9') => b.iter().take_while(|c| c.is_ascii_digit()).count(),
            _ => 0,
        }
    }
    let mut i = non_neg(b);
    if i == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'+' | b'-')) {
        let k = non_neg(&b[i + 1..]);
        if k == 0 {
            return false;
        }
        i += 1 + k;
    }
    let rest = &b[i..];
    rest == b"#" || json_pointer(rest)
}

/// `_LDH_LABEL_RE`: 1-63 letters, digits and hyphens, a letter or digit at each end.
fn ldh_label(l: &[u8]) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && l[0].is_ascii_alphanumeric()
        && l[l.len() - 1].is_ascii_alphanumeric()
        && l.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
}

/// `_is_hostname`: ASCII LDH labels, at most 253 octets; None (undecided) when every label is
/// LDH and one is an `xn--` A-label, whose IDNA2008 check is the reference's.
fn hostname(s: &str) -> Option<bool> {
    if s.is_empty() || s.len() > 253 || !s.is_ascii() {
        return Some(false);
    }
    let labels: Vec<&[u8]> = s.as_bytes().split(|c| *c == b'.').collect();
    if !labels.iter().all(|l| ldh_label(l)) {
        return Some(false);
    }
    if labels
        .iter()
        .any(|l| l.len() >= 4 && l[..4].eq_ignore_ascii_case(b"xn--"))
    {
        return None;
    }
    Some(true) // ASCII labels: no right-to-left text for the Bidi rule
}

/// `_EMAIL_LOCAL_RE`: a dot-string of `atext` or a quoted string.
fn email_local_re() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        let atext = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~\-";
        regex::Regex::new(&format!(
            r#"^(?:[{atext}]+(?:\.[{atext}]+)*|"(?:[\x20\x21\x23-\x5B\x5D-\x7E]|\\[\x20-\x7E])*")$"#
        ))
        .expect("the e-mail local part pattern")
    })
}

/// `_email_ok(value, idn=False)`: `local@domain`, the domain a host name or an address literal.
fn email(s: &str) -> Option<bool> {
    mailbox(s, hostname)
}

/// `_email_ok(value, idn=True)` for ASCII text (the local part's other characters and the
/// domain's U-labels are the reference's to judge: such text defers); its domain an
/// `idn-hostname` (NFC keeps ASCII as it is).
fn idn_email(s: &str) -> Option<bool> {
    if !s.is_ascii() {
        return None;
    }
    mailbox(s, idn_hostname)
}

/// `local@domain`: the local part as `_EMAIL_LOCAL_RE` reads it, the domain an address literal
/// or what `domain_ok` says.
fn mailbox(s: &str, domain_ok: fn(&str) -> Option<bool>) -> Option<bool> {
    let Some((local, domain)) = s.rsplit_once('@') else {
        return Some(false);
    };
    if local.is_empty() || domain.is_empty() || s.len() > 254 || local.len() > 64 {
        return Some(false);
    }
    if !email_local_re().is_match(local) {
        return Some(false);
    }
    if domain.starts_with('[') && domain.ends_with(']') && domain.len() >= 2 {
        let inner = &domain[1..domain.len() - 1];
        let b = inner.as_bytes();
        return Some(if b.len() >= 5 && b[..5].eq_ignore_ascii_case(b"ipv6:") {
            is_ipv6(&inner[5..])
        } else {
            is_ipv4(inner)
        });
    }
    domain_ok(domain)
}

/// `_is_idn_hostname` for ASCII text: NR-LDH labels that are not R-LDH (`ab--c`), at most 253
/// octets in all. None (undecided) for other text (U-labels, the other IDNA dots) and when no
/// label fails but one is an `xn--` A-label, whose IDNA2008 check is the reference's.
fn idn_hostname(s: &str) -> Option<bool> {
    if !s.is_ascii() {
        return None;
    }
    if s.is_empty() || s.len() > 253 {
        return Some(false);
    }
    let mut a_label = false;
    for l in s.as_bytes().split(|c| *c == b'.') {
        if l.len() >= 4 && l[..4].eq_ignore_ascii_case(b"xn--") {
            if l.len() > 63 {
                return Some(false);
            }
            a_label = true;
        } else if !ldh_label(l) || l.get(2..4) == Some(b"--".as_slice()) {
            return Some(false);
        }
    }
    if a_label {
        None
    } else {
        Some(true)
    }
}

fn num(b: &[u8]) -> Option<i64> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0i64, |a, d| a * 10 + i64::from(d - b'0')))
}

/// `(\d{4})-(\d{2})-(\d{2})` + `_date_ok` (no year range: the regex allows 0000)
fn date_ok(b: &[u8]) -> bool {
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    match (num(&b[..4]), num(&b[5..7]), num(&b[8..10])) {
        (Some(y), Some(m), Some(d)) => (1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m),
        _ => false,
    }
}

fn is_date(b: &[u8]) -> bool {
    date_ok(b)
}

/// `(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:([Zz])|([+-])(\d{2}):(\d{2}))` + `_time_ok`
fn time_ok(b: &[u8]) -> bool {
    if b.len() < 9 || b[2] != b':' || b[5] != b':' {
        return false;
    }
    let (Some(hour), Some(minute), Some(second)) = (num(&b[..2]), num(&b[3..5]), num(&b[6..8]))
    else {
        return false;
    };
    let mut i = 8;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    let rest = &b[i..];
    let offset = match rest {
        [b'Z'] | [b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (Some(oh), Some(om)) = (num(&[*h1, *h2]), num(&[*m1, *m2])) else {
                return false;
            };
            if oh > 23 || om > 59 {
                return false;
            }
            (oh * 60 + om) * if *sign == b'+' { 1 } else { -1 }
        }
        _ => return false,
    };
    if hour > 23 || minute > 59 || second > 60 {
        return false;
    }
    if second == 60 {
        return (hour * 60 + minute - offset).rem_euclid(1440) == 23 * 60 + 59;
    }
    true
}

fn is_time(b: &[u8]) -> bool {
    time_ok(b)
}

fn is_date_time(b: &[u8]) -> bool {
    b.len() > 11 && matches!(b[10], b'T' | b't') && date_ok(&b[..10]) && time_ok(&b[11..])
}

impl Schema {
    pub fn compile(text: &str) -> Result<Schema, String> {
        let doc: J = serde_json::from_str(text).map_err(|e| format!("schema is not JSON: {e}"))?;
        let validator = options(has_key(&doc, "patternProperties"))
            .build(&doc)
            .map_err(|e| format!("schema refused by the native validator: {e}"))?;
        Ok(Schema { validator })
    }

    /// Valid or not; `Defer` when the value has a number the crate cannot hold exactly.
    pub fn is_valid(&self, v: &Value) -> Result<bool, Refusal> {
        let j = to_serde(v)?;
        self.is_valid_serde(&j)
    }

    /// [`Self::is_valid`] on a value already in the crate's form ([`to_serde`]), so one
    /// conversion serves both schemas when the normalizers cannot have changed the value.
    /// `Defer` when a format check met a value only the reference can judge (whatever the
    /// schema's answer: under `not` or `anyOf` that check's answer could decide it).
    pub fn is_valid_serde(&self, j: &J) -> Result<bool, Refusal> {
        UNDECIDED.with(|c| c.set(false));
        let ok = self.validator.is_valid(j);
        if UNDECIDED.with(|c| c.replace(false)) {
            return Err(Refusal::Defer);
        }
        Ok(ok)
    }
}

/// The value in the `jsonschema` crate's form; `Defer` for a number it cannot hold exactly.
pub fn to_serde(v: &Value) -> Result<J, Refusal> {
    Ok(match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Num(Num::Int(i)) => J::Number((*i).into()),
        Value::Num(Num::Big(_)) => return Err(Refusal::Defer),
        Value::Num(Num::Float(f)) => {
            J::Number(serde_json::Number::from_f64(*f).ok_or(Refusal::Defer)?)
        }
        Value::Str(s) => J::String(s.clone()),
        Value::Array(items) => J::Array(items.iter().map(to_serde).collect::<Result<_, _>>()?),
        Value::Object(members) => {
            let mut m = Map::with_capacity(members.len());
            for (k, item) in members {
                m.insert(k.clone(), to_serde(item)?);
            }
            J::Object(m)
        }
    })
}

// --- URI / IRI (RFC 3986 / RFC 3987 ABNF), URI templates: formats.py's patterns, anchored ------

/// `_UCSCHAR` of formats.py (RFC 3987 `ucschar`) as a class body.
const UCSCHAR: &str = concat!(
    r"\u{a0}-\u{d7ff}\u{f900}-\u{fdcf}\u{fdf0}-\u{ffef}",
    r"\u{10000}-\u{1fffd}\u{20000}-\u{2fffd}\u{30000}-\u{3fffd}\u{40000}-\u{4fffd}",
    r"\u{50000}-\u{5fffd}\u{60000}-\u{6fffd}\u{70000}-\u{7fffd}\u{80000}-\u{8fffd}",
    r"\u{90000}-\u{9fffd}\u{a0000}-\u{afffd}\u{b0000}-\u{bfffd}\u{c0000}-\u{cfffd}",
    r"\u{d0000}-\u{dfffd}\u{e1000}-\u{efffd}",
);
/// `_IPRIVATE` of formats.py (RFC 3987 `iprivate`).
const IPRIVATE: &str = r"\u{e000}-\u{f8ff}\u{f0000}-\u{ffffd}\u{100000}-\u{10fffd}";

/// A whole-text match (Python's `fullmatch`).
fn whole(pattern: &str) -> regex::Regex {
    regex::Regex::new(&format!(r"\A(?:{pattern})\z")).expect("a formats.py pattern")
}

struct UriRes {
    absolute: regex::Regex,
    relative: regex::Regex,
}

/// `_uri_patterns(iri=...)` of formats.py, piece by piece.
fn uri_patterns(iri: bool) -> UriRes {
    let ucs = if iri { UCSCHAR } else { "" };
    let private = if iri { IPRIVATE } else { "" };
    let unreserved = format!(r"A-Za-z0-9\-._~{ucs}");
    let sub_delims = r"!$&'()*+,;=";
    let pct = r"%[0-9A-Fa-f]{2}";
    let pchar = format!(r"(?:[{unreserved}{sub_delims}:@]|{pct})");
    let query = format!(r"(?:[{unreserved}{sub_delims}:@/?{private}]|{pct})*");
    let fragment = format!(r"(?:[{unreserved}{sub_delims}:@/?]|{pct})*");
    let userinfo = format!(r"(?:[{unreserved}{sub_delims}:]|{pct})*");
    let reg_name = format!(r"(?:[{unreserved}{sub_delims}]|{pct})*");
    let authority = format!(r"(?:{userinfo}@)?(?:\[(?P<ip>[^\[\]]*)\]|{reg_name})(?::[0-9]*)?");
    let segment = format!(r"{pchar}*");
    let path_abempty = format!(r"(?:/{segment})*");
    let path_absolute = format!(r"/(?:{pchar}+(?:/{segment})*)?");
    let path_rootless = format!(r"{pchar}+(?:/{segment})*");
    let path_noscheme = format!(r"(?:[{unreserved}{sub_delims}@]|{pct})+(?:/{segment})*");
    let tail = format!(r"(?:\?{query})?(?:#{fragment})?");
    let absolute = format!(
        r"[A-Za-z][A-Za-z0-9+\-.]*:(?://{authority}{path_abempty}|{path_absolute}|{path_rootless}|){tail}"
    );
    let relative =
        format!(r"(?://{authority}{path_abempty}|{path_absolute}|{path_noscheme}|){tail}");
    UriRes {
        absolute: whole(&absolute),
        relative: whole(&relative),
    }
}

fn uri_res() -> &'static UriRes {
    static RES: std::sync::OnceLock<UriRes> = std::sync::OnceLock::new();
    RES.get_or_init(|| uri_patterns(false))
}

fn iri_res() -> &'static UriRes {
    static RES: std::sync::OnceLock<UriRes> = std::sync::OnceLock::new();
    RES.get_or_init(|| uri_patterns(true))
}

/// `_IPVFUTURE_RE` of formats.py.
fn ipvfuture_re() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| whole(r"[vV][0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+"))
}

/// `_uri_ok` with `_ip_literal_ok`: the first pattern that matches the whole text, then its IP
/// literal (if any) checked as an IPvFuture or a real IPv6 address.
fn uri_ok(s: &str, absolute: &regex::Regex, relative: Option<&regex::Regex>) -> bool {
    let caps = absolute
        .captures(s)
        .or_else(|| relative.and_then(|re| re.captures(s)));
    let Some(caps) = caps else { return false };
    match caps.name("ip").map(|m| m.as_str()) {
        None => true,
        Some(lit) if lit.starts_with(['v', 'V']) => ipvfuture_re().is_match(lit),
        Some(lit) => !lit.is_empty() && is_ipv6(lit),
    }
}

/// `_URI_TEMPLATE_RE` of formats.py (RFC 6570 level 4; reserved operators refused).
fn uri_template_re() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        let varchar = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})";
        let varspec = format!(r"{varchar}(?:\.?{varchar})*(?::[1-9][0-9]{{0,3}}|\*)?");
        whole(&format!(
            r"(?:[\x21\x23\x24\x26\x27\x28-\x3B\x3D\x3F-\x5B\x5D\x5F\x61-\x7A\x7E{UCSCHAR}{IPRIVATE}]|%[0-9A-Fa-f]{{2}}|\{{[+#./;?&]?{varspec}(?:,{varspec})*\}})*"
        ))
    })
}

/// `key` anywhere in the document (as a member name of any object).
fn has_key(node: &J, key: &str) -> bool {
    match node {
        J::Object(m) => m.iter().any(|(k, v)| k == key || has_key(v, key)),
        J::Array(items) => items.iter().any(|v| has_key(v, key)),
        _ => false,
    }
}
