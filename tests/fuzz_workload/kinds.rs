//! The cases beyond loading a workload: out-of-memory logs for `explain` (a shipped message,
//! damaged, coloured, wrapped and buried in a log), and short runs on the simulator of the
//! long-step kinds (a spin or sleep of up to ten hours, a graph replayed up to 20,000 times, a
//! tenant's wait) with a signal at a random moment. An explanation must come from the
//! windowed fast path exactly as from the whole text; a run must end completed or
//! interrupted as its signal says, with its record whole, within the case's time and heap.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use proptest::prelude::*;

use headroom::device::profile::SimProfile;
use headroom::device::sim::SimDevice;
use headroom::run::{RunOptions, run_on};
use headroom::workload::{Rank, WorkloadFile};

#[derive(Debug, Clone)]
pub enum Extra {
    /// A text for `explain`.
    Explain(String),
    /// A workload for the simulator, and when (µs of wall time after the start) Ctrl-C comes.
    Run {
        text: String,
        signal_after_us: Option<u64>,
    },
    /// A hostile pickle for the snapshot reader (`what` says how it was made).
    Pickle { what: String, bytes: Vec<u8> },
    /// A case that runs the binary (`super::commands`), and what it is.
    Command {
        what: String,
        case: super::commands::Case,
    },
}

impl Extra {
    pub fn text(&self) -> &str {
        match self {
            Extra::Explain(t) | Extra::Run { text: t, .. } => t,
            Extra::Pickle { what, .. } | Extra::Command { what, .. } => what,
        }
    }
}

/// The shipped out-of-memory messages (`tests/fixtures/oom-messages/*.log`).
fn messages() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/oom-messages");
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .collect();
    out.sort();
    out
}

/// A damage done to a message: a colour code, a line break, CRLF, a cut, a byte dropped.
fn damage(text: &str, at: usize, how: u8) -> String {
    let mut cut = at % (text.len() + 1);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let (a, b) = text.split_at(cut);
    match how % 6 {
        0 => format!("{a}\u{1b}[1;31m{b}\u{1b}[0m"),
        1 => format!("{a}\n{b}"),
        2 => text.replace('\n', "\r\n"),
        3 => a.to_string(),
        4 => format!("{a}{}", b.chars().skip(1).collect::<String>()),
        _ => format!("{a}^[[33m{b}"),
    }
}

pub fn explain_case() -> impl Strategy<Value = Extra> {
    let messages = messages();
    let n = messages.len();
    (
        prop::collection::vec((0..n, any::<usize>(), any::<u8>(), 0..3u8), 1..4),
        0..6_000usize,
    )
        .prop_map(move |(picks, filler_lines)| {
            let filler = "2024-05-01 12:00:00 INFO step 42 loss 0.2500 memory 12.3 GiB\n";
            let mut text = String::new();
            for (i, at, how, damaged) in picks {
                text.push_str(&filler.repeat(filler_lines / 3));
                let m = &messages[i];
                if damaged == 0 {
                    text.push_str(m);
                } else {
                    text.push_str(&damage(m, at, how));
                }
                text.push('\n');
            }
            Extra::Explain(text)
        })
}

/// One long step of each kind, with the steps it needs around it.
fn long_step(i: usize, kind: u8, duration_ms: u64, times: u32) -> String {
    match kind % 4 {
        0 => format!(
            "  {{ op = \"spin\", for = \"{duration_ms}ms\" }},\n  {{ op = \"synchronize\" }},\n"
        ),
        1 => format!("  {{ op = \"sleep\", for = \"{duration_ms}ms\" }},\n"),
        2 => format!(
            "  {{ op = \"capture\", graph = \"g{i}\", stream = \"s\", steps = [\n    {{ op = \"allocate\", name = \"o{i}\", size = \"4MiB\" }},\n    {{ op = \"fill\", name = \"o{i}\" }},\n    {{ op = \"free\", name = \"o{i}\" }},\n  ] }},\n  {{ op = \"instantiate\", graph = \"g{i}\", auto_free = true }},\n  {{ op = \"replay\", graph = \"g{i}\", times = {times} }},\n"
        ),
        _ => format!(
            "  {{ op = \"tenant\", size = \"256MiB\", for = \"{duration_ms}ms\" }},\n  {{ op = \"sleep\", for = \"{duration_ms}ms\" }},\n"
        ),
    }
}

pub fn run_case() -> impl Strategy<Value = Extra> {
    (
        prop::collection::vec((any::<u8>(), 1..36_000_000u64, 1..20_000u32), 1..3),
        prop::sample::select(&["1ms", "10ms", "100us"][..]),
        prop::option::of(0..50_000u64),
    )
        .prop_map(|(steps, interval, signal_after_us)| {
            let body: String = steps
                .iter()
                .enumerate()
                .map(|(i, &(k, ms, times))| long_step(i, k, ms, times))
                .collect();
            let text = format!(
                "[workload]\nname = \"long\"\n\n[settings]\nsample_interval = \"{interval}\"\n\n[[phase]]\nname = \"p\"\nsteps = [\n  {{ op = \"allocate\", name = \"w\", size = \"64MiB\" }},\n{body}  {{ op = \"free\", name = \"w\" }},\n]\n"
            );
            Extra::Run {
                text,
                signal_after_us,
            }
        })
}

/// A memo-heavy pickle: `count` memoized objects of one kind (empty dicts, empty lists, short
/// strings, `(0, 0)` tuples), held on the stack or put in one list, with `FRAME` headers
/// every `frame_every` objects whose lengths may lie past the end of the file; ends with
/// `STOP`, or is cut short.
pub fn pickle_case() -> impl Strategy<Value = Extra> {
    (
        0..4u8,
        1..50_000usize,
        any::<bool>(),
        prop::option::of((1..5_000usize, any::<u16>())),
        any::<bool>(),
    )
        .prop_map(|(kind, count, in_list, frames, cut)| {
            let object: &[u8] = match kind {
                0 => b"}\x94",
                1 => b"]\x94",
                2 => b"\x8c\x03N/A\x94",
                _ => b"K\x00K\x00\x86\x94",
            };
            let mut bytes = vec![0x80, 4];
            if in_list {
                bytes.extend_from_slice(b"](");
            }
            for i in 0..count {
                if let Some((every, lie)) = frames
                    && i % every == 0
                {
                    bytes.push(0x95);
                    let honest = (every.min(count - i) * object.len()) as u64;
                    bytes.extend_from_slice(&(honest + u64::from(lie % 3) * u64::from(lie)).to_le_bytes());
                }
                bytes.extend_from_slice(object);
            }
            if in_list {
                bytes.push(b'e');
            }
            if !cut {
                bytes.push(b'.');
            }
            let what = format!(
                "pickle: {count} memoized objects of kind {kind}, in a list: {in_list}, frames: {frames:?}, cut short: {cut} ({} bytes)",
                bytes.len()
            );
            Extra::Pickle { what, bytes }
        })
}

/// Checks one case; `Err` says which rule it broke.
pub fn check(e: &Extra) -> Result<(), String> {
    match e {
        Extra::Explain(text) => {
            let whole = headroom::oom_message::find_all(text);
            let whole_lines = headroom::oom_message::suspicious_lines(text, &whole);
            let (found, lines) = headroom::oom_message::scan_text(text);
            if found != whole || lines != whole_lines {
                return Err(format!(
                    "the windowed scan found {} messages and {} lines, the whole text {} and {}",
                    found.len(),
                    lines.len(),
                    whole.len(),
                    whole_lines.len()
                ));
            }
            // A message printed again is explained once and counted in `repeats`.
            let report = headroom::explain::explain_text(text);
            let again: u64 = report.repeats.iter().map(|r| r.count - 1).sum();
            if report.explanations.len() as u64 + again != whole.len() as u64 {
                return Err(format!(
                    "explain_text explained {} messages and {again} repeats of {} found",
                    report.explanations.len(),
                    whole.len()
                ));
            }
            Ok(())
        }
        Extra::Run {
            text,
            signal_after_us,
        } => run(text, *signal_after_us),
        Extra::Command { case, .. } => super::commands::check(case),
        // Not a snapshot: refused with a message (never a panic; the case's heap is metered).
        Extra::Pickle { bytes, .. } => {
            match headroom::import::torch::read_pickle_bytes(bytes, "fuzz.pickle") {
                Ok(_) => Err("a pickle that is no snapshot was read as one".into()),
                Err(e) if format!("{e:#}").is_empty() => Err("refused without a message".into()),
                Err(_) => Ok(()),
            }
        }
    }
}

fn run(text: &str, signal_after_us: Option<u64>) -> Result<(), String> {
    let file = WorkloadFile::from_text(text, Path::new("fuzz/long.toml"), Rank::SINGLE)
        .map_err(|e| format!("a generated long-step workload was refused: {e}"))?;
    let wl = file
        .expand(4096 << 20)
        .map_err(|e| format!("a generated long-step workload did not expand: {e}"))?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let interrupted = Arc::new(AtomicBool::new(false));
    let opts = RunOptions {
        out_dir: Some(dir.path().join("out")),
        interrupted: interrupted.clone(),
        ..RunOptions::default()
    };
    let signal = signal_after_us.map(|us| {
        let flag = interrupted.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_micros(us));
            flag.store(true, Ordering::SeqCst);
        })
    });
    let mut dev = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
    let report = run_on(&wl, &mut dev, None, &opts).map_err(|e| format!("the run failed: {e:#}"));
    if let Some(s) = signal {
        let _ = s.join();
    }
    let report = report?;
    let status = serde_json::to_value(report.summary.status()).unwrap();
    let signalled = interrupted.load(Ordering::SeqCst);
    // Completed: the signal came after the run, or none came.
    let expected = match (status.as_str(), report.exit_code) {
        (Some("completed"), 0) => true,
        (Some("interrupted"), 130) => signalled,
        _ => false,
    };
    if !expected {
        return Err(format!(
            "ended {status} with exit {} (signalled: {signalled}): {:?}",
            report.exit_code,
            report.summary.status_detail()
        ));
    }
    if report
        .summary
        .release()
        .as_ref()
        .is_some_and(|r| !r.within_one_page)
    {
        return Err(format!(
            "the release check failed: {:?}",
            report.summary.release()
        ));
    }
    Ok(())
}

pub fn command_case() -> impl Strategy<Value = Extra> {
    super::commands::case().prop_map(|case| Extra::Command {
        what: format!("{case:?}"),
        case,
    })
}
