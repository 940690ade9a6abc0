//! Reading a workload file section by section, so that an error names its place.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::alloc::AllocatorSpec;
use crate::device::PoolConfig;
use crate::record::View;
use crate::units::{DurationNs, Size, parse_size};
use crate::workload::step::Step;
use crate::workload::{Expect, OomExpectation, Settings};

mod onepass;
mod steps;

pub(crate) use steps::step_from_value;
pub use steps::{parse_step, parse_step_at, parse_step_owned};

/// A bad workload: the file, the place in it (section, phase, step) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadError {
    pub file: PathBuf,
    pub place: String,
    pub message: String,
}

/// The longest message a workload error keeps: a message quoting the file (a parser's
/// "unknown field `…`") is cut there, as a name from the file can be as long as the file.
const MESSAGE_MAX_CHARS: usize = 600;

impl WorkloadError {
    pub fn new(file: &Path, place: impl Into<String>, message: impl Into<String>) -> Self {
        let mut message = escape_controls(&message.into().trim_end().replace('\n', " "));
        if let Some((cut, _)) = message.char_indices().nth(MESSAGE_MAX_CHARS) {
            let total = message.len();
            message.truncate(cut);
            message.push_str(&format!("… ({total} bytes in all)"));
        }
        WorkloadError {
            file: file.to_path_buf(),
            place: escape_controls(&place.into()),
            message,
        }
    }
}

/// `s` on one line: a control character (a newline in a quoted name, a carriage return, an
/// escape) written as its escape, `\n`, so that an error is one line whatever the file holds.
fn escape_controls(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.place.is_empty() {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}: {}: {}",
                self.file.display(),
                self.place,
                self.message
            )
        }
    }
}

impl std::error::Error for WorkloadError {}

/// A workload as written: sections checked, steps parsed but not yet expanded.
#[derive(Debug, Clone)]
pub struct FileWorkload {
    pub name: String,
    pub description: String,
    /// The smallest CUDA-visible total the workload fits on (`[workload] min_total_bytes`).
    pub min_total_bytes: Option<u64>,
    pub settings: Settings,
    pub allocator: AllocatorSpec,
    pub expect: Expect,
    /// (phase name, steps with their 1-based position)
    pub phases: Vec<(String, Vec<(usize, Step)>)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkloadSection {
    name: String,
    #[serde(default)]
    description: String,
    min_total_bytes: Option<Size>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsSection {
    sample_interval: Option<DurationNs>,
    keep_free: Option<Size>,
    #[serde(default)]
    allow_oom: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolSection {
    #[serde(default)]
    release_threshold: Size,
    #[serde(default = "yes")]
    reuse_opportunistic: bool,
    #[serde(default = "yes")]
    reuse_internal_dependencies: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectSection {
    /// `false`/"none", `true`/"any", or "phase/step".
    oom: Option<toml::Value>,
    mismatches: Option<u64>,
    min_headroom: Option<Size>,
    #[serde(default)]
    peak: toml::Table,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PhaseSection {
    name: String,
    steps: Vec<toml::Value>,
}

const SECTIONS: &[&str] = &["workload", "settings", "allocator", "expect", "phase"];

fn section<T: serde::de::DeserializeOwned>(
    file: &Path,
    table: &toml::Table,
    key: &str,
) -> Result<Option<T>, WorkloadError> {
    match table.get(key) {
        None => Ok(None),
        Some(v) => v
            .clone()
            .try_into()
            .map(Some)
            .map_err(|e: toml::de::Error| {
                WorkloadError::new(file, format!("[{key}]"), e.message())
            }),
    }
}

/// The largest workload file read: a million steps written out one by one take about 40 MB.
pub const MAX_FILE_BYTES: u64 = 128 << 20;

/// Steps written in a file (its `op` keys) past which it is refused before it is parsed: the
/// parsed file holds every written step at once, unlike the actions a run makes from them
/// (about 230 bytes a step with the text, read in one pass; 2.3 KB through the `toml` crate's
/// document, which a file outside the one-pass reader's shape takes: `cargo bench --bench
/// parse`). A long sequence is a `repeat`, which is parsed once.
pub const MAX_WRITTEN_STEPS: u64 = 2_000_000;

/// Reads a workload file: refused above `MAX_FILE_BYTES` before it is read, and when it is not
/// UTF-8 with the byte offset and line of the first byte that is not.
pub fn read_bounded(path: &Path) -> Result<String, WorkloadError> {
    let cannot =
        |e: std::io::Error| WorkloadError::new(path, "", format!("cannot read the file: {e}"));
    let file = std::fs::File::open(path).map_err(cannot)?;
    let len = file.metadata().map_err(cannot)?.len();
    if len > MAX_FILE_BYTES {
        return Err(WorkloadError::new(
            path,
            "",
            format!(
                "the file is {len} bytes, more than the {MAX_FILE_BYTES} a workload file may be \
                 (a long sequence is a `repeat` step)"
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // A file that grows while read (a pipe, a device) is still cut at the bound.
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, MAX_FILE_BYTES + 1),
        &mut bytes,
    )
    .map_err(cannot)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(WorkloadError::new(
            path,
            "",
            format!("the file is more than the {MAX_FILE_BYTES} bytes a workload file may be"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let b = e.as_bytes();
        let line = b[..at].iter().filter(|&&c| c == b'\n').count() + 1;
        WorkloadError::new(
            path,
            format!("line {line}"),
            format!(
                "not UTF-8 text: byte {at} (0x{:02x}) is not valid UTF-8; a workload file is \
                 TOML, which is UTF-8",
                b[at]
            ),
        )
    })
}

/// Counts the steps written in `text` (an `op` key: `op` after `{`, `,` or the start of a
/// line, then `=`) and refuses the file past `MAX_WRITTEN_STEPS`, naming the line where it
/// crossed, before any of it is parsed.
pub fn check_step_count(text: &str, file: &Path) -> Result<(), WorkloadError> {
    let bytes = text.as_bytes();
    let mut count = 0u64;
    for at in memchr::memmem::find_iter(bytes, b"op") {
        let before = bytes[..at]
            .iter()
            .rev()
            .find(|b| !matches!(b, b' ' | b'\t'))
            .copied();
        if !matches!(before, None | Some(b'{' | b',' | b'\n')) {
            continue;
        }
        let after = bytes[at + 2..]
            .iter()
            .find(|b| !matches!(b, b' ' | b'\t'))
            .copied();
        if after != Some(b'=') {
            continue;
        }
        count += 1;
        if count > MAX_WRITTEN_STEPS {
            let line = memchr::memchr_iter(b'\n', &bytes[..at]).count() + 1;
            return Err(WorkloadError::new(
                file,
                format!("line {line}"),
                format!(
                    "more than {MAX_WRITTEN_STEPS} steps written out, more than headroom parses \
                     (the parsed text holds each written step); refused before it is parsed: a \
                     long sequence is a `repeat` step"
                ),
            ));
        }
    }
    Ok(())
}

/// Parses the text of a workload file: in one pass where the file has the usual shape
/// (`parse_one_pass`), else through the `toml` crate (`parse_general`), which also names the
/// place of every error.
pub fn parse(text: &str, file: &Path) -> Result<FileWorkload, WorkloadError> {
    match parse_one_pass(text, file) {
        Some(w) => Ok(w),
        None => parse_general(text, file),
    }
}

/// The one-pass reader (`onepass.rs`): the workload `parse_general` gives, or `None` where the
/// file is not of the shape it reads or has an error (`parse_general` then names it).
pub fn parse_one_pass(text: &str, file: &Path) -> Option<FileWorkload> {
    let read = onepass::read(text)?;
    assemble(file, &read.sections, |checked| {
        let mut phases = Vec::with_capacity(read.phases.len());
        for (i, p) in read.phases.into_iter().enumerate() {
            checked(i, &p.name, &phases, p.steps.is_empty())?;
            phases.push((p.name, p.steps));
        }
        Ok(phases)
    })
    .ok()
}

/// `parse` through the `toml` crate's document, for every TOML file.
pub fn parse_general(text: &str, file: &Path) -> Result<FileWorkload, WorkloadError> {
    let mut table: toml::Table = toml::from_str(text).map_err(|e| {
        let place = e
            .span()
            .map(|s| {
                let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                format!("line {line}")
            })
            .unwrap_or_default();
        // The parser says "duplicate key" without the key: its span holds it.
        let key = e
            .span()
            .and_then(|s| text.get(s))
            .map(|k| k.trim().trim_matches('"'))
            .filter(|k| !k.is_empty() && e.message().starts_with("duplicate key"));
        let message = match key {
            Some(k) => {
                format!("not valid TOML: duplicate key {k:?} (a key may be given once in a table)")
            }
            None => format!("not valid TOML: {}", e.message()),
        };
        WorkloadError::new(file, place, message)
    })?;
    // Taken, not copied: the phases hold every written step.
    let phases_value = table.remove("phase");
    assemble(file, &table, |checked| {
        let phases_value = phases_value.ok_or_else(|| {
            WorkloadError::new(file, "", "no phases: add at least one [[phase]] with steps")
        })?;
        let toml::Value::Array(phase_list) = phases_value else {
            return Err(WorkloadError::new(
                file,
                "phase",
                "must be an array of tables: write [[phase]]",
            ));
        };
        let mut phases = Vec::new();
        for (i, pv) in phase_list.into_iter().enumerate() {
            let place = format!("phase {}", i + 1);
            let p: PhaseSection = pv
                .try_into()
                .map_err(|e: toml::de::Error| WorkloadError::new(file, &place, e.message()))?;
            let place = checked(i, &p.name, &phases, p.steps.is_empty())?;
            let mut steps = Vec::new();
            for (j, sv) in p.steps.into_iter().enumerate() {
                steps.push((
                    j + 1,
                    parse_step_owned(file, &format!("{place}, step {}", j + 1), sv)?,
                ));
            }
            phases.push((p.name, steps));
        }
        Ok(phases)
    })
}

/// The phases as parsed: each name with its steps.
type Phases = Vec<(String, Vec<(usize, Step)>)>;

/// A phase's checks before its steps: its place in errors, given its 0-based index, its name,
/// the phases before it and whether it has no steps.
type PhaseCheck<'a> = dyn Fn(usize, &str, &Phases, bool) -> Result<String, WorkloadError> + 'a;

/// Checks the sections of `table` (every section but `phase`, which `phases` makes, checking
/// each phase with the function it is given) and puts the workload together.
fn assemble(
    file: &Path,
    table: &toml::Table,
    phases: impl FnOnce(&PhaseCheck) -> Result<Phases, WorkloadError>,
) -> Result<FileWorkload, WorkloadError> {
    for (key, value) in table {
        if !SECTIONS.contains(&key.as_str()) {
            // Quoted cut short: a key can be as long as the file.
            let shown = crate::bounded::quote_str(key);
            let (place, what) = if value.is_table() || value.is_array() {
                (format!("[{shown}]"), "section")
            } else {
                (shown.clone(), "top-level key")
            };
            return Err(WorkloadError::new(
                file,
                place,
                format!(
                    "unknown {what} \"{shown}\"; expected one of the sections {}",
                    SECTIONS.join(", ")
                ),
            ));
        }
    }
    let head: WorkloadSection = section(file, table, "workload")?.ok_or_else(|| {
        WorkloadError::new(
            file,
            "[workload]",
            "missing section; it needs at least `name`",
        )
    })?;
    check_printable_name(file, "[workload] name", &head.name)?;
    let settings = match section::<SettingsSection>(file, table, "settings")? {
        None => Settings::default(),
        Some(s) => Settings {
            sample_interval_ns: s
                .sample_interval
                .map_or(Settings::default().sample_interval_ns, |d| d.0),
            keep_free_bytes: s.keep_free.map(|k| k.0),
            allow_oom: s.allow_oom,
        },
    };
    let allocator = parse_allocator(file, table.get("allocator"))?;
    let expect = match section::<ExpectSection>(file, table, "expect")? {
        None => Expect::default(),
        Some(e) => parse_expect(file, e)?,
    };
    let phases = phases(&|i, name, earlier, no_steps| {
        check_printable_name(file, &format!("phase {} name", i + 1), name)?;
        let place = format!("phase {} ({:?})", i + 1, name);
        if name.trim().is_empty() {
            return Err(WorkloadError::new(file, &place, "the phase name is empty"));
        }
        if earlier.iter().any(|(n, _)| n == name) {
            return Err(WorkloadError::new(
                file,
                &place,
                "another phase has the same name",
            ));
        }
        if no_steps {
            return Err(WorkloadError::new(file, &place, "the phase has no steps"));
        }
        Ok(place)
    })?;
    if phases.is_empty() {
        return Err(WorkloadError::new(file, "phase", "the phase list is empty"));
    }
    if head.min_total_bytes.is_some_and(|m| m.0 == 0) {
        return Err(WorkloadError::new(
            file,
            "[workload] min_total_bytes",
            "0 B says nothing; give the smallest CUDA-visible total the workload fits on, or leave it out",
        ));
    }
    Ok(FileWorkload {
        name: head.name,
        description: head.description,
        min_total_bytes: head.min_total_bytes.map(|m| m.0),
        settings,
        allocator,
        expect,
        phases,
    })
}

fn parse_allocator(
    file: &Path,
    value: Option<&toml::Value>,
) -> Result<AllocatorSpec, WorkloadError> {
    let place = "[allocator]";
    let Some(value) = value else {
        return Ok(AllocatorSpec::Direct);
    };
    let mut table = value
        .as_table()
        .cloned()
        .ok_or_else(|| WorkloadError::new(file, place, "must be a table"))?;
    let kind = match table.remove("kind") {
        None => "direct".to_string(),
        Some(toml::Value::String(s)) => s,
        Some(other) => {
            return Err(WorkloadError::new(
                file,
                place,
                format!("kind must be a string, not {other}"),
            ));
        }
    };
    let rest = toml::Value::Table(table);
    match kind.as_str() {
        "direct" => {
            if let Some(k) = rest.as_table().and_then(|t| t.keys().next()) {
                return Err(WorkloadError::new(
                    file,
                    place,
                    format!("unknown key {k:?}: the direct allocator takes no settings"),
                ));
            }
            Ok(AllocatorSpec::Direct)
        }
        "pool" => {
            let p: PoolSection = rest
                .try_into()
                .map_err(|e: toml::de::Error| WorkloadError::new(file, place, e.message()))?;
            Ok(AllocatorSpec::Pool(PoolConfig {
                release_threshold_bytes: p.release_threshold.0,
                reuse_opportunistic: p.reuse_opportunistic,
                reuse_internal_dependencies: p.reuse_internal_dependencies,
            }))
        }
        "caching" => {
            let table = rest.as_table().cloned().unwrap_or_default();
            crate::alloc::caching::CachingConfig::from_toml(&table)
                .map(AllocatorSpec::Caching)
                .map_err(|e| WorkloadError::new(file, place, e.to_string()))
        }
        other => Err(WorkloadError::new(
            file,
            place,
            format!("unknown allocator kind {other:?}; expected direct, pool or caching"),
        )),
    }
}

fn parse_expect(file: &Path, e: ExpectSection) -> Result<Expect, WorkloadError> {
    let place = "[expect]";
    let oom = match e.oom {
        None | Some(toml::Value::Boolean(false)) => OomExpectation::None,
        Some(toml::Value::Boolean(true)) => OomExpectation::Any,
        Some(toml::Value::String(s)) if s == "none" => OomExpectation::None,
        Some(toml::Value::String(s)) if s == "any" => OomExpectation::Any,
        Some(toml::Value::String(s)) if s.contains('/') => {
            OomExpectation::At(crate::workload::step_id::canonical_at(&s))
        }
        Some(other) => {
            return Err(WorkloadError::new(
                file,
                place,
                format!(
                    "oom = {other} is not understood; use false, true, or \"phase/step\" (e.g. \"decode/s3\")"
                ),
            ));
        }
    };
    let mut max_peak_bytes = Vec::new();
    for (key, v) in &e.peak {
        let view = View::from_key(key).ok_or_else(|| {
            let keys: Vec<&str> = View::ALL.iter().map(|v| v.key()).collect();
            WorkloadError::new(
                file,
                "[expect.peak]",
                format!("unknown view {key:?}; views are {}", keys.join(", ")),
            )
        })?;
        let bytes = match v {
            toml::Value::String(s) => parse_size(s).map_err(|err| {
                WorkloadError::new(file, format!("[expect.peak] {key}"), err.to_string())
            })?,
            toml::Value::Integer(i) if *i >= 0 => *i as u64,
            other => {
                return Err(WorkloadError::new(
                    file,
                    format!("[expect.peak] {key}"),
                    format!("{other} is not a size"),
                ));
            }
        };
        max_peak_bytes.push((view, bytes));
    }
    Ok(Expect {
        oom,
        max_peak_bytes,
        min_headroom_bytes: e.min_headroom.map(|s| s.0),
        max_mismatches: e.mismatches,
    })
}

/// The longest workload, phase or allocation name, in characters: names become plot labels,
/// report rows, trace tracks and the result folder's name.
pub const MAX_NAME_CHARS: usize = 200;

/// A name's first characters, for a message about a name too long to print whole.
pub fn name_start(name: &str) -> String {
    let start: String = name.chars().take(40).collect();
    format!("{start:?}…")
}

/// A workload or phase name is printed to terminals and reports: no control character, and
/// no longer than `MAX_NAME_CHARS`.
fn check_printable_name(file: &Path, place: &str, name: &str) -> Result<(), WorkloadError> {
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(WorkloadError::new(
            file,
            place,
            format!(
                "{} is {chars} characters long; a name may have at most {MAX_NAME_CHARS}",
                name_start(name)
            ),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(WorkloadError::new(
            file,
            place,
            format!(
                "{name:?} contains a control character; names are printed to terminals and reports"
            ),
        ));
    }
    Ok(())
}
