//! The normalizers `default`, `enum_alias`, `text` and `round` of `callgate/arguments/normalize.py`,
//! byte-identical. Under `text` and `enum_alias`, text outside ASCII is normalized here when
//! every such character is a CJK ideograph or in the reference's [`TextTable`] (characters NFC
//! keeps that compose with nothing, each with Python's own case mappings); other text defers, as
//! Python's Unicode tables (NFC, NFKC, casefold, whitespace) are the reference.

use crate::json::{Num, Refusal, Value};
use crate::vocab::Vocab;
use crate::zone::{wall, Zone};
use std::collections::HashMap;

#[derive(Clone, Debug)]
pub struct Seg {
    pub key: String,
    pub index: Option<usize>,
    pub wildcard: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    Keep,
    Lower,
    Upper,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    HalfEven,
    HalfUp,
}

#[derive(Clone, Debug)]
pub enum Leaf {
    RelativeDate,
    Text {
        collapse: bool,
        case: Case,
    },
    Alias {
        canonical: Vec<String>,
        table: HashMap<String, String>,
    },
    Default {
        key: String,
        value: Value,
    },
    Round {
        decimals: i32,
        mode: Mode,
    },
    /// `kind: datetime`: an RFC 3339 date-time in the session's zone.
    DateTime,
    /// `kind: decimal`: `scale` places (0-4), optional bounds (in units of 10^-18).
    Decimal {
        scale: u32,
        low: Option<i128>,
        high: Option<i128>,
    },
}

/// Units of 10^-18: every value the decimal leaf accepts is a whole number of them (at most 18
/// integer and 18 fractional digits: below 10^36, inside i128).
const DEC_ONE: i128 = 1_000_000_000_000_000_000;
/// `DECIMAL_LIMIT` of normalize.py (Cedar's decimal range), in units of 10^-18.
const DEC_LIMIT: i128 = 922_337_203_685_477_580_700_000_000_000_000;

/// `-?(0|[1-9][0-9]*)(\.[0-9]+)?` with at most `max_int` integer and 18 fractional digits, as
/// (units of 10^-18, fractional places once trailing zeros are dropped); None for another text.
pub fn parse_decimal_text(t: &str, max_int: usize) -> Option<(i128, u32)> {
    let (neg, body) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let (int, frac) = match body.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (body, None),
    };
    let ib = int.as_bytes();
    if ib.is_empty() || ib.len() > max_int || !ib.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if ib.len() > 1 && ib[0] == b'0' {
        return None;
    }
    let frac = frac.unwrap_or("");
    let fb = frac.as_bytes();
    if (body.contains('.') && fb.is_empty()) || fb.len() > 18 || !fb.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    let mut v: i128 = 0;
    for &b in ib {
        v = v.checked_mul(10)?.checked_add((b - b'0') as i128)?;
    }
    let mut f: i128 = 0;
    for &b in fb {
        f = f * 10 + (b - b'0') as i128;
    }
    f *= 10i128.pow(18 - fb.len() as u32);
    let units = v.checked_mul(DEC_ONE)?.checked_add(f)?;
    let places = frac.trim_end_matches('0').len() as u32;
    Some((if neg { -units } else { units }, places))
}

/// `Decimal(repr(f))` of a finite float as (units of 10^-18, places), or None when it is not a
/// whole number of units or is past 10^19 (either way the leaf refuses it).
fn float_decimal(f: f64) -> Option<(i128, u32)> {
    if f == 0.0 {
        return Some((0, 0));
    }
    let (digits, exp) = crate::json::shortest_digits(f.abs());
    let digits = digits.trim_end_matches('0');
    let last = exp - digits.len() as i32 + 1; // power of ten of the last digit
    if exp >= 19 || last < -18 {
        return None;
    }
    let mut coef: i128 = 0;
    for b in digits.bytes() {
        coef = coef * 10 + (b - b'0') as i128;
    }
    let units = coef * 10i128.pow((last + 18) as u32);
    let places = if last < 0 { (-last) as u32 } else { 0 };
    Some((if f < 0.0 { -units } else { units }, places))
}

/// `_make_decimal_leaf` of normalize.py: the exact decimal a number or decimal string says, at
/// most `scale` places (never rounded), inside Cedar's range and the bounds, written with
/// exactly `scale` places (no negative zero).
fn decimal_leaf(
    node: &Value,
    scale: u32,
    low: Option<i128>,
    high: Option<i128>,
) -> Result<Option<Value>, LeafError> {
    let parsed = match node {
        Value::Null | Value::Bool(_) | Value::Array(_) | Value::Object(_) => return Ok(None),
        Value::Num(Num::Int(i)) => Some((*i as i128 * DEC_ONE, 0)),
        Value::Num(Num::Big(_)) => None, // past 2^63: out of Cedar's range
        Value::Num(Num::Float(f)) => float_decimal(*f),
        Value::Str(s) => {
            if !s.is_ascii() {
                return Err(LeafError::Defer); // NFKC and Unicode whitespace: the reference
            }
            Some(parse_decimal_text(strip(s), 18).ok_or(LeafError::Field)?)
        }
    };
    let (units, places) = parsed.ok_or(LeafError::Field)?;
    if units != 0 && places > scale {
        return Err(LeafError::Field); // more places than declared: amounts are never rounded
    }
    if units.abs() >= DEC_LIMIT || low.is_some_and(|l| units < l) || high.is_some_and(|h| units > h)
    {
        return Err(LeafError::Field);
    }
    let q = units / 10i128.pow(18 - scale); // exact: no more than `scale` places
    let p = 10i128.pow(scale);
    let mut out = String::new();
    if q < 0 {
        out.push('-');
    }
    out.push_str(&(q.abs() / p).to_string());
    if scale > 0 {
        out.push('.');
        out.push_str(&format!("{:0width$}", q.abs() % p, width = scale as usize));
    }
    Ok(match node {
        Value::Str(s) if *s == out => None,
        _ => Some(Value::Str(out)),
    })
}

#[derive(Clone, Debug)]
pub struct Step {
    pub name: String,
    /// Path to the node the leaf receives (for `default`: the parent object).
    pub segs: Vec<Seg>,
    pub leaf: Leaf,
}

/// `_parse_pointer` of normalize.py (the declaration was validated by Python at load).
pub fn parse_pointer(field: &str) -> Vec<Seg> {
    field[1..]
        .split('/')
        .map(|raw| {
            if raw == "*" {
                return Seg {
                    key: "*".into(),
                    index: None,
                    wildcard: true,
                };
            }
            let key = raw.replace("~1", "/").replace("~0", "~");
            let b = key.as_bytes();
            let canonical_index = !b.is_empty()
                && b.len() <= 9
                && b.iter().all(u8::is_ascii_digit)
                && (b.len() == 1 || b[0] != b'0');
            let index = if canonical_index {
                key.parse().ok()
            } else {
                None
            };
            Seg {
                key,
                index,
                wildcard: false,
            }
        })
        .collect()
}

/// CJK Unified Ideographs and Extension A: no decomposition (NFC and NFKC keep them), no case,
/// not whitespace, and nothing composes with them, so the `text` leaf treats them as the
/// reference does (Python's NFC, `strip`, `\s`, `lower`/`upper`) with the ASCII rules.
/// Compatibility ideographs (U+F900...) and the ideographic space are outside: they defer.
fn cjk_ideograph(c: char) -> bool {
    matches!(c, '\u{3400}'..='\u{4DBF}' | '\u{4E00}'..='\u{9FFF}')
}

/// A character outside ASCII that the `text` and `enum_alias` leaves handle here, with its
/// mappings as the reference computes them (Python's `str.lower`, `str.upper`, `str.casefold`).
pub struct TextChar {
    pub lower: String,
    pub upper: String,
    pub fold: String,
}

/// The table of [`TextChar`]s, handed over once by callgate/propose/core.py
/// (`text_table`): the reference's own `unicodedata` decides which characters are in it (NFC
/// keeps them and nothing composes with them, no case mapping depends on context, not
/// whitespace, and every mapping is made of such characters or ASCII), so a text of them and
/// ASCII is normalized here exactly as Python does; any other character defers.
pub struct TextTable {
    /// Half-open code point ranges of the characters, sorted.
    ranges: Vec<(u32, u32)>,
    /// The mappings of those not mapped to themselves by all three.
    mapped: HashMap<char, TextChar>,
}

static TEXT_TABLE: std::sync::OnceLock<TextTable> = std::sync::OnceLock::new();

/// Install the table (once per process; a second call changes nothing and answers false).
pub fn set_text_table(ranges: Vec<(u32, u32)>, mapped: HashMap<char, TextChar>) -> bool {
    let mut ranges = ranges;
    ranges.sort_unstable();
    TEXT_TABLE.set(TextTable { ranges, mapped }).is_ok()
}

impl TextTable {
    fn contains(&self, ch: char) -> bool {
        let cp = ch as u32;
        let i = self.ranges.partition_point(|&(lo, _)| lo <= cp);
        i > 0 && cp < self.ranges[i - 1].1
    }

    /// `s` with each character mapped: ASCII by `ascii`, the others by `pick` of their entry, or
    /// to themselves (CJK ideographs, and the table's characters without one).
    fn map(&self, s: &str, pick: fn(&TextChar) -> &String, ascii: fn(&char) -> char) -> String {
        let mut out = String::with_capacity(s.len());
        for ch in s.chars() {
            if ch.is_ascii() {
                out.push(ascii(&ch));
            } else if let Some(m) = self.mapped.get(&ch) {
                out.push_str(pick(m));
            } else {
                out.push(ch);
            }
        }
        out
    }
}

/// None for ASCII text; the table when every other character of `s` is a CJK ideograph or in
/// it; `Defer` otherwise (or before the table is installed).
fn text_chars(s: &str) -> Result<Option<&'static TextTable>, LeafError> {
    if s.is_ascii() {
        return Ok(None);
    }
    let table = TEXT_TABLE.get().ok_or(LeafError::Defer)?;
    if s.chars()
        .all(|ch| ch.is_ascii() || cjk_ideograph(ch) || table.contains(ch))
    {
        Ok(Some(table))
    } else {
        Err(LeafError::Defer)
    }
}

fn py_space(b: u8) -> bool {
    matches!(b, 0x09..=0x0d | 0x1c..=0x20)
}

fn strip(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_ascii() && py_space(c as u8))
}

fn collapse(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_ws = false;
    for c in s.chars() {
        if c.is_ascii() && py_space(c as u8) {
            if !in_ws {
                out.push(' ');
            }
            in_ws = true;
        } else {
            out.push(c);
            in_ws = false;
        }
    }
    out
}

/// What a leaf may report: the node cannot be normalized (`_FieldError`), or the native core
/// cannot answer for it exactly (`Defer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafError {
    Field,
    Defer,
}

impl From<Refusal> for LeafError {
    fn from(_: Refusal) -> Self {
        LeafError::Defer
    }
}

/// The resolved context (`_Resolved`): the user's local date at the reference clock, and the
/// session's zone rules when a `datetime` normalizer needs them.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    pub today: i64,
    pub zone: Option<&'a Zone>,
    /// The session locale's relative-date words (German, French, Spanish); English always.
    pub vocab: Option<&'a Vocab>,
}

/// One leaf on one node: `Ok(Some(new))` when the node changes.
fn apply_leaf(leaf: &Leaf, node: &Value, ctx: &Ctx) -> Result<Option<Value>, LeafError> {
    match leaf {
        Leaf::RelativeDate => {
            let Value::Str(s) = node else { return Ok(None) };
            if let Some(iso) = iso_date_shape(s) {
                iso.ok_or(LeafError::Field)?; // validates the calendar date
                return Ok(None);
            }
            if !s.is_ascii() {
                return Err(LeafError::Defer); // NFKC/casefold/zh vocabularies: the reference
            }
            let prepared = collapse(strip(s)).to_ascii_lowercase();
            let day = resolve_date(&prepared, ctx)?;
            let out = format_date(day);
            Ok(if &out == s {
                None
            } else {
                Some(Value::Str(out))
            })
        }
        Leaf::Text { collapse: c, case } => {
            let Value::Str(s) = node else { return Ok(None) };
            let table = text_chars(s)?;
            let mut out = strip(s).to_string();
            if *c {
                out = collapse(&out);
            }
            match (case, table) {
                (Case::Lower, None) => out = out.to_ascii_lowercase(),
                (Case::Upper, None) => out = out.to_ascii_uppercase(),
                (Case::Lower, Some(t)) => out = t.map(&out, |m| &m.lower, char::to_ascii_lowercase),
                (Case::Upper, Some(t)) => out = t.map(&out, |m| &m.upper, char::to_ascii_uppercase),
                (Case::Keep, _) => {}
            }
            Ok(if &out == s {
                None
            } else {
                Some(Value::Str(out))
            })
        }
        Leaf::Alias { canonical, table } => {
            let Value::Str(s) = node else { return Ok(None) };
            if canonical.iter().any(|c| c == s) {
                return Ok(None);
            }
            let key = match text_chars(s)? {
                None => strip(s).to_ascii_lowercase(),
                Some(t) => t.map(strip(s), |m| &m.fold, char::to_ascii_lowercase),
            };
            Ok(match table.get(&key) {
                Some(t) if t != s => Some(Value::Str(t.clone())),
                _ => None,
            })
        }
        Leaf::Default { key, value } => {
            let Value::Object(m) = node else {
                return Ok(None);
            };
            if m.iter().any(|(k, _)| k == key) {
                return Ok(None);
            }
            let mut new = m.clone();
            new.push((key.clone(), value.clone()));
            Ok(Some(Value::Object(new)))
        }
        Leaf::Decimal { scale, low, high } => decimal_leaf(node, *scale, *low, *high),
        Leaf::DateTime => {
            let Value::Str(s) = node else { return Ok(None) };
            if !s.is_ascii() {
                return Err(LeafError::Defer); // NFKC and Unicode whitespace: the reference
            }
            let zone = ctx.zone.ok_or(LeafError::Defer)?;
            let out = datetime_leaf(strip(s), zone, ctx)?;
            Ok(if &out == s {
                None
            } else {
                Some(Value::Str(out))
            })
        }
        Leaf::Round { decimals, mode } => {
            let Value::Num(Num::Float(f)) = node else {
                return Ok(None);
            };
            let r = round_float(*f, *decimals, *mode);
            Ok(if r.to_bits() == f.to_bits() {
                None
            } else {
                Some(Value::Num(Num::Float(r)))
            })
        }
    }
}

/// `Decimal(repr(f)).quantize(10**-decimals)` then `float(...)`, negative zero made positive;
/// returns `f` itself when repr's exponent is already >= -decimals.
pub fn round_float(f: f64, decimals: i32, mode: Mode) -> f64 {
    if !f.is_finite() || f == 0.0 && decimals >= 1 {
        return f; // repr "0.0"/"-0.0" has exponent -1
    }
    let neg = f.is_sign_negative();
    let (digits, n) = if f == 0.0 {
        ("0".to_string(), 1)
    } else {
        let sci = format!("{:e}", f.abs());
        let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        (
            mant.chars().filter(|c| *c != '.').collect::<String>(),
            exp + 1,
        )
    };
    let k = digits.len() as i32;
    let e = n - 1;
    // Decimal exponent of Python's repr text
    let exponent = if (-4..16).contains(&e) {
        -std::cmp::max(k - n, 1)
    } else {
        n - k
    };
    if exponent >= -decimals {
        return f;
    }
    let d = digits.as_bytes();
    let keep = n + decimals; // digits of `digits` that stay
    let (kept, first_dropped, rest_nonzero): (Vec<u8>, u8, bool) = if keep < 0 {
        (Vec::new(), b'0', true)
    } else {
        let keep = keep as usize;
        let mut kept = d[..keep.min(d.len())].to_vec();
        kept.resize(keep, b'0'); // 100.0 -> "1" at n=3 keeps "100"
        let first = d.get(keep).copied().unwrap_or(b'0');
        let rest = d.iter().skip(keep + 1).any(|&b| b != b'0');
        (kept, first, rest)
    };
    let up = match mode {
        Mode::HalfUp => first_dropped >= b'5',
        Mode::HalfEven => {
            first_dropped > b'5'
                || (first_dropped == b'5'
                    && (rest_nonzero || kept.last().is_some_and(|&b| (b - b'0') % 2 == 1)))
        }
    };
    // integer coefficient = kept (+1), value = coefficient * 10^-decimals
    let mut coef: Vec<u8> = if kept.is_empty() { vec![b'0'] } else { kept };
    if up {
        let mut i = coef.len();
        loop {
            if i == 0 {
                coef.insert(0, b'1');
                break;
            }
            i -= 1;
            if coef[i] == b'9' {
                coef[i] = b'0';
            } else {
                coef[i] += 1;
                break;
            }
        }
    }
    let text = format!(
        "{}{}e-{}",
        if neg { "-" } else { "" },
        std::str::from_utf8(&coef).unwrap_or("0"),
        decimals
    );
    let r: f64 = text.parse().unwrap_or(f);
    if r == 0.0 {
        0.0
    } else {
        r
    }
}

/// `_update` of normalize.py over an owned value. Every location is visited (errors are
/// collected, as the reference does); `changed` is set when any leaf changed a node.
fn update(node: &mut Value, segs: &[Seg], leaf: &Leaf, ctx: &Ctx, st: &mut StepState) {
    let Some((seg, rest)) = segs.split_first() else {
        match apply_leaf(leaf, node, ctx) {
            Ok(Some(new)) => {
                *node = new;
                st.changed = true;
            }
            Ok(None) => {}
            Err(LeafError::Field) => st.errors += 1,
            Err(LeafError::Defer) => st.deferred = true,
        }
        return;
    };
    if seg.wildcard {
        if let Value::Array(items) = node {
            for item in items.iter_mut() {
                update(item, rest, leaf, ctx, st);
            }
        }
        return;
    }
    match node {
        Value::Object(m) => {
            if let Some((_, child)) = m.iter_mut().find(|(k, _)| *k == seg.key) {
                update(child, rest, leaf, ctx, st);
            }
        }
        Value::Array(items) => {
            if let Some(i) = seg.index {
                if let Some(item) = items.get_mut(i) {
                    update(item, rest, leaf, ctx, st);
                }
            }
        }
        _ => {}
    }
}

#[derive(Default)]
struct StepState {
    changed: bool,
    errors: usize,
    deferred: bool,
}

/// Run the chain in order; returns the names of the normalizers that changed something.
///
/// A location that cannot be normalized makes the whole call `normalization_failed` (as the
/// reference, after running every normalizer), or `decimal_invalid` when every failing location
/// is under a `decimal` normalizer; a location the core cannot answer for stops the chain with
/// `Defer`, unless the answer is already certain: a failure outside `decimal` in the same or an
/// earlier step (each step's locations are disjoint, so it does not depend on the deferred
/// value; failures under `decimal` alone leave the code to what the rest of the chain does).
pub fn apply(value: &mut Value, steps: &[Step], ctx: &Ctx) -> Result<Vec<String>, Refusal> {
    let mut applied = Vec::new();
    let mut errors = 0usize;
    let mut other = 0usize; // failures outside `decimal`
    for step in steps {
        let mut st = StepState::default();
        update(value, &step.segs, &step.leaf, ctx, &mut st);
        errors += st.errors;
        if !matches!(step.leaf, Leaf::Decimal { .. }) {
            other += st.errors;
        }
        if st.deferred {
            return Err(if other > 0 {
                Refusal::NormalizationFailed
            } else {
                Refusal::Defer
            });
        }
        if st.changed {
            applied.push(step.name.clone());
        }
    }
    if errors > 0 {
        return Err(if other > 0 {
            Refusal::NormalizationFailed
        } else {
            Refusal::DecimalInvalid
        });
    }
    Ok(applied)
}

// ------------------------------------------------------------------------------------------
// Dates: proleptic Gregorian day numbers (days since 1970-01-01), years 1..=9999 as Python's

pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A leap year of the proleptic Gregorian calendar.
pub fn leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

pub fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A calendar date as Python's `date(y, m, d)` accepts it (year 1..9999).
pub fn valid_date(y: i64, m: i64, d: i64) -> Option<i64> {
    if !(1..=9999).contains(&y) || !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return None;
    }
    Some(days_from_civil(y, m, d))
}

fn digits(b: &[u8]) -> Option<i64> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0')))
}

/// `_ISO_DATE.fullmatch`: None when the text is not `YYYY-MM-DD`; Some(None) when it has the
/// shape but is no calendar date.
pub fn iso_date_shape(s: &str) -> Option<Option<i64>> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, m, d) = (digits(&b[..4])?, digits(&b[5..7])?, digits(&b[8..])?);
    Some(valid_date(y, m, d))
}

pub fn format_date(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Monday = 0, as Python's `date.weekday()`.
pub fn weekday(day: i64) -> i64 {
    (day + 3).rem_euclid(7) // 1970-01-01 was a Thursday
}

pub fn weekday_delta(today: i64, target: i64, rule: &str) -> i64 {
    match rule {
        "last" => -((today - target - 1).rem_euclid(7) + 1),
        "this" => target - today,
        _ => (target - today - 1).rem_euclid(7) + 1, // next
    }
}

fn en_weekday(name: &str) -> Option<i64> {
    Some(match name {
        "monday" | "mon" => 0,
        "tuesday" | "tue" | "tues" => 1,
        "wednesday" | "wed" => 2,
        "thursday" | "thu" | "thur" | "thurs" => 3,
        "friday" | "fri" => 4,
        "saturday" | "sat" => 5,
        "sunday" | "sun" => 6,
        _ => return None,
    })
}

/// `([0-9]{1,4}) (days?|weeks?)` -> days
fn count_unit(n: &str, unit: &str) -> Option<i64> {
    if n.is_empty() || n.len() > 4 {
        return None;
    }
    let n = digits(n.as_bytes())?;
    match unit {
        "day" | "days" => Some(n),
        "week" | "weeks" => Some(n * 7),
        _ => None,
    }
}

/// `_relative_days` for ASCII text (the zh vocabularies need non-ASCII text).
fn relative_days(text: &str, today: i64) -> Option<i64> {
    match text {
        "today" => return Some(0),
        "tomorrow" => return Some(1),
        "yesterday" => return Some(-1),
        "day after tomorrow" | "the day after tomorrow" => return Some(2),
        "day before yesterday" | "the day before yesterday" => return Some(-2),
        _ => {}
    }
    let parts: Vec<&str> = text.split(' ').collect();
    if parts.len() == 3 && parts[0] == "in" {
        if let Some(n) = count_unit(parts[1], parts[2]) {
            return Some(n);
        }
    }
    if parts.len() == 3 && parts[2] == "ago" {
        if let Some(n) = count_unit(parts[0], parts[1]) {
            return Some(-n);
        }
    }
    // (?:(next|last|this) )?([a-z]+)\.?
    let (rule, rest) = match text.split_once(' ') {
        Some((r @ ("next" | "last" | "this"), rest)) => (r, rest),
        _ => ("next", text),
    };
    let name = rest.strip_suffix('.').unwrap_or(rest);
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase()) {
        return None;
    }
    let target = en_weekday(name)?;
    Some(weekday_delta(weekday(today), target, rule))
}

fn resolve_date(prepared: &str, ctx: &Ctx) -> Result<i64, LeafError> {
    if let Some(iso) = iso_date_shape(prepared) {
        return iso.ok_or(LeafError::Field);
    }
    // the locale's words first, then English (`_relative_days`)
    let days = ctx
        .vocab
        .and_then(|v| v.days(prepared, ctx.today))
        .or_else(|| relative_days(prepared, ctx.today))
        .ok_or(LeafError::Field)?;
    let day = ctx.today + days;
    let (y, _, _) = civil_from_days(day);
    if !(1..=9999).contains(&y) {
        return Err(LeafError::Field); // OverflowError: out of the supported range
    }
    Ok(day)
}

/// The local date of a reference clock `YYYY-MM-DDTHH:MM:SS[.f]±HH:MM` (as `isoformat()` writes
/// it in the session's zone), or None for any other shape (the reference then decides).
/// The context of a call: `today` from the reference clock's own date, or with the session's
/// zone (a `datetime` normalizer) as the reference computes it, the clock's instant on the
/// zone's wall clock (`t.astimezone(zone).date()`); None where the reference would refuse it.
pub fn context<'a>(
    clock: &str,
    zone: Option<&'a Zone>,
    vocab: Option<&'a Vocab>,
) -> Option<Ctx<'a>> {
    let (today, utc) = reference_parts(clock)?;
    let today = match zone {
        None => today,
        Some(z) => {
            let local = utc + z.offset_utc(utc).0;
            let day = local.div_euclid(86400);
            if day < days_from_civil(1, 1, 1) || day > days_from_civil(9999, 12, 31) {
                return None;
            }
            day
        }
    };
    Some(Ctx { today, zone, vocab })
}

/// The clock's own date and its instant (UTC wall seconds).
fn reference_parts(clock: &str) -> Option<(i64, i64)> {
    let b = clock.as_bytes();
    if b.len() < 25 || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let today = match iso_date_shape(&clock[..10]) {
        Some(Some(d)) => d,
        _ => return None,
    };
    let (hh, mm, ss) = (
        digits(&b[11..13])?,
        digits(&b[14..16])?,
        digits(&b[17..19])?,
    );
    if hh > 23 || mm > 59 || ss > 59 {
        return None;
    }
    let mut i = 19;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start || i - start > 6 {
            return None;
        }
    }
    let off = &b[i..];
    if off.len() != 6 || !(off[0] == b'+' || off[0] == b'-') || off[3] != b':' {
        return None;
    }
    let (oh, om) = (digits(&off[1..3])?, digits(&off[4..6])?);
    if oh > 23 || om > 59 {
        return None;
    }
    // the reference converts through UTC: an instant outside years 1..9999 is refused there
    let sign = if off[0] == b'+' { 1 } else { -1 };
    let utc_minutes = today * 1440 + hh * 60 + mm - sign * (oh * 60 + om);
    let utc_day = utc_minutes.div_euclid(1440);
    if utc_day < days_from_civil(1, 1, 1) || utc_day > days_from_civil(9999, 12, 31) {
        return None;
    }
    Some((today, utc_minutes * 60 + ss))
}

/// `_LOCALE` of normalize.py: `[A-Za-z]{2,8}(?:[-_][A-Za-z0-9]{1,8})*`.
pub fn locale_ok(locale: &str) -> bool {
    let mut parts = locale.split(['-', '_']);
    let Some(first) = parts.next() else {
        return false;
    };
    if !(2..=8).contains(&first.len()) || !first.bytes().all(|b| b.is_ascii_alphabetic()) {
        return false;
    }
    parts.all(|p| (1..=8).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_alphanumeric()))
}

// ------------------------------------------------------------------------------------------
// Date-times (kind "datetime"): `_leaf_datetime` of normalize.py. Wall times are seconds since
// 1970-01-01 (crate::zone), microseconds apart; Python's datetime range is years 1..=9999.

fn wall_min() -> i64 {
    wall(days_from_civil(1, 1, 1), 0, 0, 0)
}

fn wall_max() -> i64 {
    wall(days_from_civil(9999, 12, 31), 23, 59, 59)
}

fn in_range(ts: i64) -> Result<i64, LeafError> {
    if ts < wall_min() || ts > wall_max() {
        Err(LeafError::Field) // OverflowError: out of the supported range
    } else {
        Ok(ts)
    }
}

/// `_DT.fullmatch` then `_parse_dt`'s checks: None when the text has another shape;
/// `Err(Field)` for a shape that is no real instant; else (wall seconds, microseconds, offset).
fn parse_dt(t: &str) -> Result<Option<(i64, i64, Option<i64>)>, LeafError> {
    let b = t.as_bytes();
    let dig = |r: std::ops::Range<usize>| b.get(r).and_then(digits);
    if b.len() < 16
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
    {
        return Ok(None);
    }
    let (Some(y), Some(mo), Some(d), Some(h), Some(mi)) =
        (dig(0..4), dig(5..7), dig(8..10), dig(11..13), dig(14..16))
    else {
        return Ok(None);
    };
    let mut i = 16;
    let mut sec = 0;
    let mut frac: &[u8] = b"";
    if b.get(i) == Some(&b':') {
        let Some(s) = dig(i + 1..i + 3) else {
            return Ok(None);
        };
        sec = s;
        i += 3;
        if b.get(i) == Some(&b'.') {
            let start = i + 1;
            let mut j = start;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j == start || j - start > 32 {
                return Ok(None);
            }
            frac = &b[start..j];
            i = j;
        }
    }
    let off = match &b[i..] {
        [] => None,
        [b'Z' | b'z'] => Some(0),
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (Some(oh), Some(om)) = (digits(&[*h1, *h2]), digits(&[*m1, *m2])) else {
                return Ok(None);
            };
            if oh > 23 || om > 59 {
                return Err(LeafError::Field); // not a valid UTC offset
            }
            let v = oh * 3600 + om * 60;
            Some(if *sign == b'-' { -v } else { v })
        }
        _ => return Ok(None),
    };
    if frac.len() > 6 && frac[6..].iter().any(|&c| c != b'0') {
        return Err(LeafError::Field); // sub-microsecond precision
    }
    let mut micro = 0;
    for k in 0..6 {
        micro = micro * 10 + frac.get(k).map_or(0, |c| i64::from(c - b'0'));
    }
    let day = valid_date(y, mo, d).ok_or(LeafError::Field)?;
    if !(1..=9999).contains(&y) || h > 23 || mi > 59 || sec > 59 {
        return Err(LeafError::Field);
    }
    Ok(Some((wall(day, h, mi, sec), micro, off)))
}

/// `_localize`: the wall time `naive` in `zone`, the earlier instant of an ambiguous time,
/// a nonexistent one refused; (local wall time, offset it is written with).
fn localize(naive: i64, zone: &Zone) -> Result<(i64, i64), LeafError> {
    let utc = in_range(naive - zone.offset_local(naive, false))?;
    let (off, fold) = zone.offset_utc(utc);
    let back = in_range(utc + off)?;
    if back != naive {
        return Err(LeafError::Field); // DST gap
    }
    Ok((back, zone.offset_local(back, fold)))
}

/// `_to_zone`: an instant given with its UTC offset, on the zone's wall clock.
fn to_zone(naive: i64, offset: i64, zone: &Zone) -> Result<(i64, i64), LeafError> {
    let utc = in_range(naive - offset)?;
    let (off, fold) = zone.offset_utc(utc);
    let local = in_range(utc + off)?;
    Ok((local, zone.offset_local(local, fold)))
}

/// `_format_rfc3339`.
fn format_rfc3339(local: i64, micro: i64, off: i64) -> Result<String, LeafError> {
    if off % 60 != 0 {
        return Err(LeafError::Field); // e.g. local mean time before 1901
    }
    let (y, m, d) = civil_from_days(local.div_euclid(86400));
    let secs = local.rem_euclid(86400);
    let mut out = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    );
    if micro != 0 {
        out.push('.');
        out.push_str(format!("{micro:06}").trim_end_matches('0'));
    }
    let minutes = off / 60;
    let sign = if minutes >= 0 { '+' } else { '-' };
    let minutes = minutes.abs();
    out.push_str(&format!("{sign}{:02}:{:02}", minutes / 60, minutes % 60));
    Ok(out)
}

/// `_REL_DT`: a relative date, then a 24-hour or 12-hour time.
fn rel_dt() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(concat!(
            r"^(?:(?P<date>.+?) ?(?:\bat )?(?:",
            r"(?P<h24>[01]?[0-9]|2[0-3]):(?P<m24>[0-5][0-9])(?::(?P<s24>[0-5][0-9]))?",
            r"|(?P<h12>1[0-2]|0?[1-9])(?::(?P<m12>[0-5][0-9]))? ?(?P<ampm>am|pm|a\.m\.|p\.m\.)",
            r"))$"
        ))
        .expect("the _REL_DT pattern")
    })
}

fn datetime_leaf(text: &str, zone: &Zone, ctx: &Ctx) -> Result<String, LeafError> {
    let (local, micro, off) = match parse_dt(text)? {
        Some((naive, micro, None)) => {
            let (l, o) = localize(naive, zone)?;
            (l, micro, o)
        }
        Some((naive, micro, Some(offset))) => {
            let (l, o) = to_zone(naive, offset, zone)?;
            (l, micro, o)
        }
        None => {
            let prepared = collapse(text).to_ascii_lowercase();
            let c = rel_dt().captures(&prepared).ok_or(LeafError::Field)?;
            let day = resolve_date(strip(&c["date"]), ctx)?;
            let num = |name: &str| {
                c.name(name)
                    .map_or(0, |m| m.as_str().parse::<i64>().unwrap_or(0))
            };
            let (h, m, s) = if c.name("h24").is_some() {
                (num("h24"), num("m24"), num("s24"))
            } else {
                let pm = c["ampm"].starts_with('p');
                (num("h12") % 12 + if pm { 12 } else { 0 }, num("m12"), 0)
            };
            let (l, o) = localize(wall(day, h, m, s), zone)?;
            (l, 0, o)
        }
    };
    format_rfc3339(local, micro, off)
}
