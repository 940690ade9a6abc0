//! Repeated messages as one: a log that prints the same out-of-memory message thousands of
//! times (a retry loop, every rank of a job, every step of a sweep) gets one explanation per
//! distinct message, with how often and between which lines it was printed, so the output is
//! bounded by the distinct messages and not by their repetitions.

use std::collections::HashMap;

use serde::Serialize;

use crate::oom_message::{Detail, OomMessage, Unrecognized};

/// A message printed more than once: the explanation it shares, how often, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Repeat {
    /// 1-based index of the explanation in `explanations`.
    pub message: usize,
    /// Times the message was printed, the first included.
    pub count: u64,
    /// 1-based line of its first print (the explanation's `line`).
    pub first_line: usize,
    /// 1-based line of its last print.
    pub last_line: usize,
}

/// What makes two messages the same: their format, the exception they were raised as, their
/// words and every figure they carry. Where each sits (its line, the offset of TensorFlow's
/// statistics) is not part of it, nor how its text was wrapped or indented.
pub fn key(m: &OomMessage) -> String {
    let mut detail = m.detail.clone();
    if let Detail::TfBfcAllocator {
        stats: Some(stats), ..
    } = &mut detail
    {
        stats.line = 0;
    }
    let figures = serde_json::to_string(&detail).unwrap_or_default();
    let words: Vec<&str> = m.text.split_whitespace().collect();
    format!(
        "{}\u{0}{}\u{0}{}",
        m.raised_as.as_deref().unwrap_or(""),
        words.join(" "),
        figures
    )
}

/// Sorts what arrives (messages by `key`, unrecognized lines by their text) into distinct
/// ones and repeats.
#[derive(Debug, Default)]
pub struct Groups {
    /// Per distinct key: the index of its group.
    index: HashMap<String, usize>,
    /// Per distinct key, in order of first appearance.
    groups: Vec<Repeat>,
}

impl Groups {
    pub fn new() -> Groups {
        Groups::default()
    }

    /// How many distinct keys have been seen.
    pub fn distinct(&self) -> usize {
        self.groups.len()
    }

    /// Counts `key` seen at `line`; true when it is the first of its kind.
    pub fn see(&mut self, key: String, line: usize) -> bool {
        let next = self.groups.len();
        let at = *self.index.entry(key).or_insert(next);
        if at == next {
            self.groups.push(Repeat {
                message: next + 1,
                count: 1,
                first_line: line,
                last_line: line,
            });
            return true;
        }
        let g = &mut self.groups[at];
        g.count += 1;
        g.last_line = g.last_line.max(line);
        false
    }

    /// Whether `key` has been seen.
    pub fn knows(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// Counts a message; true when it is the first of its kind (to be explained).
    pub fn see_message(&mut self, m: &OomMessage) -> bool {
        self.see(key(m), m.span.line)
    }

    /// Counts an unrecognized line; true when its text is new (to be listed).
    pub fn see_line(&mut self, u: &Unrecognized) -> bool {
        self.see(u.text.clone(), u.line)
    }

    /// The keys seen more than once, in order of first appearance.
    pub fn repeats(&self) -> Vec<Repeat> {
        self.groups
            .iter()
            .filter(|g| g.count > 1)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oom_message::find_all;

    #[test]
    fn the_same_figures_group_and_other_figures_do_not() {
        let text = "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB\n\
                    step 2\n\
                    [rank1] RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB\n\
                    RuntimeError: CUDA out of memory. Tried to allocate 40.00 MiB\n\
                    RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB\n";
        let mut g = Groups::new();
        let firsts: Vec<bool> = find_all(text).iter().map(|m| g.see_message(m)).collect();
        assert_eq!(firsts, [true, false, true, false]);
        assert_eq!(
            g.repeats(),
            [Repeat {
                message: 1,
                count: 3,
                first_line: 1,
                last_line: 5
            }]
        );
    }
}
