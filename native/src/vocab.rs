//! One locale's relative-date words (`DateVocabulary` of callgate/arguments/normalize.py: German,
//! French, Spanish), from the reference's own tables (`native_vocab` in
//! callgate/propose/core.py), read as `DateVocabulary.days` reads them. The text is prepared
//! (NFKC, trimmed, whitespace collapsed, case folded) and ASCII: other text defers before it
//! gets here, so the words with accents only ever match in the reference.

use std::collections::{HashMap, HashSet};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::normalize::{weekday, weekday_delta};

#[pyclass(module = "callgate._native", frozen)]
pub struct Vocab {
    fixed: HashMap<String, i64>,
    /// `(pattern, sign)`: a full match with groups `n` and `unit`.
    counts: Vec<(regex::Regex, i64)>,
    units: HashMap<String, i64>,
    weekdays: HashMap<String, i64>,
    articles: HashSet<String>,
    prefixes: HashMap<String, String>,
    suffixes: HashMap<String, String>,
}

#[pymethods]
impl Vocab {
    /// The table's parts as the reference holds them; `counts` as (Python pattern, sign).
    #[new]
    fn new(
        fixed: HashMap<String, i64>,
        counts: Vec<(String, i64)>,
        units: HashMap<String, i64>,
        weekdays: HashMap<String, i64>,
        articles: HashSet<String>,
        prefixes: HashMap<String, String>,
        suffixes: HashMap<String, String>,
    ) -> PyResult<Self> {
        let counts = counts
            .into_iter()
            .map(|(p, sign)| {
                regex::Regex::new(&format!("^(?:{p})$"))
                    .map(|re| (re, sign))
                    .map_err(|e| PyValueError::new_err(format!("count pattern {p:?}: {e}")))
            })
            .collect::<PyResult<_>>()?;
        Ok(Vocab {
            fixed,
            counts,
            units,
            weekdays,
            articles,
            prefixes,
            suffixes,
        })
    }
}

impl Vocab {
    /// `DateVocabulary.days`: the day offset from `today` (days since 1970-01-01), or None.
    pub fn days(&self, text: &str, today: i64) -> Option<i64> {
        if let Some(d) = self.fixed.get(text) {
            return Some(*d);
        }
        for (re, sign) in &self.counts {
            if let Some(c) = re.captures(text) {
                if let Some(unit) = self.units.get(&c["unit"]) {
                    return Some(sign * c["n"].parse::<i64>().ok()? * unit);
                }
            }
        }
        let mut words: Vec<&str> = text.split(' ').collect();
        if words.len() > 1 && self.articles.contains(words[0]) {
            words.remove(0);
        }
        let mut rule = "next";
        if words.len() > 1 {
            if let Some(r) = self.prefixes.get(words[0]) {
                rule = r;
                words.remove(0);
            }
        }
        if words.len() > 1 {
            let suffix = words[1..].join(" ");
            match self.suffixes.get(&suffix) {
                Some(r) if rule == "next" => {
                    rule = r;
                    words.truncate(1);
                }
                _ => return None,
            }
        }
        let name = words[0].strip_suffix('.').unwrap_or(words[0]);
        let target = self.weekdays.get(name)?;
        Some(weekday_delta(weekday(today), *target, rule))
    }
}
