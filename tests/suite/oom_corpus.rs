//! The readers' tuning corpus (`tests/fixtures/oom-messages/reports/corpus-1/`): real
//! out-of-memory reports recorded as facts (source, runtime, the shape of the paste, every figure
//! as printed, the cause judged by hand) with each message written anew in its runtime's format.
//! Prints and asserts how many headroom reads to the printed precision and how often it names the
//! same cause, and that every format has reports, a source and a row in docs/oom.md's format
//! table. These reports were fitted: they are scored apart from `oom_reports`' parts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use headroom::explain::explain_text;
use headroom::oom_message::Format;
use serde_json::Value;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/oom-messages/reports/corpus-1")
}

/// One report of the corpus; `figures` are keyed by the JSON field of `format`'s reader.
#[derive(Debug, serde::Deserialize)]
struct Report {
    id: String,
    origin: String,
    source: String,
    repository: String,
    format: String,
    format_source: String,
    shape: Vec<String>,
    message: String,
    #[serde(default)]
    figures: BTreeMap<String, String>,
    expected: Expected,
}

#[derive(Debug, serde::Deserialize)]
struct Expected {
    cause: String,
}

/// Every report, with its file's name.
fn reports() -> Vec<(String, Report)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let r: Report =
                toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            (stem, r)
        })
        .collect()
}

/// `owner/name` from a GitHub address.
fn repository(source: &str) -> String {
    let path = source.trim_start_matches("https://github.com/");
    path.split('/').take(2).collect::<Vec<_>>().join("/")
}

/// A printed figure read by hand: `"1.71 GiB"` → mantissa 171, 2 places, 2^30 bytes a unit.
fn hand_figure(s: &str) -> Option<(u128, u32, u128)> {
    let (number, unit) = s.split_once(' ')?;
    let scale: u128 = match unit {
        "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return None,
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let mantissa: u128 = format!("{int}{frac}").parse().ok()?;
    Some((mantissa, frac.len() as u32, scale))
}

/// The JSON value at `key` (`processes[0].used`, `buffer_assignment.total_allocation`).
fn lookup<'a>(message: &'a Value, key: &str) -> Option<&'a Value> {
    let mut v = message;
    for part in key.split('.') {
        match part.split_once('[') {
            Some((name, rest)) => {
                let i: usize = rest.trim_end_matches(']').parse().ok()?;
                v = v.get(name)?.get(i)?;
            }
            None => v = v.get(part)?,
        }
    }
    Some(v)
}

/// Why a figure does not match, or `None` when it does.
fn figure_mismatch(message: &Value, key: &str, want: &str) -> Option<String> {
    let Some(got) = lookup(message, key) else {
        return Some(format!("{key}: missing"));
    };
    if let Some(q) = got.as_object().filter(|q| q.contains_key("printed")) {
        let (low, high) = (q["low"].as_u64()? as u128, q["high"].as_u64()? as u128);
        let Some((m, places, scale)) = hand_figure(want) else {
            return Some(format!("{key}: cannot read {want:?}"));
        };
        let p = 10u128.pow(places);
        // What the printed figure can stand for ([value − ½ulp, value + ½ulp], scaled by 2p
        // to stay in integers) meets headroom's interval, and that interval is no wider than
        // twice the printed precision (a tsl truncation or MPS's float cast adds a little).
        let (lo2, hi2, nom2) = (low * 2 * p, high * 2 * p, 2 * m * scale);
        let inside = lo2 <= nom2 + scale && hi2 + scale >= nom2;
        let ulp = (scale / p).max(1);
        let narrow = high - low <= 2 * ulp + (ulp >> 4) + 1;
        return (!(inside && narrow)).then(|| format!("{key}: {want} vs [{low}, {high}]"));
    }
    if let Some(n) = got.as_u64() {
        let want_n: u64 = want.trim_end_matches(" B").parse().ok()?;
        return (n != want_n).then(|| format!("{key}: {n} vs {want}"));
    }
    if let Some(s) = got.as_str() {
        return (s != want).then(|| format!("{key}: {s:?} vs {want:?}"));
    }
    Some(format!("{key}: unexpected {got}"))
}

#[test]
fn the_corpus_of_real_messages_reads_and_diagnoses_as_judged_by_hand() {
    let corpus = reports();
    let (mut parsed, mut decided, mut agreed) = (0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    let mut per_format: BTreeMap<String, usize> = BTreeMap::new();
    let mut repositories = BTreeSet::new();
    for (_, r) in &corpus {
        *per_format.entry(r.format.clone()).or_default() += 1;
        repositories.insert(r.repository.clone());
        let report = serde_json::to_value(explain_text(&r.message)).unwrap();
        let found = report["explanations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["message"]["format"] == r.format.as_str());
        let Some(x) = found else {
            failures.push(format!("{}: no {} message", r.id, r.format));
            continue;
        };
        let wrong: Vec<String> = r
            .figures
            .iter()
            .filter_map(|(k, v)| figure_mismatch(&x["message"], k, v))
            .collect();
        if wrong.is_empty() {
            parsed += 1;
        } else {
            failures.push(format!("{}: {}", r.id, wrong.join("; ")));
        }
        if r.expected.cause != "undecided" {
            decided += 1;
            let got = x["cause"].as_str().unwrap_or("undecided");
            if got == r.expected.cause {
                agreed += 1;
            } else {
                failures.push(format!(
                    "{}: cause {got}, judged {}",
                    r.id, r.expected.cause
                ));
            }
        }
    }
    let n = corpus.len();
    let parsed_share = parsed as f64 / n as f64;
    let agreed_share = agreed as f64 / decided.max(1) as f64;
    println!(
        "corpus-1: {n} reports from {} repositories; {parsed} parsed to the printed precision ({:.1}%); cause agrees on {agreed} of {decided} decided ({:.1}%)",
        repositories.len(),
        parsed_share * 100.0,
        agreed_share * 100.0
    );
    for f in &failures {
        println!("  {f}");
    }
    // docs/oom.md states the same figures.
    let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/oom.md"))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for claim in [
        format!(
            "{n} real reports from {} public repositories",
            repositories.len()
        ),
        format!(
            "{parsed} of {n} parsed with every printed figure inside headroom's interval ({:.1}%)",
            parsed_share * 100.0
        ),
        format!(
            "the cause agrees on {agreed} of {decided} decided reports ({:.1}%)",
            agreed_share * 100.0
        ),
        format!("where the numbers decide it ({decided} reports;"),
    ] {
        assert!(page.contains(&claim), "docs/oom.md does not say {claim:?}");
    }
    assert!(n >= 150, "only {n} reports");
    assert!(
        repositories.len() >= 80,
        "only {} repositories",
        repositories.len()
    );
    assert!(parsed_share >= 0.97, "parsed {parsed_share:.3}");
    assert!(agreed_share >= 0.90, "cause agreement {agreed_share:.3}");
    // The reader by principle is measured on the other recorded reports (`oom_reports`).
    for f in Format::ALL.iter().filter(|f| **f != Format::Generic) {
        let k = per_format.get(f.name()).copied().unwrap_or(0);
        assert!(k >= 3, "{}: {k} reports in the corpus", f.name());
    }
}

#[test]
fn every_report_has_its_source_and_every_format_its_row_in_the_oom_page() {
    let names: BTreeSet<&str> = Format::ALL.iter().map(|f| f.name()).collect();
    let mut ids = BTreeSet::new();
    for (stem, r) in &reports() {
        assert_eq!(&r.id, stem, "the id is the file's name");
        assert!(ids.insert(r.id.clone()), "{}: id repeated", r.id);
        assert_eq!(r.origin, "corpus-1", "{}", r.id);
        assert_eq!(r.repository, repository(&r.source), "{}", r.id);
        assert!(
            r.source.starts_with("https://github.com/"),
            "{}: {}",
            r.id,
            r.source
        );
        assert!(
            names.contains(r.format.as_str()),
            "{}: format {}",
            r.id,
            r.format
        );
        assert!(
            !r.format_source.trim().is_empty(),
            "{}: no format_source",
            r.id
        );
        assert!(!r.message.trim().is_empty(), "{}: empty message", r.id);
        assert!(r.shape.iter().all(|s| !s.trim().is_empty()), "{}", r.id);
    }
    // Kept apart: no thread of the corpus is among the fitted or held-out reports.
    let corpus_sources: BTreeSet<String> = reports().into_iter().map(|(_, r)| r.source).collect();
    for part in ["fitted", "held-out"] {
        for entry in std::fs::read_dir(corpus().with_file_name(part)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "toml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let other: toml::Table = toml::from_str(&text).unwrap();
            let source = other["source"].as_str().unwrap_or("");
            assert!(
                !corpus_sources.contains(source),
                "{}: {source} is also in corpus-1",
                path.display()
            );
            assert_ne!(
                other.get("origin").and_then(|o| o.as_str()),
                Some("corpus-1"),
                "{}",
                path.display()
            );
        }
    }
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/oom.md")).unwrap();
    let section = page
        .split("## The formats headroom reads")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap();
    for f in Format::ALL {
        let row = section
            .lines()
            .find(|l| l.starts_with("| ") && l.contains(&format!("`{}`", f.name())))
            .unwrap_or_else(|| panic!("no row in docs/oom.md for {}", f.name()));
        assert!(row.matches(" | ").count() >= 2, "{row}");
    }
}
