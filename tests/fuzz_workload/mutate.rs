//! Byte-level mutations of whole files: the shipped workloads (`workloads/**/*.toml`) and
//! generated ones, with bytes deleted, inserted, replaced or flipped, lines duplicated, and
//! tokens from a dictionary of edge values and TOML punctuation spliced in.

use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::Index;

/// Pieces worth splicing into a workload: edge numbers, units, TOML syntax, whole steps.
const TOKENS: &[&str] = &[
    "\"fill\"",
    "0",
    "1",
    "-1",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "9223372036854775807",
    "\"0B\"",
    "\"18446744073709551615B\"",
    "\"18446744073709551615ns\"",
    "\"100% of total\"",
    "\"0.5\"",
    "nan",
    "inf",
    "1e308",
    "true",
    "[",
    "]",
    "{",
    "}",
    "\"",
    "'",
    "'''",
    "\"\"\"",
    "=",
    ",",
    ".",
    "\n",
    "#",
    "\\",
    "\u{0}",
    "é",
    "🙂",
    "{rank}",
    "{rank_count}",
    "[[phase]]\n",
    "[expect]\noom = true\n",
    "[allocator]\nkind = \"caching\"\n",
    "count = \"fill\"",
    "{ op = \"repeat\", times = 4294967295, steps = [{ op = \"free\", name = \"w\", keep_every = 1 }] },",
    "{ op = \"allocate\", name = \"w\", size = \"513B\", count = 4294967295 },",
    "{ op = \"synchronize\", stream = \"nowhere\" },",
    "{ op = \"empty_cache\" },",
    "GiB",
    "MiB",
    "KB",
    "ns",
    "h",
    "min",
    "µs",
    "% of total",
];

/// The shipped workloads, read once.
pub fn corpus() -> &'static [String] {
    static FILES: OnceLock<Vec<String>> = OnceLock::new();
    FILES.get_or_init(|| {
        let mut out = Vec::new();
        collect(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads"),
            &mut out,
        );
        out.sort();
        assert!(out.len() >= 10, "the shipped workloads were not found");
        out.into_iter().map(|(_, text)| text).collect()
    })
}

fn collect(dir: &Path, out: &mut Vec<(std::path::PathBuf, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "toml") {
            out.push((
                p.clone(),
                std::fs::read_to_string(&p).expect("a shipped workload"),
            ));
        }
    }
}

#[derive(Debug, Clone)]
pub enum Mutation {
    Delete {
        at: Index,
        len: usize,
    },
    Insert {
        at: Index,
        token: &'static str,
    },
    Replace {
        at: Index,
        len: usize,
        token: &'static str,
    },
    /// Replaces the `nth` run of digits with an edge number.
    Number {
        nth: Index,
        with: &'static str,
    },
    DuplicateLine {
        at: Index,
    },
    Flip {
        at: Index,
        byte: u8,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let token = prop::sample::select(TOKENS);
    let number = prop::sample::select(
        &[
            "0",
            "1",
            "4294967295",
            "4294967296",
            "18446744073709551615",
            "65536",
            "999999",
        ][..],
    );
    prop_oneof![
        2 => (any::<Index>(), 1..40usize).prop_map(|(at, len)| Mutation::Delete { at, len }),
        3 => (any::<Index>(), token.clone()).prop_map(|(at, token)| Mutation::Insert { at, token }),
        2 => (any::<Index>(), 1..8usize, token).prop_map(|(at, len, token)| Mutation::Replace { at, len, token }),
        3 => (any::<Index>(), number).prop_map(|(nth, with)| Mutation::Number { nth, with }),
        1 => any::<Index>().prop_map(|at| Mutation::DuplicateLine { at }),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Flip { at, byte }),
    ]
}

pub fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..6)
}

/// A shipped workload, mutated.
pub fn shipped() -> impl Strategy<Value = String> {
    (any::<Index>(), mutations()).prop_map(|(i, m)| {
        let files = corpus();
        apply(&files[i.index(files.len())], &m)
    })
}

/// `text` with `mutations` applied in order (bytes that stop being UTF-8 read as U+FFFD, as a
/// lossy read would; `headroom run` refuses a file that is not UTF-8 before parsing it).
pub fn apply(text: &str, mutations: &[Mutation]) -> String {
    let mut b = text.as_bytes().to_vec();
    for m in mutations {
        let pos = |at: &Index, b: &Vec<u8>| at.index(b.len() + 1);
        match m {
            Mutation::Delete { at, len } => {
                let p = pos(at, &b);
                b.drain(p..(p + len).min(b.len()));
            }
            Mutation::Insert { at, token } => {
                let p = pos(at, &b);
                b.splice(p..p, token.bytes());
            }
            Mutation::Replace { at, len, token } => {
                let p = pos(at, &b);
                b.splice(p..(p + len).min(b.len()), token.bytes());
            }
            Mutation::Number { nth, with } => {
                let runs = digit_runs(&b);
                if !runs.is_empty() {
                    let (s, e) = runs[nth.index(runs.len())];
                    b.splice(s..e, with.bytes());
                }
            }
            Mutation::DuplicateLine { at } => {
                let p = pos(at, &b).min(b.len());
                let start = b[..p]
                    .iter()
                    .rposition(|&c| c == b'\n')
                    .map_or(0, |i| i + 1);
                let end = b[p..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |i| p + i + 1);
                let line = b[start..end].to_vec();
                b.splice(end..end, line);
            }
            Mutation::Flip { at, byte } => {
                if !b.is_empty() {
                    let p = at.index(b.len());
                    b[p] ^= byte | 1;
                }
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn digit_runs(b: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let s = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            runs.push((s, i));
        } else {
            i += 1;
        }
    }
    runs
}
