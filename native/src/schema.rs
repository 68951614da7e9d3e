//! JSON Schema 2020-12 yes/no through the `jsonschema` crate, with `pattern` on the `regress`
//! engine (ECMA-262, Unicode mode, as `RegExp(source, "u").test(text)`).
//!
//! Only schemas that the Python side found in the native subset come here (the fast check's
//! subset without `patternProperties`: see callgate/propose/core.py); a `format` other than
//! `date`, `date-time` or `time` fails the build of the validator, so the tool stays on Python.
//! The parity suite proves the answers equal to python-jsonschema's on the official test suite.

use crate::json::{Num, Refusal, Value};
use jsonschema::paths::Location;
use jsonschema::{Draft, Keyword, ValidationError, Validator};
use serde_json::{Map, Value as J};

pub struct Schema {
    validator: Validator,
}

struct Pattern {
    re: regress::Regex,
}

impl<'i> Keyword<'i> for Pattern {
    fn validate(&self, instance: &'i J) -> Result<(), ValidationError<'i>> {
        if self.is_valid(instance) {
            Ok(())
        } else {
            Err(ValidationError::custom("does not match the pattern"))
        }
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
    let re = regress::Regex::with_flags(source, "u")
        .map_err(|_| ValidationError::custom("pattern is not an ECMA-262 regular expression"))?;
    Ok(Box::new(Pattern { re }))
}

/// `format`, asserted, for the formats whose checker is ported exactly from
/// callgate/propose/validate/formats.py; any other format keeps the tool on the Python stages.
#[derive(Clone, Copy)]
enum Format {
    Date,
    DateTime,
    Time,
}

struct FormatKw {
    format: Format,
}

impl<'i> Keyword<'i> for FormatKw {
    fn validate(&self, instance: &'i J) -> Result<(), ValidationError<'i>> {
        if self.is_valid(instance) {
            Ok(())
        } else {
            Err(ValidationError::custom("does not match the format"))
        }
    }

    fn is_valid(&self, instance: &'i J) -> bool {
        let J::String(s) = instance else { return true };
        match self.format {
            Format::Date => is_date(s.as_bytes()),
            Format::DateTime => is_date_time(s.as_bytes()),
            Format::Time => is_time(s.as_bytes()),
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
        _ => {
            return Err(ValidationError::custom(
                "format not supported by the native core",
            ))
        }
    };
    Ok(Box::new(FormatKw { format }))
}

fn num(b: &[u8]) -> Option<i64> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0i64, |a, d| a * 10 + i64::from(d - b'0')))
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
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
        let validator = jsonschema::options()
            .with_draft(Draft::Draft202012)
            .should_validate_formats(false)
            .with_keyword("pattern", pattern_factory)
            .with_keyword("format", format_factory)
            .build(&doc)
            .map_err(|e| format!("schema refused by the native validator: {e}"))?;
        Ok(Schema { validator })
    }

    /// Valid or not; `Defer` when the value has a number the crate cannot hold exactly.
    pub fn is_valid(&self, v: &Value) -> Result<bool, Refusal> {
        let j = to_serde(v)?;
        Ok(self.validator.is_valid(&j))
    }

    /// [`Self::is_valid`] on a value already in the crate's form ([`to_serde`]), so one
    /// conversion serves both schemas when the normalizers cannot have changed the value.
    pub fn is_valid_serde(&self, j: &J) -> bool {
        self.validator.is_valid(j)
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
