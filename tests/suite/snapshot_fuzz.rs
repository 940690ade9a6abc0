//! Hostile and broken pickles against the snapshot reader: nesting far past any snapshot's
//! depth (lists, MARKs, dicts, tuples, and lists filled through the memo after they were
//! nested), length fields and memo ids out of range, every opcode at every place, and random
//! mutations of a real snapshot. Every case must end in `Ok` or an error, never a panic or a
//! stack overflow; the nested files also go through the binary, which exits 2 naming the byte.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use crate::common::headroom;
use headroom::import::torch;

/// A small deterministic generator (xorshift64*), so a failing case can be rebuilt.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const NESTING: usize = 200_000;

/// The nested pickles of the issue: each builds values 200,000 levels deep.
fn nested() -> Vec<(&'static str, Vec<u8>)> {
    let n = NESTING;
    let mut lists = b"\x80\x04".to_vec();
    lists.extend(std::iter::repeat_n(b']', n));
    lists.extend(std::iter::repeat_n(b'a', n - 1));
    lists.push(b'.');
    // The same inside a snapshot-like dict (a first value other than a dict is refused at
    // the first check, 64 KiB in, before the nesting is).
    let mut dict_lists = b"\x80\x04}\x8c\x08segments".to_vec();
    dict_lists.extend_from_slice(&lists[2..lists.len() - 1]);
    dict_lists.extend_from_slice(b"s.");
    let mut marks = b"\x80\x04".to_vec();
    marks.extend(std::iter::repeat_n(b'(', n));
    marks.extend(std::iter::repeat_n(b'l', n));
    marks.push(b'.');
    let mut dicts = b"\x80\x04".to_vec();
    for _ in 0..n {
        dicts.extend_from_slice(b"}\x8c\x01k");
    }
    dicts.push(b'N');
    dicts.extend(std::iter::repeat_n(b's', n));
    dicts.push(b'.');
    let mut tuples = b"\x80\x04)".to_vec();
    tuples.extend(std::iter::repeat_n(0x85u8, n));
    tuples.push(b'.');
    // Each list appended to the one before while only two are on the stack, reached back
    // through the memo: the depth grows after the outer lists were nested.
    let mut memo = b"\x80\x04]\x94]\x94a".to_vec();
    for i in 2..n as u32 {
        memo.push(b'0');
        memo.push(b'j');
        memo.extend_from_slice(&(i - 1).to_le_bytes());
        memo.extend_from_slice(b"]\x94a");
    }
    memo.extend_from_slice(b"0j\x00\x00\x00\x00.");
    vec![
        ("lists", lists),
        ("dict_lists", dict_lists),
        ("marks", marks),
        ("dicts", dicts),
        ("tuples", tuples),
        ("memo", memo),
    ]
}

/// Reads `bytes`; a panic is the failure (an error is an answer).
fn read_must_not_panic(bytes: &[u8], what: &str) -> Result<(), String> {
    match catch_unwind(AssertUnwindSafe(|| torch::read_pickle_bytes(bytes, "case"))) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(_) => panic!("the reader panicked on {what}"),
    }
}

#[test]
fn nested_pickles_are_refused_at_their_byte() {
    for (name, bytes) in nested() {
        let e = read_must_not_panic(&bytes, name).expect_err(name);
        if name == "lists" {
            assert!(
                e.contains("byte 65536: the pickle's first value is a list"),
                "{name}: {e}"
            );
        } else if name != "memo" {
            assert!(
                e.contains("byte ") && (e.contains("nest") || e.contains("MARK")),
                "{name}: {e}"
            );
        }
    }
}

/// A dict of 100,000 keys where a segment belongs, and a snapshot of 100,000 keys: the
/// message names the first 32 keys and how many there are, in under 1 KB.
#[test]
fn a_dict_of_a_hundred_thousand_keys_is_named_in_a_short_message() {
    let mut seg = b"\x80\x04}\x94\x8c\x08segments\x94]\x94}\x94(".to_vec();
    for k in 0..100_000u32 {
        seg.push(b'J');
        seg.extend_from_slice(&k.to_le_bytes());
        seg.extend_from_slice(b"K\x00");
    }
    seg.extend_from_slice(b"uas.");
    let e = read_must_not_panic(&seg, "keys").unwrap_err();
    assert!(e.len() < 1024, "{} bytes", e.len());
    assert!(
        e.ends_with("no `address` key (keys: <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, <int>, … (100000 keys in all))"),
        "{e}"
    );
    let mut top = b"\x80\x04}\x94(".to_vec();
    for k in 0..100_000u32 {
        top.extend_from_slice(b"\x8c\x06");
        top.extend_from_slice(format!("k{k:05}").as_bytes());
        top.extend_from_slice(b"K\x00");
    }
    top.extend_from_slice(b"u.");
    // With its segments, the same snapshot reads, and its notes name 32 keys not used.
    let mut with_segments = top.clone();
    with_segments.truncate(top.len() - 2);
    with_segments.extend_from_slice(b"\x8c\x08segments]u.");
    let snap = torch::read_pickle_bytes(&with_segments, "case").unwrap();
    assert_eq!(snap.ignored_keys.len(), 33);
    assert_eq!(
        (
            snap.ignored_keys[0].as_str(),
            snap.ignored_keys[31].as_str()
        ),
        ("k00000", "k00031")
    );
    assert_eq!(snap.ignored_keys[32], "…");
    let e = read_must_not_panic(&top, "top keys").unwrap_err();
    assert!(e.len() < 1024, "{} bytes", e.len());
    assert!(
        e.starts_with("case: no `segments` key (keys: k00000, k00001,")
            && e.ends_with(", k00031, … (100000 keys in all)): not a PyTorch memory snapshot"),
        "{e}"
    );
}

#[test]
fn the_binary_exits_2_on_nested_pickles_naming_the_byte() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, bytes) in nested() {
        let path = tmp.path().join(format!("{name}.pickle"));
        std::fs::write(&path, &bytes).unwrap();
        for args in [
            vec!["replay", path.to_str().unwrap()],
            vec![
                "import",
                "torch",
                path.to_str().unwrap(),
                "--out",
                tmp.path().join(format!("out-{name}")).to_str().unwrap(),
            ],
        ] {
            let r = headroom(tmp.path(), &args);
            assert_eq!(r.code, 2, "{name} {args:?}: {}{}", r.stdout, r.stderr);
            assert!(r.stderr.contains(&format!("{name}.pickle")), "{}", r.stderr);
            if name != "memo" {
                assert!(r.stderr.contains("byte "), "{name}: {}", r.stderr);
            }
        }
    }
}

/// Every opcode byte, with arguments that are short, huge or random.
fn random_program(rng: &mut Rng) -> Vec<u8> {
    let mut b = vec![0x80, 2 + rng.below(4) as u8];
    let len = 1 + rng.below(64);
    for _ in 0..len {
        let op = match rng.below(4) {
            // Opcodes a snapshot uses, more often.
            0 | 1 => {
                let common = b"}]()euasthjqr\x94\x8c\x85\x86\x87KMJ\x8aNG\x88\x89";
                common[rng.below(common.len() as u64) as usize]
            }
            _ => rng.below(256) as u8,
        };
        b.push(op);
        // An argument of random length, sometimes a huge length field.
        match rng.below(6) {
            0 => b.extend_from_slice(&u32::MAX.to_le_bytes()),
            1 => b.extend_from_slice(&u64::MAX.to_le_bytes()),
            2 => b.extend_from_slice(&(rng.below(1 << 20) as u32).to_le_bytes()),
            _ => {
                for _ in 0..rng.below(4) {
                    b.push(rng.below(256) as u8);
                }
            }
        }
    }
    if rng.below(2) == 0 {
        b.push(b'.');
    }
    b
}

/// A real snapshot with a few bytes changed, inserted, removed or the file cut short.
fn mutated(base: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(b.len() as u64) as usize;
        match rng.below(5) {
            0 => b[at] = rng.below(256) as u8,
            1 => b[at] ^= 1 << rng.below(8),
            2 => b.insert(at, rng.below(256) as u8),
            3 => {
                b.remove(at);
            }
            _ => b.truncate(at.max(1)),
        }
        if b.is_empty() {
            break;
        }
    }
    b
}

#[test]
fn fuzzed_pickles_never_panic() {
    let base = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch/built-two-streams.pickle"),
    )
    .unwrap();
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let (mut cases, mut refused) = (0u64, 0u64);
    for _ in 0..4_000 {
        let p = random_program(&mut rng);
        refused += read_must_not_panic(&p, "a random program").is_err() as u64;
        cases += 1;
    }
    for _ in 0..4_000 {
        let p = mutated(&base, &mut rng);
        refused += read_must_not_panic(&p, "a mutated snapshot").is_err() as u64;
        cases += 1;
    }
    // Nesting just under and over the bound, of each kind.
    for depth in [99usize, 100, 102, 1000] {
        let mut lists = b"\x80\x04".to_vec();
        lists.extend(std::iter::repeat_n(b']', depth));
        lists.extend(std::iter::repeat_n(b'a', depth - 1));
        lists.push(b'.');
        let r = read_must_not_panic(&lists, "nested lists");
        assert!(
            r.as_ref()
                .is_err_and(|e| e.contains("nest") == (depth > 100)),
            "{depth}: {r:?}"
        );
        cases += 1;
    }
    assert_eq!(cases, 8_004);
    // Nearly every random case is refused; the unchanged snapshot reads.
    assert!(refused > 7_000, "{refused}");
    assert!(read_must_not_panic(&base, "the snapshot").is_ok());
}

/// A JSON snapshot with `traces` (each a list of entry objects).
fn json_snapshot(traces: &[Vec<serde_json::Value>]) -> String {
    serde_json::json!({ "segments": [], "device_traces": traces }).to_string()
}

#[test]
fn more_devices_than_the_bound_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let n = torch::MAX_DEVICES + 1;
    let text = json_snapshot(&vec![Vec::new(); n]);
    let path = tmp.path().join("many.json");
    std::fs::write(&path, text).unwrap();
    let r = headroom(tmp.path(), &["replay", path.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("at most 64"), "{}", r.stderr);
    // The same as a pickle (a list of 65 empty lists).
    let mut p = b"\x80\x04}(\x8c\x08segments]\x8c\x0ddevice_traces](".to_vec();
    p.extend(std::iter::repeat_n(b']', n));
    p.extend_from_slice(b"eu.");
    let e = read_must_not_panic(&p, "many devices").unwrap_err();
    assert!(e.contains(&format!("holds {n} devices")), "{e}");
}

#[test]
fn a_free_of_another_size_and_time_running_backwards_are_reported_with_their_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let e = |action: &str, addr: u64, size: u64, t: i64| serde_json::json!({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t});
    let a = 0x7f00_0000_0000u64;
    let seg = 2 << 20;
    let trace = vec![
        e("segment_alloc", a, seg, 100),
        e("alloc", a, 1024, 101),
        e("free_requested", a, 512, 102),
        e("free_completed", a, 512, 103),
        e("alloc", a, 4096, 90),
        e("free_requested", a, 4096, 104),
        e("free_completed", a, 4096, 105),
    ];
    let path = tmp.path().join("odd.json");
    std::fs::write(&path, json_snapshot(&[trace])).unwrap();
    let r = headroom(tmp.path(), &["replay", path.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("2 entries contradict the trace before them"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(
            "entry 2: free_requested of 0x7f0000000000 with 512 bytes, allocated with 1024 bytes"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("entry 4: time runs backwards (90 µs, after 103 µs)"),
        "{}",
        r.stdout
    );
}

#[test]
fn replaying_a_snapshot_into_a_full_stdout_is_an_error_not_a_panic() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch/built-oom.pickle");
    let full = match std::fs::OpenOptions::new().write(true).open("/dev/full") {
        Ok(full) => full,
        Err(e) => {
            crate::common::skip::missing("snapshot_fuzz: /dev/full", &e.to_string());
            return;
        }
    };
    for json in [false, true] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"));
        cmd.arg("replay").arg(&fixture);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.stdout(full.try_clone().unwrap()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("cannot write to standard output"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
