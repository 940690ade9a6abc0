//! Expansion of steps and patterns, and the checks that refuse bad workloads.
use super::*;
use crate::workload::Workload;
use std::path::Path;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn load(text: &str) -> Result<Workload, WorkloadError> {
    Workload::from_toml(text, Path::new("w.toml"), 4 * GIB)
}

fn ops(w: &Workload, phase: usize) -> Vec<String> {
    w.phase_actions(phase)
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
    let actions = w.phase_actions(0);
    let labels: Vec<&str> = actions.iter().map(|a| a.label.as_str()).collect();
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

fn load_rank(text: &str, index: u32, count: u32) -> Result<Workload, WorkloadError> {
    let rank = crate::workload::Rank { index, count };
    Workload::from_toml_ranked(&rank.substitute(text), Path::new("w.toml"), 4 * GIB, rank)
}

fn driver_allocs(w: &Workload) -> Vec<(String, u64)> {
    w.actions()
        .filter_map(|(_, a)| match &a.action {
            Action::Allocate {
                name,
                bytes,
                via: crate::workload::step::ViaSpec::Driver,
                ..
            } => Some((name.clone(), *bytes)),
            _ => None,
        })
        .collect()
}

#[test]
fn comm_ring_holds_a_send_and_a_receive_buffer_per_channel_outside_the_allocator() {
    let text = format!(
        "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"comm\", name = \"nccl\", buffer = \"4MiB\", channels = 2, base = \"64MiB\" }}]\n"
    );
    let w = load_rank(&text, 3, 8).unwrap();
    assert_eq!(
        driver_allocs(&w),
        [
            ("nccl[0]".to_string(), 64 * MIB),
            ("nccl[1]".to_string(), 4 * MIB),
            ("nccl[2]".to_string(), 4 * MIB),
            ("nccl[3]".to_string(), 4 * MIB),
            ("nccl[4]".to_string(), 4 * MIB),
        ]
    );
    assert_eq!(w.planned_peak_bytes(), 80 * MIB);
    // One rank alone has no peer: only the base.
    assert_eq!(driver_allocs(&load_rank(&text, 0, 1).unwrap()).len(), 1);
}

#[test]
fn comm_all_to_all_grows_with_the_rank_count_and_frees_as_a_group() {
    let text = |ranks: &str| {
        format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [\n {{ op = \"comm\", topology = \"all_to_all\", buffer = \"2MiB\"{ranks} }},\n {{ op = \"free\", name = \"comm\" }},\n]\n"
        )
    };
    // Four ranks: three peers, a send and a receive buffer each.
    let w = load_rank(&text(""), 1, 4).unwrap();
    let a = driver_allocs(&w);
    assert_eq!(a.len(), 6);
    assert!(a.iter().all(|(_, b)| *b == 2 * MIB));
    assert_eq!(a[5].0, "comm[5]");
    assert_eq!(w.planned_peak_bytes(), 12 * MIB);
    assert_eq!(ops(&w, 0).iter().filter(|o| o.starts_with('-')).count(), 6);
    // rank_count in the file wins over the run's.
    let w = load_rank(&text(", rank_count = 8"), 1, 4).unwrap();
    assert_eq!(w.planned_peak_bytes(), 28 * MIB);
}

#[test]
fn comm_refuses_what_holds_nothing_or_names_a_rank_outside_it() {
    let one = format!(
        "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"comm\", buffer = \"2MiB\" }}]\n"
    );
    let e = load_rank(&one, 0, 1).unwrap_err().to_string();
    assert!(e.contains("holds nothing"), "{e}");
    let small = format!(
        "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"comm\", buffer = \"2MiB\", rank_count = 2 }}]\n"
    );
    let e = load_rank(&small, 3, 4).unwrap_err().to_string();
    assert!(
        e.contains("step 1 (comm)") && e.contains("rank 3 but the communicator has rank_count = 2"),
        "{e}"
    );
    let zero = small.replace("\"2MiB\"", "\"0B\"");
    assert!(
        load_rank(&zero, 0, 2)
            .unwrap_err()
            .to_string()
            .contains("above zero")
    );
}

#[test]
fn rank_placeholders_name_each_ranks_buffers() {
    let text = "[workload]\nname = \"r{rank}\"\n[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"kv.r{rank}of{rank_count}\", size = \"1MiB\" }]\n";
    let w = load_rank(text, 5, 8).unwrap();
    assert_eq!(w.name, "r5");
    assert_eq!(ops(&w, 0), ["+kv.r5of8:1048576"]);
}
