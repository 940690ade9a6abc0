//! Step ids, as `events.csv`, `summary.json` and every report name a step: `s3` for the third
//! step of a phase, `s3.12` for the twelfth action it expanded to. The leading letter keeps every
//! CSV reader (pandas, polars, spreadsheets) from taking an id for a number, which would make
//! `3.1` and `3.10` the same step.

/// The id of the `pos`-th written step of a phase (1-based).
pub fn of_step(pos: usize) -> String {
    format!("s{pos}")
}

/// The id of the `n`-th action (1-based) a step expanded to.
pub fn of_action(step: &str, n: usize) -> String {
    let mut buf = [0; 20];
    let digits = crate::record::timeline::decimal(n as u64, &mut buf);
    let mut id = String::with_capacity(step.len() + digits.len() + 1);
    id.push_str(step);
    id.push('.');
    id.push_str(digits);
    id
}

/// An `[expect] oom = "phase/step"` target in today's spelling: the older `decode/3` and
/// `decode/3.12` are read as `decode/s3` and `decode/s3.12`.
pub fn canonical_at(at: &str) -> String {
    match at.rsplit_once('/') {
        Some((phase, step)) if step.starts_with(|c: char| c.is_ascii_digit()) => {
            format!("{phase}/s{step}")
        }
        _ => at.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_never_numbers_and_old_targets_still_match() {
        assert_eq!(of_step(3), "s3");
        assert_eq!(of_action("s3", 12), "s3.12");
        assert_ne!(of_action("s1", 1), of_action("s1", 10));
        assert_eq!(canonical_at("decode/3"), "decode/s3");
        assert_eq!(canonical_at("decode/3.12"), "decode/s3.12");
        assert_eq!(canonical_at("decode/s3"), "decode/s3");
        assert_eq!(canonical_at("a/b/4"), "a/b/s4");
    }
}
