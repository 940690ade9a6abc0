//! `headroom diff` on two snapshots written by the project's snapshot writer
//! (`tests/common/snapshot_writer.rs`) that differ by a known allocation at a known line.

use std::path::Path;

use crate::common::snapshot_writer::{NamedFrame, SynthEntry, write_snapshot_with_stacks};
use crate::common::{MIB, headroom, schema};

const TORCH: &str = "/usr/lib/python3.11/site-packages/torch";

fn frame(id: u32, name: &'static str, filename: &'static str, line: i64) -> NamedFrame {
    NamedFrame {
        id,
        name,
        filename,
        line,
    }
}

/// Stacks, innermost first: 0 parameters moved by `.to()`, 1 an activation at block.py:77,
/// 2 the planted activation at attn.py:88, 3 optimizer state, 4 a backward node.
fn stacks() -> Vec<Vec<NamedFrame>> {
    let module: &'static str = Box::leak(format!("{TORCH}/nn/modules/module.py").into_boxed_str());
    let adam: &'static str = Box::leak(format!("{TORCH}/optim/adam.py").into_boxed_str());
    let call = frame(1, "_call_impl", module, 1747);
    let step = frame(2, "step", "/home/user/model/train.py", 31);
    vec![
        vec![
            frame(3, "convert", module, 1326),
            frame(4, "_apply", module, 900),
            frame(5, "to", module, 1340),
            frame(6, "main", "/home/user/model/train.py", 20),
        ],
        vec![
            frame(7, "forward", "/home/user/model/block.py", 77),
            call,
            step,
        ],
        vec![
            frame(8, "forward", "/home/user/model/attn.py", 88),
            call,
            step,
        ],
        vec![frame(9, "_init_group", adam, 140), step],
        vec![frame(
            10,
            "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)",
            "",
            0,
        )],
    ]
}

/// A training step: parameters, two activations (the second `act2` bytes), the planted
/// allocation if any, a gradient and optimizer state; then the activations and the gradient
/// freed. Each allocation gets its own segment first.
fn write(path: &Path, act2: u64, planted: Option<u64>) {
    let mut allocs = vec![(1024 * MIB, 0), (256 * MIB, 1), (act2, 1)];
    if let Some(p) = planted {
        allocs.push((p, 2));
    }
    allocs.extend([(64 * MIB, 4), (128 * MIB, 3)]);
    let mut entries = Vec::new();
    let mut t = 1_760_000_000_000_000i64;
    let mut e = |action, addr, size, stack| {
        t += 5;
        entries.push(SynthEntry {
            action,
            addr,
            size,
            time_us: t,
            stack,
        });
    };
    for (i, &(size, stack)) in allocs.iter().enumerate() {
        let addr = 0x7f00_0000_0000 + i as u64 * (4 << 30);
        e("segment_alloc", addr, size, stack);
        e("alloc", addr, size, stack);
    }
    for (i, &(size, stack)) in allocs.iter().enumerate() {
        if matches!(stack, 1 | 2 | 4) {
            let addr = 0x7f00_0000_0000 + i as u64 * (4 << 30);
            e("free_requested", addr, size, stack);
            e("free_completed", addr, size, stack);
        }
    }
    let f = std::fs::File::create(path).unwrap();
    write_snapshot_with_stacks(std::io::BufWriter::new(f), entries.into_iter(), &stacks()).unwrap();
}

#[test]
fn the_planted_line_comes_first_with_its_exact_bytes_and_category() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.pickle"), dir.path().join("b.pickle"));
    write(&a, 128 * MIB, None);
    write(&b, 96 * MIB, Some(512 * MIB));
    let o = headroom(dir.path(), &["diff", "a.pickle", "b.pickle", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    schema::check("diff", &j, "headroom diff --json");

    let first = &j["lines"][0];
    assert_eq!(first["name"], "attn.py:88 (forward)");
    assert_eq!(first["path"], "/home/user/model/attn.py:88 (forward)");
    assert_eq!(first["delta_bytes"], 536_870_912);
    assert_eq!(first["a_bytes"], 0);
    assert_eq!(first["category"], "activations");
    let second = &j["lines"][1];
    assert_eq!(second["name"], "block.py:77 (forward)");
    assert_eq!(second["delta_bytes"], -(32 * MIB as i64));
    assert_eq!(j["lines"].as_array().unwrap().len(), 2, "{:#}", j["lines"]);

    // Peaks: A holds 1 GiB + 256 + 128 + 64 + 128 MiB at its peak, B 480 MiB more.
    let a_peak = (1024 + 256 + 128 + 64 + 128) * MIB;
    let fig = |name: &str| {
        j["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(fig("allocated_peak_bytes")["a"], a_peak);
    assert_eq!(fig("allocated_peak_bytes")["delta"], 480 * MIB);
    assert_eq!(fig("reserved_peak_bytes")["delta"], 480 * MIB);
    assert_eq!(fig("segment_allocs")["a"], 5);
    assert_eq!(fig("segment_allocs")["delta"], 1);

    let cat = |name: &str| {
        j["by_category"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {:#}", j["by_category"]))
            .clone()
    };
    assert_eq!(cat("activations")["delta_bytes"], 480 * MIB);
    assert_eq!(cat("activations")["b_bytes"], (256 + 96 + 512) * MIB);
    assert_eq!(cat("parameters")["a_bytes"], 1024 * MIB);
    assert_eq!(cat("parameters")["delta_bytes"], 0);
    assert_eq!(cat("optimizer_state")["b_bytes"], 128 * MIB);
    assert_eq!(cat("gradients")["b_bytes"], 64 * MIB);

    let new = &j["largest_new_allocation"];
    assert_eq!(new["requested_bytes"], 536_870_912);
    assert_eq!(new["origin"], "attn.py:88 (forward)");
    assert_eq!(new["category"], "activations");

    // The text and the Markdown name the same line first.
    let t = headroom(dir.path(), &["diff", "a.pickle", "b.pickle"]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    let lines = t.stdout.split("changed most\n").nth(1).unwrap();
    // A table as every command prints them: its header, then the line that changed most.
    assert!(lines.starts_with("source line "), "{}", t.stdout);
    assert!(
        lines
            .lines()
            .nth(1)
            .unwrap()
            .contains("attn.py:88 (forward)")
            && lines.contains("+536870912 B"),
        "{}",
        t.stdout
    );
    let m = headroom(dir.path(), &["diff", "a.pickle", "b.pickle", "--markdown"]);
    assert!(
        m.stdout.contains(
            "| attn.py:88 (forward) | activations | 0 B | 512.00 MiB | +512.00 MiB | +536870912 |"
        ),
        "{}",
        m.stdout
    );
}

#[test]
fn two_imported_folders_compare_by_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("a.pickle"), 128 * MIB, None);
    write(&dir.path().join("b.pickle"), 96 * MIB, Some(512 * MIB));
    for s in ["a", "b"] {
        let o = headroom(
            dir.path(),
            &[
                "import",
                "torch",
                &format!("{s}.pickle"),
                "--out",
                &format!("i{s}"),
            ],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    let o = headroom(dir.path(), &["diff", "ia", "ib", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    schema::check("diff", &j, "headroom diff --json of two imports");
    assert_eq!(j["a"]["kind"], "import");
    assert_eq!(j["lines"][0]["name"], "attn.py:88 (forward)");
    assert_eq!(j["lines"][0]["delta_bytes"], 536_870_912);
    // A folder keeps lines, not stacks.
    assert_eq!(j["lines"][0]["category"], "unknown");
    assert!(j["largest_new_allocation"].is_null());
}

#[test]
fn a_side_that_cannot_be_read_is_named_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "not a snapshot").unwrap();
    let o = headroom(dir.path(), &["diff", "a.txt", "missing.pickle"]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("a.txt: not a PyTorch memory snapshot"),
        "{}",
        o.stderr
    );
    write(&dir.path().join("b.pickle"), MIB, None);
    let o = headroom(dir.path(), &["diff", "b.pickle", "missing.pickle"]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("missing.pickle: no such file"),
        "{}",
        o.stderr
    );
}

/// The README's example of `diff` is what the command prints.
#[test]
fn the_readmes_diff_example_is_what_diff_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let cmd = "$ headroom diff ";
    let block = readme
        .split(cmd)
        .nth(1)
        .expect("the README shows headroom diff")
        .split("```")
        .next()
        .unwrap();
    let mut lines = block.lines();
    let args: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let mut all = vec!["diff"];
    all.extend(&args);
    let o = headroom(root, &all);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for line in lines.filter(|l| !l.is_empty() && *l != "...") {
        assert!(o.stdout.contains(line), "{line:?} is not in\n{}", o.stdout);
    }
}
