//! An out-of-memory message from the job's stderr turned into evidence: read and diagnosed by
//! `explain` (the same vocabulary as a run's OOM), next to headroom's own readings at the
//! instant its first line arrived, and the message's figures checked against them.

use crate::explain::{CheckKind, Explanation};
use crate::oom_message::{Detail, Quantity};
use crate::report::watch::{NextCheck, ViewsAt, WatchOom};
use crate::units::{Bytes, Nanos};
use crate::watch::stderr::StderrOom;

/// Where and when a message arrived, and what headroom read then.
pub struct Context<'a> {
    pub utc: String,
    pub phase: Option<String>,
    pub at: ViewsAt,
    /// The watched device's CUDA-visible total.
    pub device_total_bytes: u64,
    /// The explanations of the messages before this one (a later message may lean on them).
    pub earlier: &'a [Explanation],
}

/// The record of one message, and its explanation (kept for the messages after it).
pub fn record(oom: StderrOom, cx: Context<'_>) -> (WatchOom, Explanation) {
    let t_ns = oom.t_ns;
    let e = crate::explain::explain(oom.message, cx.earlier);
    let measured = measured(&e.message.detail, &cx.at, t_ns, cx.device_total_bytes);
    let record = WatchOom {
        t_ns,
        utc: cx.utc,
        phase: cx.phase,
        stderr_line: e.message.span.line,
        format: e.message.format().name().to_string(),
        raised_as: e.message.raised_as.clone(),
        text: e.message.text.clone(),
        at: cx.at,
        cause: e.cause,
        secondary_causes: e.secondary_causes.clone(),
        summary: e.summary.clone(),
        ruled_out: e.ruled_out.clone(),
        undecided: e
            .undecided
            .iter()
            .map(|u| {
                format!(
                    "{} ({}): {}",
                    u.question,
                    crate::cause::join(&u.candidates, " or "),
                    u.why
                )
            })
            .collect(),
        findings: e.findings.clone(),
        measured,
        next_checks: e
            .next_checks
            .iter()
            .map(|c| NextCheck {
                kind: match c.kind {
                    CheckKind::Shell => "shell",
                    CheckKind::Python => "python",
                }
                .to_string(),
                command: c.command.clone(),
                why: c.why.clone(),
            })
            .collect(),
        explanation: serde_json::to_value(&e).unwrap_or_default(),
    };
    (record, e)
}

/// The message's whole-device figures, where its format prints them.
fn device_figures(d: &Detail) -> (Option<&Quantity>, Option<&Quantity>, Option<&Quantity>) {
    match d {
        Detail::PytorchCaching {
            device_total,
            device_free,
            this_process,
            ..
        } => (
            device_total.as_ref(),
            device_free.as_ref(),
            this_process.as_ref(),
        ),
        Detail::PytorchCachingLegacy {
            device_total,
            device_free,
            ..
        } => (device_total.as_ref(), device_free.as_ref(), None),
        Detail::PytorchCudaMallocAsync {
            device_total,
            device_free,
            ..
        } => (device_total.as_ref(), device_free.as_ref(), None),
        Detail::VllmStartupFreeMemory {
            device_total,
            device_free,
            ..
        } => (Some(device_total), Some(device_free), None),
        _ => (None, None, None),
    }
}

fn compare(what: &str, q: &Quantity, measured: u64, how: &str) -> String {
    let (lo, hi) = (q.bytes.low, q.bytes.high);
    let verdict = if (lo..=hi).contains(&measured) {
        "agrees within the printed precision".to_string()
    } else {
        let off = if measured < lo {
            measured as i128 - lo as i128
        } else {
            measured as i128 - hi as i128
        };
        format!("{} off", crate::units::SignedBytes(off))
    };
    format!(
        "{what}: the message says {} ({lo}–{hi} B); headroom read {measured} B ({}), {how}: {verdict}",
        q.printed,
        Bytes(measured)
    )
}

/// Sentences that set the message's figures beside headroom's readings.
fn measured(d: &Detail, at: &ViewsAt, t_ns: u64, device_total: u64) -> Vec<String> {
    let (total, free, this_process) = device_figures(d);
    let mut out = Vec::new();
    if let Some(q) = total {
        let line = compare(
            "device total",
            q,
            device_total,
            "the watched device's CUDA-visible total",
        );
        if !(q.bytes.low..=q.bytes.high).contains(&device_total) {
            out.push(format!(
                "{line}; the message is about another GPU than the one watched, so its other figures are not compared"
            ));
            return out;
        }
        out.push(line);
    }
    let age = |t: Option<u64>| {
        t.map_or("at an unknown time".to_string(), |r| {
            format!("{} before the line arrived", Nanos(t_ns.saturating_sub(r)))
        })
    };
    if let (Some(q), Some(f)) = (free, at.device_free_bytes) {
        out.push(compare(
            "device free",
            q,
            f,
            &format!(
                "{} (the message's figure is the allocator's own reading at the refusal)",
                age(at.device_reading_t_ns)
            ),
        ));
    }
    if let (Some(q), Some(j)) = (this_process, at.job_used_bytes) {
        out.push(compare(
            "this process",
            q,
            j,
            &format!(
                "for the job's processes together in NVML's list {}",
                age(at.job_reading_t_ns)
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oom(text: &str) -> StderrOom {
        let message = crate::oom_message::find_all(text).remove(0);
        StderrOom {
            t_ns: 2_000_000,
            message,
        }
    }

    #[test]
    fn the_message_is_explained_and_set_beside_the_readings() {
        let text = "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 4.00 GiB total capacity; 3.50 GiB already allocated; 10.00 MiB free; 3.60 GiB reserved in total by PyTorch)";
        let at = ViewsAt {
            device_reading_t_ns: Some(1_000_000),
            device_free_bytes: Some(10 << 20),
            device_used_bytes: Some((4 << 30) - (10 << 20)),
            ..ViewsAt::default()
        };
        let (r, _) = record(
            oom(text),
            Context {
                utc: "2026-01-01T00:00:00.000Z".into(),
                phase: Some("step".into()),
                at,
                device_total_bytes: 4 << 30,
                earlier: &[],
            },
        );
        assert_eq!(r.format, "pytorch-caching-legacy");
        assert_eq!(r.stderr_line, 1);
        assert_eq!(r.measured.len(), 2, "{:?}", r.measured);
        assert!(
            r.measured[0].starts_with("device total: the message says 4.00 GiB")
                && r.measured[0].ends_with("agrees within the printed precision"),
            "{}",
            r.measured[0]
        );
        assert!(
            r.measured[1]
                .contains("headroom read 10485760 B (10.00 MiB), 1.00 ms before the line arrived"),
            "{}",
            r.measured[1]
        );
        assert!(!r.next_checks.is_empty());
        assert_eq!(r.explanation["message"]["format"], "pytorch-caching-legacy");
    }

    #[test]
    fn a_message_about_another_gpu_is_flagged() {
        let text = "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 79.11 GiB total capacity; 3.50 GiB already allocated; 10.00 MiB free; 3.60 GiB reserved in total by PyTorch)";
        let (r, _) = record(
            oom(text),
            Context {
                utc: String::new(),
                phase: None,
                at: ViewsAt::default(),
                device_total_bytes: 4 << 30,
                earlier: &[],
            },
        );
        assert_eq!(r.measured.len(), 1);
        assert!(r.measured[0].contains("another GPU"), "{:?}", r.measured);
    }
}
