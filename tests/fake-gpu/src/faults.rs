//! Fault injection (`HEADROOM_FAKE_FAULTS`): make the Nth call of an entry point (or every
//! call) fail with a chosen error, or block for a while and then proceed.
//!
//! Syntax: comma-separated `API@N=ERROR`, `API@N+=ERROR` (the Nth call and every later one),
//! `API@*=ERROR`, `API@N=hang:DURATION` or
//! `API@N=hang:forever` (the call never returns, as on a wedged GPU), where API is an exported
//! symbol, N counts that symbol's calls in this process from 1, and ERROR is a `CUresult` name
//! for a `cu*` symbol or an `nvmlReturn_t` name for an `nvml*` one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::config::parse_duration;
use crate::errors::{self, CUDA_ERRORS, NVML_ERRORS};
use crate::symbols;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Nth(u64),
    /// The Nth call and every one after it.
    From(u64),
    Every,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Return this code (a `CUresult` or `nvmlReturn_t`).
    Fail(u32),
    /// Block this long, then run the call normally.
    Hang(Duration),
    /// Never return.
    HangForever,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub api: String,
    pub when: When,
    pub action: Action,
}

fn parse_rule(entry: &str) -> Result<Rule, String> {
    let bad = |why: &str| format!("bad entry {entry:?}: {why}");
    let (lhs, rhs) = entry
        .split_once('=')
        .ok_or_else(|| bad("expected API@N=ERROR or API@N=hang:DURATION"))?;
    let (api, n) = lhs
        .split_once('@')
        .ok_or_else(|| bad("expected API@N before '='"))?;
    let (api, n, rhs) = (api.trim(), n.trim(), rhs.trim());
    let cuda = symbols::is_cuda(api);
    if !cuda && !symbols::is_nvml(api) {
        return Err(bad(&format!(
            "{api:?} is not a function this driver exports"
        )));
    }
    let when = if n == "*" {
        When::Every
    } else if let Some(k) = n.strip_suffix('+') {
        match k.parse::<u64>() {
            Ok(k) if k >= 1 => When::From(k),
            _ => return Err(bad("N+ must be a call number from 1, then +")),
        }
    } else {
        match n.parse::<u64>() {
            Ok(k) if k >= 1 => When::Nth(k),
            _ => return Err(bad("N must be a call number from 1, or *")),
        }
    };
    let action = if rhs == "hang:forever" {
        Action::HangForever
    } else if let Some(d) = rhs.strip_prefix("hang:") {
        Action::Hang(parse_duration(d).map_err(|e| bad(&e))?)
    } else {
        let table = if cuda { CUDA_ERRORS } else { NVML_ERRORS };
        let code = errors::by_name(table, rhs).ok_or_else(|| {
            bad(&format!(
                "{rhs:?} is not {} name",
                if cuda {
                    "a CUresult"
                } else {
                    "an nvmlReturn_t"
                }
            ))
        })?;
        Action::Fail(code)
    };
    Ok(Rule {
        api: api.to_string(),
        when,
        action,
    })
}

pub fn parse(spec: &str) -> Result<Vec<Rule>, String> {
    spec.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(parse_rule)
        .collect()
}

/// Calls so far, per entry point.
#[derive(Debug, Default)]
pub struct Counters(Mutex<HashMap<&'static str, u64>>);

impl Counters {
    fn count(&self, api: &'static str) -> u64 {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(api).or_insert(0);
        *n += 1;
        *n
    }
}

/// Counts one call of `api` and applies the rules that match it: hangs first (this thread
/// sleeps), then the first failure, which the caller returns.
pub fn on_call(rules: &[Rule], counters: &Counters, api: &'static str) -> Option<u32> {
    if rules.is_empty() {
        return None;
    }
    let n = counters.count(api);
    let mut fail = None;
    for r in rules.iter().filter(|r| r.api == api) {
        let hit = match r.when {
            When::Every => true,
            When::Nth(k) => k == n,
            When::From(k) => n >= k,
        };
        if !hit {
            continue;
        }
        match r.action {
            Action::Hang(d) => std::thread::sleep(d),
            Action::HangForever => loop {
                std::thread::park();
            },
            Action::Fail(code) => {
                fail.get_or_insert(code);
            }
        }
    }
    fail
}
