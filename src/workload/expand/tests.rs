//! Expansion of steps and patterns, and the checks that refuse bad workloads.
use super::*;
use crate::workload::Workload;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn load(text: &str) -> Result<Workload, WorkloadError> {
    Workload::from_toml(text, Path::new("w.toml"), 4 * GIB)
}

fn ops(w: &Workload, phase: usize) -> Vec<String> {
    w.phases[phase]
        .actions
        .iter()
        .map(|p| match &p.action {
            Action::Allocate { name, bytes, .. } => format!("+{name}:{bytes}"),
            Action::Free { name } => format!("-{name}"),
            Action::Sleep { duration_ns } => format!("z{duration_ns}"),
            Action::Touch { name, .. } => format!("t{name}"),
            other => other.op().to_string(),
        })
        .collect()
}

const HEAD: &str = "[workload]\nname = \"t\"\n";

#[test]
fn allocate_count_and_group_free() {
    let w = load(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [\n {{ op = \"allocate\", name = \"w\", size = \"1GiB\", count = 3 }},\n {{ op = \"free\", name = \"w[1]\" }},\n {{ op = \"free\", name = \"w\" }},\n]\n"
        ))
        .unwrap();
    assert_eq!(
        ops(&w, 0),
        [
            "+w[0]:1073741824",
            "+w[1]:1073741824",
            "+w[2]:1073741824",
            "-w[1]",
            "-w[0]",
            "-w[2]"
        ]
    );
    let labels: Vec<&str> = w.phases[0]
        .actions
        .iter()
        .map(|a| a.label.as_str())
        .collect();
    assert_eq!(labels, ["s1.1", "s1.2", "s1.3", "s2", "s3.1", "s3.2"]);
}

#[test]
fn weights_split_and_touch() {
    let w = load(&format!("{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"weights\", total = \"10MiB\", tensors = 3 }}]\n")).unwrap();
    let o = ops(&w, 0);
    assert_eq!(o.len(), 6);
    assert_eq!(o[0], format!("+weights[0]:{}", 10 * MIB / 3));
    assert_eq!(
        o[4],
        format!("+weights[2]:{}", 10 * MIB - 2 * (10 * MIB / 3))
    );
    assert_eq!(o[1], "tweights[0]");
    assert_eq!(w.planned_peak_bytes(), 10 * MIB);
}

#[test]
fn activations_train_peaks_at_the_turn() {
    let w = load(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"activations\", layers = 4, size = \"100MiB\", scratch = \"50MiB\" }}]\n"
        ))
        .unwrap();
    // Four outputs live plus one scratch at the first backward layer.
    assert_eq!(w.planned_peak_bytes(), 450 * MIB);
    let o = ops(&w, 0);
    assert_eq!(o.first().unwrap(), &format!("+act[0]:{}", 100 * MIB));
    assert_eq!(o.last().unwrap(), "-act[0]");
}

#[test]
fn activations_inference_holds_two_layers() {
    let w = load(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"activations\", layers = 5, size = \"100MiB\", mode = \"inference\" }}]\n"
        ))
        .unwrap();
    assert_eq!(w.planned_peak_bytes(), 200 * MIB);
    assert_eq!(ops(&w, 0).last().unwrap(), "-act[4]");
}

#[test]
fn workspace_is_short_lived() {
    let w = load(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"workspace\", size = \"1GiB\", repeats = 2, hold = \"5ms\", gap = \"1ms\" }}]\n"
        ))
        .unwrap();
    assert_eq!(
        ops(&w, 0),
        [
            "+ws:1073741824",
            "tws",
            "z5000000",
            "-ws",
            "z1000000",
            "+ws:1073741824",
            "tws",
            "z5000000",
            "-ws"
        ]
    );
    assert_eq!(w.planned_peak_bytes(), GIB);
}

#[test]
fn kv_grows_and_drains() {
    let w = load(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"kv\", requests = 3, block = \"1MiB\", blocks_per_request = 2, tick = \"0ns\" }}]\n"
        ))
        .unwrap();
    assert_eq!(
        ops(&w, 0),
        [
            "+kv.r0[0]:1048576",
            "+kv.r0[1]:1048576",
            "+kv.r1[0]:1048576",
            "-kv.r0[0]",
            "-kv.r0[1]",
            "+kv.r1[1]:1048576",
            "+kv.r2[0]:1048576",
            "-kv.r1[0]",
            "-kv.r1[1]",
            "+kv.r2[1]:1048576",
            "-kv.r2[0]",
            "-kv.r2[1]",
        ]
    );
    assert_eq!(w.planned_peak_bytes(), 3 * MIB);
}

#[test]
fn repeat_expands_in_order() {
    let w = load(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"repeat\", times = 2, steps = [{{ op = \"allocate\", name = \"x\", size = \"1MiB\" }}, {{ op = \"free\", name = \"x\" }}] }}]\n"
        ))
        .unwrap();
    assert_eq!(ops(&w, 0), ["+x:1048576", "-x", "+x:1048576", "-x"]);
}

fn error(text: &str) -> String {
    load(text).unwrap_err().to_string()
}

#[test]
fn bad_workloads_name_file_phase_step_and_key() {
    let e = error(&format!(
        "{HEAD}[[phase]]\nname = \"load\"\nsteps = [{{ op = \"allocate\", name = \"x\", sise = \"1GiB\" }}]\n"
    ));
    assert!(
        e.starts_with("w.toml: phase 1 (\"load\"), step 1 (allocate): "),
        "{e}"
    );
    assert!(e.contains("sise"), "{e}");
    let e = error(&format!(
        "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"allocate\", name = \"x\", size = \"12G\" }}]\n"
    ));
    assert!(e.contains("ambiguous") && e.contains("step 1"), "{e}");
    let e = error(&format!(
        "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"allocate\", name = \"x\", size = \"-1GiB\" }}]\n"
    ));
    assert!(e.contains("negative"), "{e}");
    let e = error(&format!(
        "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"free\", name = \"ghost\" }}]\n"
    ));
    assert!(
        e.contains("\"ghost\"") && e.contains("step 1 (free)"),
        "{e}"
    );
    let e = error(&format!(
        "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"allocate\", name = \"x\", size = \"5GiB\" }}]\n"
    ));
    assert!(e.contains("exceeds the device's total"), "{e}");
    let e = error(HEAD);
    assert!(e.contains("no phases"), "{e}");
    let e = error(&format!("phase = []\n{HEAD}"));
    assert!(e.contains("empty"), "{e}");
    let e = error(&format!(
        "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"allocate\", name = \"x\", size = \"1MiB\" }}, {{ op = \"verify\", name = \"x\" }}]\n"
    ));
    assert!(
        e.contains("never filled") && e.contains("step 2 (verify)"),
        "{e}"
    );
    let e = error(&format!(
        "{HEAD}[settings]\nsample_interval = \"1ms\"\ncolour = 1\n[[phase]]\nname = \"p\"\nsteps = [{{ op = \"sleep\", for = \"1ms\" }}]\n"
    ));
    assert!(e.contains("[settings]") && e.contains("colour"), "{e}");
    let e = error(&format!(
        "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"explode\" }}]\n"
    ));
    assert!(e.contains("explode"), "{e}");
    let e = error("[workload\nname = 1");
    assert!(e.contains("line 1") && e.contains("not valid TOML"), "{e}");
}
