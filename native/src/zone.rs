//! The zone rules of one IANA time zone, answered exactly as CPython's `zoneinfo` answers them
//! (`Lib/zoneinfo/_zoneinfo.py`: `_find_trans`, `fromutc`, `_ts_to_local`, `_TZStr`,
//! `_DayOffset`, `_CalendarOffset`), from the data `zoneinfo` itself reads: the TZif file of the
//! `tzdata` package, parsed on the Python side by `zoneinfo._common.load_data` and
//! `zoneinfo._zoneinfo._parse_tz_str` (callgate/propose/core.py, `native_zone`). Times are
//! seconds since 1970-01-01 of a wall clock (local or UTC); offsets are seconds.

use crate::normalize::{days_from_civil, days_in_month, leap, weekday};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// A rule's transition day in a year (`_DayOffset`, `_CalendarOffset`), with its wall time.
#[derive(Clone, Copy, Debug)]
enum RuleDay {
    /// `Jn` (julian: February 29 never counted) or `n`.
    Day { d: i64, julian: bool, secs: i64 },
    /// `Mm.w.d`: the `w`-th (5: last) weekday `d` (0: Sunday) of month `m`.
    Month { m: i64, w: i64, d: i64, secs: i64 },
}

/// `_post_epoch_days_before_year`: days from 1970-01-01 to January 1 of `year`, minus one.
fn days_before_year(year: i64) -> i64 {
    days_from_civil(year, 1, 1) - 1
}

const DAYS_BEFORE_MONTH: [i64; 13] = [-1, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];

impl RuleDay {
    /// `year_to_epoch`: the transition's wall time in `year`.
    fn year_to_epoch(self, year: i64) -> i64 {
        match self {
            RuleDay::Day { d, julian, secs } => {
                let d = if julian && d >= 59 && leap(year) {
                    d + 1
                } else {
                    d
                };
                (days_before_year(year) + d) * 86400 + secs
            }
            RuleDay::Month { m, w, d, secs } => {
                // calendar.monthrange: first weekday (0 = Monday) and the month's length
                let first_day = weekday(days_from_civil(year, m, 1));
                let dim = days_in_month(year, m);
                let mut month_day = (d - (first_day + 1)).rem_euclid(7) + 1;
                month_day += (w - 1) * 7;
                if month_day > dim {
                    month_day -= 7;
                }
                let ordinal = days_before_year(year)
                    + DAYS_BEFORE_MONTH[m as usize]
                    + i64::from(m > 2 && leap(year))
                    + month_day;
                ordinal * 86400 + secs
            }
        }
    }
}

/// `_TZStr`: standard and DST offsets and the yearly transitions.
#[derive(Clone, Copy, Debug)]
struct Rule {
    std: i64,
    dst: i64,
    dst_diff: i64,
    start: RuleDay,
    end: RuleDay,
}

impl Rule {
    fn transitions(&self, year: i64) -> (i64, i64) {
        (self.start.year_to_epoch(year), self.end.year_to_epoch(year))
    }

    /// `_get_trans_info`: the offset of a local wall time.
    fn local(&self, ts: i64, year: i64, fold: bool) -> i64 {
        let (mut start, mut end) = self.transitions(year);
        if fold == (self.dst_diff >= 0) {
            end -= self.dst_diff;
        } else {
            start += self.dst_diff;
        }
        let isdst = if start < end {
            start <= ts && ts < end
        } else {
            !(end <= ts && ts < start)
        };
        if isdst {
            self.dst
        } else {
            self.std
        }
    }

    /// `_get_trans_info_fromutc`: the offset at a UTC instant, and whether its local time is
    /// the second of two equal wall times (fold).
    fn from_utc(&self, ts: i64, year: i64) -> (i64, bool) {
        let (mut start, mut end) = self.transitions(year);
        start -= self.std;
        end -= self.dst;
        let isdst = if start < end {
            start <= ts && ts < end
        } else {
            !(end <= ts && ts < start)
        };
        let (ambig_start, ambig_end) = if self.dst_diff > 0 {
            (end, end + self.dst_diff)
        } else {
            (start, start - self.dst_diff)
        };
        let fold = ambig_start <= ts && ts < ambig_end;
        (if isdst { self.dst } else { self.std }, fold)
    }
}

#[derive(Clone, Copy, Debug)]
enum After {
    Fixed(i64),
    Rule(Rule),
}

/// One zone's rules (`zoneinfo.ZoneInfo` for the offsets only).
#[pyclass(module = "callgate._native", frozen)]
pub struct Zone {
    trans_utc: Vec<i64>,
    /// `_trans_local[0]` and `[1]`: the transitions on the wall clock, for fold 0 and 1.
    trans_local: [Vec<i64>; 2],
    /// The offset after each transition (`_ttinfos`).
    offsets: Vec<i64>,
    before: i64,
    after: After,
}

fn rule_day(t: (String, i64, i64, i64, i64, i64, i64, i64)) -> PyResult<RuleDay> {
    let (kind, a, b, c, h, mi, s, julian) = t;
    let secs = h * 3600 + mi * 60 + s;
    match kind.as_str() {
        "M" if (1..=12).contains(&a) && (1..=5).contains(&b) && (0..=6).contains(&c) => {
            Ok(RuleDay::Month {
                m: a,
                w: b,
                d: c,
                secs,
            })
        }
        "D" => Ok(RuleDay::Day {
            d: a,
            julian: julian != 0,
            secs,
        }),
        _ => Err(PyValueError::new_err("bad rule day")),
    }
}

/// Seconds of a wall time: (days since 1970-01-01) * 86400 + time of day.
pub fn wall(days: i64, h: i64, m: i64, s: i64) -> i64 {
    days * 86400 + h * 3600 + m * 60 + s
}

/// The civil year of a wall time.
pub fn year_of(ts: i64) -> i64 {
    crate::normalize::civil_from_days(ts.div_euclid(86400)).0
}

/// `bisect.bisect_right`.
fn bisect_right(v: &[i64], x: i64) -> usize {
    v.partition_point(|&e| e <= x)
}

#[pymethods]
impl Zone {
    /// From `zoneinfo._common.load_data`'s transitions, indices, offsets and DST flags, and the
    /// footer as `_parse_tz_str` read it: `None` (no footer), `("fixed", offset)` or
    /// `("rule", std, dst, start, end)`, a day being `(kind, a, b, c, hour, minute, second,
    /// julian)` with kind `M` (m, w, d) or `D` (d).
    #[new]
    #[allow(clippy::type_complexity)]
    fn new(
        trans_utc: Vec<i64>,
        trans_idx: Vec<usize>,
        utcoff: Vec<i64>,
        isdst: Vec<bool>,
        after: Option<(
            String,
            i64,
            i64,
            Option<(String, i64, i64, i64, i64, i64, i64, i64)>,
            Option<(String, i64, i64, i64, i64, i64, i64, i64)>,
        )>,
    ) -> PyResult<Self> {
        if trans_idx.len() != trans_utc.len() || trans_idx.iter().any(|&i| i >= utcoff.len()) {
            return Err(PyValueError::new_err("inconsistent zone data"));
        }
        let offsets: Vec<i64> = trans_idx.iter().map(|&i| utcoff[i]).collect();
        // _ts_to_local
        let mut local = [trans_utc.clone(), trans_utc.clone()];
        if !trans_utc.is_empty() {
            let (mut o0, mut o1) = if utcoff.len() > 1 {
                (utcoff[0], utcoff[trans_idx[0]])
            } else {
                (utcoff[0], utcoff[0])
            };
            if o1 > o0 {
                std::mem::swap(&mut o0, &mut o1);
            }
            local[0][0] += o0;
            local[1][0] += o1;
            for i in 1..trans_idx.len() {
                let (mut o0, mut o1) = (utcoff[trans_idx[i - 1]], utcoff[trans_idx[i]]);
                if o1 > o0 {
                    std::mem::swap(&mut o0, &mut o1);
                }
                local[0][i] += o0;
                local[1][i] += o1;
            }
        }
        let before = match isdst.iter().position(|d| !d) {
            Some(i) => utcoff[i],
            None => *offsets
                .first()
                .ok_or_else(|| PyValueError::new_err("no offset before the first transition"))?,
        };
        let after = match after {
            None => After::Fixed(
                *offsets
                    .last()
                    .or(utcoff.last())
                    .ok_or_else(|| PyValueError::new_err("no time zone information"))?,
            ),
            Some((kind, std, _, _, _)) if kind == "fixed" => After::Fixed(std),
            Some((kind, std, dst, Some(start), Some(end))) if kind == "rule" => After::Rule(Rule {
                std,
                dst,
                dst_diff: dst - std,
                start: rule_day(start)?,
                end: rule_day(end)?,
            }),
            _ => return Err(PyValueError::new_err("bad zone footer")),
        };
        Ok(Zone {
            trans_utc,
            trans_local: local,
            offsets,
            before,
            after,
        })
    }

    /// Parity tests: the offset of a local wall time with `fold` (`utcoffset`).
    fn utcoffset(&self, ts: i64, fold: bool) -> i64 {
        self.offset_local(ts, fold)
    }

    /// Parity tests: `fromutc` of a UTC wall time, as (local wall time, fold).
    fn fromutc(&self, ts: i64) -> (i64, bool) {
        let (off, fold) = self.offset_utc(ts);
        (ts + off, fold)
    }
}

impl Zone {
    /// `_find_trans(dt).utcoff` for the local wall time `ts` (year from `ts`).
    pub fn offset_local(&self, ts: i64, fold: bool) -> i64 {
        let lt = &self.trans_local[usize::from(fold)];
        if !lt.is_empty() && ts < lt[0] {
            return self.before;
        }
        if lt.is_empty() || ts > lt[lt.len() - 1] {
            return match self.after {
                After::Rule(r) => r.local(ts, year_of(ts), fold),
                After::Fixed(o) => o,
            };
        }
        self.offsets[bisect_right(lt, ts) - 1]
    }

    /// `fromutc`: the offset at the UTC wall time `ts` and the fold of the local time, as the C
    /// implementation `zoneinfo` runs (`zoneinfo_fromutc` in `Modules/_zoneinfo.c`): after the
    /// last transition the footer answers, and the fold right after that transition is the one
    /// between the offset before it and the footer's.
    pub fn offset_utc(&self, ts: i64) -> (i64, bool) {
        let t = &self.trans_utc;
        let n = t.len();
        if n >= 1 && ts < t[0] {
            return (self.before, false);
        }
        if n == 0 || ts > t[n - 1] {
            let (off, mut fold) = match self.after {
                After::Rule(r) => r.from_utc(ts, year_of(ts)),
                After::Fixed(o) => (o, false),
            };
            if n > 0 {
                let prev = if n == 1 {
                    self.before
                } else {
                    self.offsets[n - 2]
                };
                let diff = prev - off;
                if diff > 0 && ts < t[n - 1] + diff {
                    fold = true;
                }
            }
            return (off, fold);
        }
        let idx = bisect_right(t, ts);
        let (prev, cur) = if idx >= 2 {
            (self.offsets[idx - 2], self.offsets[idx - 1])
        } else {
            (self.before, self.offsets[0])
        };
        (cur, prev - cur > ts - t[idx - 1])
    }
}
