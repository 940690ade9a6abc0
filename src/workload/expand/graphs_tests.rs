//! The graph steps' expansion and checks.
use std::path::Path;

use crate::workload::Workload;
use crate::workload::expand::Action;

const GIB: u64 = 1 << 30;
const HEAD: &str = "[workload]\nname = \"t\"\n";

fn load(steps: &str) -> Result<Workload, String> {
    let text = format!("{HEAD}[[phase]]\nname = \"p\"\nsteps = [\n{steps}\n]\n");
    Workload::from_toml(&text, Path::new("w.toml"), 4 * GIB).map_err(|e| e.to_string())
}

fn ops(w: &Workload) -> Vec<String> {
    w.phase_actions(0)
        .iter()
        .map(|p| {
            let a = &p.action;
            let s = a.stream().map(|s| format!("@{s}")).unwrap_or_default();
            match a {
                Action::Replay { times, first, .. } => {
                    format!(
                        "{}:replay{times}{}{s}",
                        number(&p.label),
                        if *first { "!" } else { "" }
                    )
                }
                _ => format!(
                    "{}:{} {}{s}",
                    number(&p.label),
                    a.op(),
                    a.name().unwrap_or("")
                ),
            }
        })
        .collect()
}

/// A step id without its `s`, to keep the expectations below short.
fn number(id: &str) -> &str {
    id.strip_prefix('s').expect("step ids start with s")
}

const CAPTURE: &str = r#"{ op = "capture", graph = "g", stream = "s", steps = [
    { op = "allocate", name = "ws", size = "8MiB" },
    { op = "touch", name = "ws" },
    { op = "free", name = "ws" },
    { op = "allocate", name = "out", size = "1MiB" },
    { op = "fill", name = "out" },
  ] },"#;

#[test]
fn a_capture_records_nodes_on_its_stream_and_outputs_live_only_after_a_launch() {
    let w = load(&format!(
        r#"{CAPTURE}
  {{ op = "instantiate", graph = "g", auto_free = true }},
  {{ op = "replay", graph = "g", times = 3 }},
  {{ op = "verify", name = "out" }},
  {{ op = "replay", graph = "g" }},
  {{ op = "free", name = "out" }},
  {{ op = "destroy_graph", graph = "g" }},
  {{ op = "trim_graph_memory" }},"#
    ))
    .unwrap();
    assert_eq!(
        ops(&w),
        [
            "1.1:capture g@s",
            "1.2:allocate ws@s",
            "1.3:touch ws@s",
            "1.4:free ws@s",
            "1.5:allocate out@s",
            "1.6:fill out@s",
            "1.7:end_capture g@s",
            "2:instantiate g",
            "3.1:replay1!@s",
            "3.2:replay2@s",
            "4:verify out@main",
            "5:replay1@s",
            "6:free out@s",
            "7:destroy_graph g",
            "8:trim_graph_memory ",
        ]
    );
    assert!(matches!(
        w.phase_actions(0)[1].action,
        Action::GraphAllocate { bytes: 8388608, .. }
    ));
    assert!(matches!(
        w.phase_actions(0)[12].action,
        Action::GraphFree { .. }
    ));
}

fn error(steps: &str) -> String {
    load(steps).unwrap_err()
}

#[test]
fn capture_refusals_name_the_place() {
    let e = error(
        r#"{ op = "capture", graph = "g", stream = "default", steps = [{ op = "spin", for = "1ms" }] },"#,
    );
    assert!(
        e.starts_with("w.toml: phase 1 (\"p\"), step 1 (capture): ")
            && e.contains("legacy default stream"),
        "{e}"
    );
    let e = error(
        r#"{ op = "capture", graph = "g", stream = "s", steps = [{ op = "spin", for = "1ms", stream = "t" }] },"#,
    );
    assert!(
        e.contains("inner step 1 (spin)") && e.contains("every step runs on its stream \"s\""),
        "{e}"
    );
    let e = error(
        r#"{ op = "capture", graph = "g", stream = "s", steps = [{ op = "repeat", times = 2, steps = [{ op = "spin", for = "1ms", stream = "main" }] }] },"#,
    );
    assert!(e.contains("names stream \"main\""), "{e}");
    for (inner, why) in [
        (r#"{ op = "sleep", for = "1ms" }"#, "host time"),
        (
            r#"{ op = "synchronize" }"#,
            "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
        ),
        (
            r#"{ op = "allocate", name = "x", size = "1MiB", via = "driver" }"#,
            "cannot be captured",
        ),
        (
            r#"{ op = "stack", frame = "4KiB" }"#,
            "stack cannot be captured",
        ),
        (
            r#"{ op = "capture", graph = "h", stream = "s", steps = [] }"#,
            "cannot contain another capture",
        ),
    ] {
        let e = error(&format!(
            r#"{{ op = "capture", graph = "g", stream = "s", steps = [{inner}] }},"#
        ));
        assert!(e.contains(why), "{inner}: {e}");
    }
    let e = error(
        r#"{ op = "allocate", name = "w", size = "1MiB" },
  { op = "capture", graph = "g", stream = "s", steps = [{ op = "free", name = "w" }] },"#,
    );
    assert!(
        e.contains("free node can only free graph allocations"),
        "{e}"
    );
    let e = error(
        r#"{ op = "allocate", name = "w", size = "1MiB" },
  { op = "fill", name = "w" },
  { op = "capture", graph = "g", stream = "s", steps = [{ op = "verify", name = "w" }] },"#,
    );
    assert!(e.contains("verify reads its result back"), "{e}");
}

#[test]
fn replay_refusals() {
    let e = error(&format!(
        "{CAPTURE}\n  {{ op = \"replay\", graph = \"g\" }},"
    ));
    assert!(
        e.contains("step 2 (replay)") && e.contains("not instantiated"),
        "{e}"
    );
    let e = error(r#"{ op = "replay", graph = "nope" }"#);
    assert!(e.contains("has not been captured"), "{e}");
    let e = error(&format!(
        "{CAPTURE}\n  {{ op = \"instantiate\", graph = \"g\" }},\n  {{ op = \"destroy_graph\", graph = \"g\" }},\n  {{ op = \"replay\", graph = \"g\" }},"
    ));
    assert!(
        e.contains("step 4 (replay)") && e.contains("was destroyed"),
        "{e}"
    );
    let e = error(&format!(
        "{CAPTURE}\n  {{ op = \"instantiate\", graph = \"g\" }},\n  {{ op = \"instantiate\", graph = \"g\" }},"
    ));
    assert!(e.contains("already instantiated"), "{e}");
    // Without auto-free: the output of the first launch blocks the second.
    let e = error(&format!(
        "{CAPTURE}\n  {{ op = \"instantiate\", graph = \"g\" }},\n  {{ op = \"replay\", graph = \"g\" }},\n  {{ op = \"replay\", graph = \"g\" }},"
    ));
    assert!(
        e.contains("step 4 (replay)")
            && e.contains("\"out\" is")
            && e.contains("CUDA_ERROR_INVALID_VALUE"),
        "{e}"
    );
    let e = error(&format!(
        "{CAPTURE}\n  {{ op = \"instantiate\", graph = \"g\" }},\n  {{ op = \"replay\", graph = \"g\", times = 2 }},"
    ));
    assert!(e.contains("the second launch would fail"), "{e}");
    // Freeing the output first makes the relaunch legal.
    load(&format!(
            "{CAPTURE}\n  {{ op = \"instantiate\", graph = \"g\" }},\n  {{ op = \"replay\", graph = \"g\" }},\n  {{ op = \"free\", name = \"out\" }},\n  {{ op = \"replay\", graph = \"g\" }},"
        ))
        .unwrap();
    // The output does not exist before the first launch.
    let e = error(&format!(
        "{CAPTURE}\n  {{ op = \"instantiate\", graph = \"g\" }},\n  {{ op = \"touch\", name = \"out\" }},"
    ));
    assert!(e.contains("replay the graph first"), "{e}");
    // A captured kernel's buffer freed after the capture: the graph holds a stale address.
    let e = error(
        r#"{ op = "allocate", name = "w", size = "1MiB" },
  { op = "capture", graph = "g", stream = "s", steps = [{ op = "touch", name = "w" }] },
  { op = "instantiate", graph = "g" },
  { op = "free", name = "w" },
  { op = "replay", graph = "g" },"#,
    );
    assert!(
        e.contains("\"w\", which was freed after the capture"),
        "{e}"
    );
}

#[test]
fn the_graphs_pattern_captures_samples_alone_then_each_batch_size() {
    let w = load(
            r#"{ op = "graphs", name = "cg", stream = "s", batch_sizes = [1, 4, 2], layers = 1, workspace_per_batch = "1MiB", output_per_batch = "64KiB", replays = 2 },"#,
        )
        .unwrap();
    let o = ops(&w);
    let captures: Vec<&String> = o.iter().filter(|s| s.contains(":capture ")).collect();
    assert_eq!(
        captures
            .iter()
            .map(|s| s.split(' ').nth(1).unwrap())
            .collect::<Vec<_>>(),
        [
            "cg.sample[1]@s",
            "cg.sample[4]@s",
            "cg[4]@s",
            "cg[2]@s",
            "cg[1]@s"
        ]
    );
    assert!(o.iter().filter(|s| s.contains("trim_graph_memory")).count() == 2);
    assert!(o.last().unwrap().contains("graphs_report cg"), "{o:?}");
    let e = error(
        r#"{ op = "graphs", name = "cg", stream = "s", batch_sizes = [1, 2], workspace_per_batch = "1MiB", output_per_batch = "64KiB", auto_free = false },"#,
    );
    assert!(e.contains("replays > 1 needs auto_free = true"), "{e}");
    let e = error(
        r#"{ op = "graphs", name = "cg", stream = "s", batch_sizes = [1, 1], workspace_per_batch = "1MiB" },"#,
    );
    assert!(e.contains("appears twice"), "{e}");
    let e = error(
        r#"{ op = "graphs", name = "cg", stream = "s", batch_sizes = [8], workspace_per_batch = "1MiB" },"#,
    );
    assert!(e.contains("two distinct sample batch sizes"), "{e}");
    let e = error(
        r#"{ op = "graphs", name = "cg", stream = "s", batch_sizes = [1, 2], workspace_per_batch = "1GiB", layers = 1, samples = [1, 8] },"#,
    );
    assert!(
        e.contains("sample batch size 8") && e.contains("exceeds"),
        "{e}"
    );
}
