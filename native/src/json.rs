//! Strict JSON parse with exactly the refusals of `callgate/arguments/parse.py`, and RFC 8785 bytes
//! exactly as the `rfc8785` Python package writes them.
//!
//! The reference parser is CPython's `json` C scanner with callgate's hooks; this module mirrors
//! its order of checks: size, BOM, UTF-8, the depth pre-scan, then one pass in document order
//! (a duplicate key is seen when its object closes, as `object_pairs_hook` sees it), trailing
//! data, and lone surrogates last.

use std::collections::HashSet;

/// A refusal, named by the code callgate's error constructors use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    TooLarge,
    InvalidJson,
    InvalidUtf8,
    TooDeep,
    DuplicateKey,
    NonFiniteNumber,
    NumberOverflow,
    TrailingData,
    LoneSurrogate,
    NotAnObject,
    NotCanonicalizable,
    SchemaViolation,
    NormalizationFailed,
    /// Every failing location is under a `decimal` normalizer (`decimal_invalid`).
    DecimalInvalid,
    /// Not a refusal: the native core cannot answer exactly; the Python reference decides.
    Defer,
}

impl Refusal {
    pub fn code(self) -> &'static str {
        match self {
            Refusal::TooLarge => "too_large",
            Refusal::InvalidJson => "invalid_json",
            Refusal::InvalidUtf8 => "invalid_utf8",
            Refusal::TooDeep => "too_deep",
            Refusal::DuplicateKey => "duplicate_key",
            Refusal::NonFiniteNumber => "non_finite_number",
            Refusal::NumberOverflow => "number_overflow",
            Refusal::TrailingData => "trailing_data",
            Refusal::LoneSurrogate => "lone_surrogate",
            Refusal::NotAnObject => "not_an_object",
            Refusal::NotCanonicalizable => "not_canonicalizable",
            Refusal::SchemaViolation => "schema_violation",
            Refusal::NormalizationFailed => "normalization_failed",
            Refusal::DecimalInvalid => "decimal_invalid",
            Refusal::Defer => "defer",
        }
    }
}

/// A JSON number as Python holds it after the strict parse.
#[derive(Clone, Debug, PartialEq)]
pub enum Num {
    /// An integer literal that fits i64 (Python `int`).
    Int(i64),
    /// An integer literal beyond i64: kept as its exact decimal text (Python `int`).
    Big(String),
    /// A literal with a fraction or an exponent (Python `float`).
    Float(f64),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Num(Num),
    /// Text; a lone surrogate escape is kept as U+FFFD and flagged on the parse (the document is
    /// then refused, so the replacement never reaches an answer).
    Str(String),
    Array(Vec<Value>),
    /// Members in document order (Python dicts keep insertion order).
    Object(Vec<(String, Value)>),
}

impl Value {
    pub fn get<'a>(&'a self, key: &str) -> Option<&'a Value> {
        match self {
            Value::Object(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

pub struct Limits {
    pub max_bytes: usize,
    pub max_depth: usize,
}

/// CPython's limit on the digits of an int parsed from text (`sys.get_int_max_str_digits()`).
const INT_MAX_STR_DIGITS: usize = 4300;

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The depth pre-scan of parse.py: `[`/`{` outside strings, where a "string" is what the regex
/// `"(?:[^"\\]|\\.)*"` matches (an unterminated one is skipped char by char, as `finditer` does).
fn check_depth(text: &[u8], max_depth: usize) -> Result<(), Refusal> {
    let openers = text.iter().filter(|&&b| b == b'[' || b == b'{').count();
    if openers <= max_depth {
        return Ok(());
    }
    let mut depth = 0usize;
    let mut i = 0usize;
    let n = text.len();
    let mut strings_fail = false; // once a string match fails, every later one fails too
    while i < n {
        let b = text[i];
        if b == b'"' && !strings_fail {
            let mut j = i + 1;
            let mut closed = None;
            while j < n {
                match text[j] {
                    b'\\' => {
                        if j + 1 >= n {
                            break;
                        }
                        j += 2;
                    }
                    b'"' => {
                        closed = Some(j);
                        break;
                    }
                    _ => j += 1,
                }
            }
            match closed {
                Some(end) => {
                    i = end + 1;
                    continue;
                }
                None => {
                    strings_fail = true;
                    i += 1;
                    continue;
                }
            }
        }
        match b {
            b'[' | b'{' => {
                depth += 1;
                if depth > max_depth {
                    return Err(Refusal::TooDeep);
                }
            }
            b']' | b'}' => depth = depth.wrapping_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    lone_surrogate: bool,
}

type PResult<T> = Result<T, Refusal>;

/// Marker used for dictionary keys holding a lone surrogate, so that two different lone
/// surrogates never compare equal: the Python reference compares code points.
fn surrogate_key_char(unit: u32) -> char {
    char::from_u32(0x10_0000 + unit).unwrap_or('\u{FFFD}')
}

impl<'a> Parser<'a> {
    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && is_ws(self.s[self.pos]) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn starts(&self, lit: &[u8]) -> bool {
        self.s[self.pos..].starts_with(lit)
    }

    fn value(&mut self, depth: usize) -> PResult<Value> {
        match self.peek() {
            None => Err(Refusal::InvalidJson),
            Some(b'"') => {
                self.pos += 1;
                Ok(Value::Str(self.string(false)?))
            }
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'n') if self.starts(b"null") => {
                self.pos += 4;
                Ok(Value::Null)
            }
            Some(b't') if self.starts(b"true") => {
                self.pos += 4;
                Ok(Value::Bool(true))
            }
            Some(b'f') if self.starts(b"false") => {
                self.pos += 5;
                Ok(Value::Bool(false))
            }
            Some(b'N') if self.starts(b"NaN") => Err(Refusal::NonFiniteNumber),
            Some(b'I') if self.starts(b"Infinity") => Err(Refusal::NonFiniteNumber),
            Some(b'-') if self.starts(b"-Infinity") => Err(Refusal::NonFiniteNumber),
            Some(b'-') | Some(b'0'..=b'9') => self.number(),
            Some(_) => Err(Refusal::InvalidJson),
        }
    }

    fn number(&mut self) -> PResult<Value> {
        // NUMBER_RE = (-?(?:0|[1-9]\d*))(\.\d+)?([eE][-+]?\d+)?  (ASCII digits, C scanner)
        let s = self.s;
        let start = self.pos;
        let mut i = start;
        if s.get(i) == Some(&b'-') {
            i += 1;
        }
        match s.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while matches!(s.get(i), Some(b'0'..=b'9')) {
                    i += 1;
                }
            }
            _ => return Err(Refusal::InvalidJson),
        }
        let int_end = i;
        let mut is_float = false;
        if s.get(i) == Some(&b'.') && matches!(s.get(i + 1), Some(b'0'..=b'9')) {
            i += 2;
            while matches!(s.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
            is_float = true;
        }
        if matches!(s.get(i), Some(b'e') | Some(b'E')) {
            let mut j = i + 1;
            if matches!(s.get(j), Some(b'+') | Some(b'-')) {
                j += 1;
            }
            if matches!(s.get(j), Some(b'0'..=b'9')) {
                while matches!(s.get(j), Some(b'0'..=b'9')) {
                    j += 1;
                }
                i = j;
                is_float = true;
            }
        }
        self.pos = i;
        // The slice is ASCII by construction.
        let text = std::str::from_utf8(&s[start..i]).map_err(|_| Refusal::InvalidJson)?;
        if is_float {
            let f: f64 = text.parse().map_err(|_| Refusal::InvalidJson)?;
            if f.is_infinite() {
                return Err(Refusal::NumberOverflow);
            }
            if f == 0.0 {
                // underflow: a literal with a non-zero digit in its mantissa read as 0
                let mantissa_end = s[start..i]
                    .iter()
                    .position(|&b| b == b'e' || b == b'E')
                    .map_or(i, |p| start + p);
                if s[start..mantissa_end]
                    .iter()
                    .any(|&b| (b'1'..=b'9').contains(&b))
                {
                    return Err(Refusal::NumberOverflow);
                }
                return Ok(Value::Num(Num::Float(f)));
            }
            if !round_trips(text, f)? {
                // precision loss: the literal would silently read as another number
                return Err(Refusal::NumberOverflow);
            }
            return Ok(Value::Num(Num::Float(f)));
        }
        let digits = int_end - start - usize::from(s[start] == b'-');
        if digits > INT_MAX_STR_DIGITS {
            return Err(Refusal::InvalidJson); // ValueError in int(): "value cannot be represented"
        }
        match text.parse::<i64>() {
            Ok(v) => Ok(Value::Num(Num::Int(v))),
            Err(_) => {
                let t = if text == "-0" { "0" } else { text };
                Ok(Value::Num(Num::Big(t.to_string())))
            }
        }
    }

    fn hex4(&mut self) -> PResult<u32> {
        let s = self.s;
        if self.pos + 4 > s.len() {
            return Err(Refusal::InvalidJson);
        }
        let mut v = 0u32;
        for k in 0..4 {
            let d = (s[self.pos + k] as char)
                .to_digit(16)
                .ok_or(Refusal::InvalidJson)?;
            v = v * 16 + d;
        }
        self.pos += 4;
        Ok(v)
    }

    /// After the opening quote. `key` marks lone surrogates with distinct private characters.
    fn string(&mut self, key: bool) -> PResult<String> {
        let s = self.s;
        let mut out = String::new();
        loop {
            let chunk_start = self.pos;
            while self.pos < s.len()
                && s[self.pos] != b'"'
                && s[self.pos] != b'\\'
                && s[self.pos] >= 0x20
            {
                self.pos += 1;
            }
            // The input is valid UTF-8 and the chunk ends on an ASCII byte.
            out.push_str(
                std::str::from_utf8(&s[chunk_start..self.pos]).map_err(|_| Refusal::InvalidJson)?,
            );
            match s.get(self.pos) {
                None => return Err(Refusal::InvalidJson), // unterminated
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let e = *s.get(self.pos).ok_or(Refusal::InvalidJson)?;
                    self.pos += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let c = self.hex4()?;
                            if (0xD800..=0xDBFF).contains(&c) {
                                // a pair only when the very next escape is a low surrogate
                                if s.get(self.pos) == Some(&b'\\')
                                    && s.get(self.pos + 1) == Some(&b'u')
                                {
                                    let save = self.pos;
                                    self.pos += 2;
                                    let c2 = self.hex4()?;
                                    if (0xDC00..=0xDFFF).contains(&c2) {
                                        let cp = 0x10000 + ((c - 0xD800) << 10) + (c2 - 0xDC00);
                                        out.push(char::from_u32(cp).ok_or(Refusal::InvalidJson)?);
                                        continue;
                                    }
                                    self.pos = save;
                                }
                                self.lone_surrogate = true;
                                out.push(if key {
                                    surrogate_key_char(c)
                                } else {
                                    '\u{FFFD}'
                                });
                            } else if (0xDC00..=0xDFFF).contains(&c) {
                                self.lone_surrogate = true;
                                out.push(if key {
                                    surrogate_key_char(c)
                                } else {
                                    '\u{FFFD}'
                                });
                            } else {
                                out.push(char::from_u32(c).ok_or(Refusal::InvalidJson)?);
                            }
                        }
                        _ => return Err(Refusal::InvalidJson),
                    }
                }
                Some(_) => return Err(Refusal::InvalidJson), // control character
            }
        }
    }

    fn object(&mut self, depth: usize) -> PResult<Value> {
        self.pos += 1; // '{'
        let mut members: Vec<(String, Value)> = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(members));
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(Refusal::InvalidJson);
            }
            self.pos += 1;
            let k = self.string(true)?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(Refusal::InvalidJson);
            }
            self.pos += 1;
            self.skip_ws();
            let v = self.value(depth)?;
            members.push((k, v));
            self.skip_ws();
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws();
                }
                _ => return Err(Refusal::InvalidJson),
            }
        }
        // object_pairs_hook: duplicates are seen when the object closes
        if members.len() > 1 {
            let mut seen: HashSet<&str> = HashSet::with_capacity(members.len());
            for (k, _) in &members {
                if !seen.insert(k.as_str()) {
                    return Err(Refusal::DuplicateKey);
                }
            }
        }
        if self.lone_surrogate {
            // keys were marked for comparison; put the plain replacement back
            for (k, _) in members.iter_mut() {
                if k.chars()
                    .any(|c| ('\u{10D800}'..='\u{10DFFF}').contains(&c))
                {
                    *k = k
                        .chars()
                        .map(|c| {
                            if ('\u{10D800}'..='\u{10DFFF}').contains(&c) {
                                '\u{FFFD}'
                            } else {
                                c
                            }
                        })
                        .collect();
                }
            }
        }
        Ok(Value::Object(members))
    }

    fn array(&mut self, depth: usize) -> PResult<Value> {
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            let v = self.value(depth)?;
            items.push(v);
            self.skip_ws();
            match self.peek() {
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws();
                }
                _ => return Err(Refusal::InvalidJson),
            }
        }
    }
}

/// `parse_json_document`: any top-level value.
pub fn parse_document(raw: &[u8], limits: &Limits) -> Result<Value, Refusal> {
    if raw.len() > limits.max_bytes {
        return Err(Refusal::TooLarge);
    }
    if raw.starts_with(b"\xef\xbb\xbf") {
        return Err(Refusal::InvalidJson);
    }
    if std::str::from_utf8(raw).is_err() {
        return Err(Refusal::InvalidUtf8);
    }
    check_depth(raw, limits.max_depth)?;
    let mut p = Parser {
        s: raw,
        pos: 0,
        lone_surrogate: false,
    };
    p.skip_ws();
    let v = p.value(0)?;
    p.skip_ws();
    if p.pos != raw.len() {
        return Err(Refusal::TrailingData);
    }
    if p.lone_surrogate {
        return Err(Refusal::LoneSurrogate);
    }
    Ok(v)
}

/// `parse_arguments`: the top level must be an object.
pub fn parse_arguments(raw: &[u8], limits: &Limits) -> Result<Value, Refusal> {
    let v = parse_document(raw, limits)?;
    match v {
        Value::Object(_) => Ok(v),
        _ => Err(Refusal::NotAnObject),
    }
}

// ------------------------------------------------------------------------------------------
// RFC 8785

const INT_MAX: i64 = (1 << 53) - 1;

fn write_str(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '\\' => out.extend_from_slice(b"\\\\"),
            '"' => out.extend_from_slice(b"\\\""),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// ECMAScript Number::toString (ECMA-262 7.1.12.1) of a finite double, as `rfc8785` writes it.
pub fn format_float(f: f64) -> String {
    if f == 0.0 {
        return "0".to_string();
    }
    if f < 0.0 {
        return format!("-{}", format_float(-f));
    }
    let (digits, exp) = shortest_digits(f);
    let k = digits.len() as i32;
    let n = exp + 1; // value = 0.digits * 10^n
    if k <= n && n <= 21 {
        let mut s = digits;
        for _ in 0..(n - k) {
            s.push('0');
        }
        s
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{}", "0".repeat((-n) as usize), digits)
    } else {
        let e = n - 1;
        let sign = if e >= 0 { "+" } else { "-" };
        if k == 1 {
            format!("{}e{}{}", digits, sign, e.abs())
        } else {
            format!("{}.{}e{}{}", &digits[..1], &digits[1..], sign, e.abs())
        }
    }
}

/// Whether a float literal (finite, non-zero `f`) is the double it reads as to the precision it
/// was written with, as `_round_trips` in parse.py decides: up to 15 significant digits in the
/// normal range always are; otherwise the literal must have the digits and decimal exponent of
/// `f` rounded to the literal's count of significant digits (C's `%.17g`) or of `f`'s shortest
/// form (Python's `repr`).
/// `Defer` if the exponent does not fit.
fn round_trips(text: &str, f: f64) -> Result<bool, Refusal> {
    let (mantissa, exp) = match text.find(['e', 'E']) {
        Some(p) => (&text[..p], &text[p + 1..]),
        None => (text, "0"),
    };
    let mantissa = mantissa.trim_start_matches('-');
    let (int_part, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all: String = [int_part, frac].concat();
    let lead = all.len() - all.trim_start_matches('0').len();
    let digits = all.trim_matches('0');
    if digits.len() <= 15 && f.abs() >= f64::MIN_POSITIVE {
        return Ok(true);
    }
    let exp: i64 = exp.parse().map_err(|_| Refusal::Defer)?;
    let sci_exp = i64::try_from(int_part.len())
        .map_err(|_| Refusal::Defer)?
        .checked_sub(1 + i64::try_from(lead).map_err(|_| Refusal::Defer)?)
        .and_then(|e| e.checked_add(exp))
        .ok_or(Refusal::Defer)?;
    if digits.len() > MAX_EXACT_DIGITS {
        return Ok(false); // more than any double's exact expansion
    }
    // f rounded to the literal's count of significant digits (Rust's `{:.N e}` is correctly
    // rounded, ties to even, as Python's format is): the literal must be that number
    let rounded = format!("{:.*e}", digits.len() - 1, f.abs());
    let (mant, rexp) = rounded.split_once('e').ok_or(Refusal::Defer)?;
    let rexp: i64 = rexp.parse().map_err(|_| Refusal::Defer)?;
    let rdigits: String = mant.chars().filter(|c| *c != '.').collect();
    if rdigits.trim_end_matches('0') == digits && rexp == sci_exp {
        return Ok(true);
    }
    // or the shortest form (Python's repr: 2^-24 is 5.960464477539063e-08, a tie rounded up)
    let (short, short_exp) = shortest_digits(f.abs());
    Ok(short.trim_end_matches('0') == digits && i64::from(short_exp) == sci_exp)
}

/// A double's exact decimal expansion has at most 767 significant digits.
const MAX_EXACT_DIGITS: usize = 767;

/// The shortest digit string that reads back as `f` (positive, finite) and its decimal exponent
/// (`f` = d.ddd × 10^exp), as ECMA-262 7.1.12.1 picks it: of several shortest strings, the one
/// closest to `f`; of two equally close, the one whose last digit is even (also what Python's
/// `repr`, and so the `rfc8785` reference, writes). Rust's `{:e}` gives a shortest, closest
/// string but rounds an exact tie up (240825066873221.125 -> ...221.13, where ECMAScript writes
/// ...221.12), so a string ending in an odd digit is checked against its even neighbours.
pub(crate) fn shortest_digits(f: f64) -> (String, i32) {
    let sci = format!("{:e}", f);
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let last = digits.as_bytes()[digits.len() - 1] - b'0';
    if digits.len() < 2 || last % 2 == 0 {
        return (digits, exp);
    }
    for up in [false, true] {
        let Some(alt) = last_place_step(&digits, up) else {
            continue;
        };
        if alt.len() != digits.len() || sci_value(&alt, exp) != Some(f) {
            continue; // a different length, or not read back as f: no tie possible
        }
        // Both read back as f and both are shortest: a tie iff f is exactly their midpoint.
        let low = if up { &digits } else { &alt };
        if exactly(f, &format!("{low}5"), exp) {
            return (alt, exp);
        }
    }
    (digits, exp)
}

/// `digits` plus or minus one in the last place; None when the digit count would change.
fn last_place_step(digits: &str, up: bool) -> Option<String> {
    let mut b = digits.as_bytes().to_vec();
    let mut i = b.len();
    loop {
        if i == 0 {
            return None;
        }
        i -= 1;
        if up {
            if b[i] == b'9' {
                b[i] = b'0';
                continue;
            }
            b[i] += 1;
        } else {
            if b[i] == b'0' {
                b[i] = b'9';
                continue;
            }
            b[i] -= 1;
        }
        break;
    }
    if b[0] == b'0' {
        return None;
    }
    String::from_utf8(b).ok()
}

/// The double a digit string d.ddd × 10^exp reads as.
fn sci_value(digits: &str, exp: i32) -> Option<f64> {
    format!("{}.{}e{}", &digits[..1], &digits[1..], exp)
        .parse()
        .ok()
}

/// Whether `f`'s exact decimal value is `digits` × 10^(exp - digits + 1) (d.ddd × 10^exp), i.e.
/// those significant digits followed only by zeros. A double's exact expansion has at most 767
/// significant digits, so 800 are exact.
fn exactly(f: f64, digits: &str, exp: i32) -> bool {
    let full = format!("{:.800e}", f);
    let Some((mant, e)) = full.split_once('e') else {
        return false;
    };
    if e.parse::<i32>() != Ok(exp) {
        return false;
    }
    let all: String = mant.chars().filter(|c| *c != '.').collect();
    all.len() >= digits.len()
        && all.starts_with(digits)
        && all[digits.len()..].bytes().all(|c| c == b'0')
}

fn utf16_key(s: &str) -> Vec<u16> {
    s.encode_utf16().collect()
}

/// RFC 8785 bytes, or `NotCanonicalizable` (ints outside ±(2^53−1), non-finite floats).
pub fn canonicalize(v: &Value, out: &mut Vec<u8>) -> Result<(), Refusal> {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Num(Num::Int(i)) => {
            if *i > INT_MAX || *i < -INT_MAX {
                return Err(Refusal::NotCanonicalizable);
            }
            out.extend_from_slice(i.to_string().as_bytes());
        }
        Value::Num(Num::Big(_)) => return Err(Refusal::NotCanonicalizable),
        Value::Num(Num::Float(f)) => {
            if !f.is_finite() {
                return Err(Refusal::NotCanonicalizable);
            }
            out.extend_from_slice(format_float(*f).as_bytes());
        }
        Value::Str(s) => write_str(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonicalize(item, out)?;
            }
            out.push(b']');
        }
        Value::Object(members) => {
            out.push(b'{');
            let mut keyed: Vec<(Vec<u16>, &String, &Value)> =
                members.iter().map(|(k, v)| (utf16_key(k), k, v)).collect();
            keyed.sort_by(|a, b| a.0.cmp(&b.0));
            for (i, (_, k, v)) in keyed.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(k, out);
                out.push(b':');
                canonicalize(v, out)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}
