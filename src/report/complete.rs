//! Whether a result folder holds a finished run. A run killed by SIGKILL, a full disk or a
//! node that died leaves a folder that looks like a run: `summary.json` still says `running`
//! (or is missing, or cut short) and the CSVs end mid-row. `merge` and `compare` must not take
//! such a folder for a result.
//!
//! Only the ends of the CSVs are read (the header and the last 64 KiB), so checking a fleet
//! of long runs stays cheap.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::report::rundata::ORIGINAL_FILES;

/// How much of a CSV's end is read to find its last row.
const TAIL_BYTES: u64 = 64 << 10;

/// Why `dir` is not a finished run, one reason per problem; empty when it is one.
pub fn incomplete_reasons(dir: &Path) -> Vec<String> {
    let mut reasons = Vec::new();
    for f in ORIGINAL_FILES {
        let path = dir.join(f);
        if std::fs::symlink_metadata(&path).is_err() {
            reasons.push(format!("{f} is missing"));
        } else if !path.is_file() {
            reasons.push(format!("{f}{} is not a file", link_note(&path)));
        }
    }
    if dir.join("summary.json").is_file() {
        reasons.extend(summary_reason(&dir.join("summary.json")));
    }
    for f in ["timeline.csv", "events.csv"] {
        let path = dir.join(f);
        if path.is_file() {
            reasons.extend(csv_reason(&path).map(|r| format!("{f} {r}")));
        }
    }
    reasons
}

/// The reasons as one line: "summary.json still says \"running\"; timeline.csv ends mid-row".
pub fn describe(reasons: &[String]) -> String {
    reasons.join("; ")
}

/// " (a link to TARGET)" when `path` is a symbolic link, else nothing.
fn link_note(path: &Path) -> String {
    std::fs::read_link(path)
        .map(|t| format!(" (a link to {})", t.display()))
        .unwrap_or_default()
}

/// The most of a `summary.json` read (a summary is a few hundred KiB at most); a file past it
/// is not one headroom wrote.
pub const SUMMARY_MAX_BYTES: u64 = 64 << 20;

fn summary_reason(path: &Path) -> Option<String> {
    // A link is followed, and said: what it names may be no summary at all.
    let link = link_note(path);
    match std::fs::metadata(path) {
        Ok(m) if m.len() > SUMMARY_MAX_BYTES => {
            return Some(format!(
                "summary.json{link} is {} bytes, more than any summary (at most {SUMMARY_MAX_BYTES})",
                m.len()
            ));
        }
        _ => {}
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return Some(format!("summary.json{link} cannot be read: {e}")),
    };
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        // Only a document that ends early is one cut short; anything else is not JSON.
        Err(e) if e.is_eof() => {
            return Some(format!("summary.json{link} is not whole JSON (cut short?)"));
        }
        Err(e) => return Some(format!("summary.json{link} is not JSON ({e})")),
    };
    match value.get("status").and_then(|s| s.as_str()) {
        Some("running") => Some(
            "summary.json still says \"running\": the run never finished (killed, or its disk \
             filled)"
                .into(),
        ),
        _ => None,
    }
}

/// Whether a CSV ends with a whole row: a final newline, and as many fields as its header.
fn csv_reason(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    if len == 0 {
        return Some("is empty".into());
    }
    let mut head = vec![0u8; len.min(TAIL_BYTES) as usize];
    f.read_exact(&mut head).ok()?;
    let header = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let start = len.saturating_sub(TAIL_BYTES);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).ok()?;
    if tail.last() != Some(&b'\n') {
        return Some("ends mid-row (no newline after its last line)".into());
    }
    let body = &tail[..tail.len() - 1];
    let last = body.rsplit(|b| *b == b'\n').next().unwrap_or_default();
    let (want, got) = (fields(header)?, fields(last)?);
    (got != want).then(|| format!("ends mid-row (its last row has {got} of {want} fields)"))
}

/// The number of fields of one CSV line (quotes respected); `None` if it does not parse.
fn fields(line: &[u8]) -> Option<usize> {
    let mut r = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(line);
    let mut rec = csv::ByteRecord::new();
    match r.read_byte_record(&mut rec) {
        Ok(true) => Some(rec.len()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(summary: &str, timeline: &str, events: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("summary.json"), summary).unwrap();
        std::fs::write(d.path().join("timeline.csv"), timeline).unwrap();
        std::fs::write(d.path().join("events.csv"), events).unwrap();
        d
    }

    const TL: &str = "t_ns,phase,source\n1,p,idle\n2,p,event\n";
    const EV: &str = "t_ns,op,detail\n1,allocate,\"a, b\"\n";

    #[test]
    fn a_linked_summary_is_followed_and_only_an_early_end_is_cut_short() {
        let d = folder(r#"{"status": "completed"}"#, TL, EV);
        let real = d.path().join("real.json");
        std::fs::rename(d.path().join("summary.json"), &real).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("summary.json")).unwrap();
        assert!(incomplete_reasons(d.path()).is_empty());
        // A link to a file that is no JSON at all, and to something that is not a file.
        std::fs::write(&real, "#!/bin/sh\n").unwrap();
        let r = incomplete_reasons(d.path());
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(
            r[0].starts_with(&format!(
                "summary.json (a link to {}) is not JSON (",
                real.display()
            )),
            "{r:?}"
        );
        std::fs::remove_file(d.path().join("summary.json")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", d.path().join("summary.json")).unwrap();
        assert_eq!(
            incomplete_reasons(d.path()),
            vec!["summary.json (a link to /dev/zero) is not a file".to_string()]
        );
        // Written to its middle: cut short.
        std::fs::remove_file(d.path().join("summary.json")).unwrap();
        std::fs::write(d.path().join("summary.json"), r#"{"status": "compl"#).unwrap();
        assert_eq!(
            incomplete_reasons(d.path()),
            vec!["summary.json is not whole JSON (cut short?)".to_string()]
        );
    }

    #[test]
    fn a_finished_folder_has_no_reason() {
        let d = folder(r#"{"status": "completed"}"#, TL, EV);
        assert!(incomplete_reasons(d.path()).is_empty());
    }

    #[test]
    fn a_killed_run_is_named_for_each_sign() {
        let d = folder(
            r#"{"status": "running"}"#,
            "t_ns,phase,source\n1,p,idle\n2,p",
            "t_ns,op,detail\n1,allocate\n",
        );
        let r = incomplete_reasons(d.path());
        assert_eq!(r.len(), 3, "{r:?}");
        assert!(r[0].contains("still says \"running\""), "{r:?}");
        assert!(
            r[1].starts_with("timeline.csv ends mid-row (no newline"),
            "{r:?}"
        );
        assert_eq!(
            r[2],
            "events.csv ends mid-row (its last row has 2 of 3 fields)"
        );
        std::fs::write(d.path().join("summary.json"), "{\"status\": \"compl").unwrap();
        assert!(incomplete_reasons(d.path())[0].contains("not whole JSON"));
        std::fs::remove_file(d.path().join("summary.json")).unwrap();
        assert_eq!(incomplete_reasons(d.path())[0], "summary.json is missing");
        assert!(describe(&incomplete_reasons(d.path())).contains("; timeline.csv"));
    }
}
