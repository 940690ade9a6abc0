//! The timeline plot as a person reads it: no label covers another label or a mark, every
//! phase is named, lines that coincide all stay visible, a 1 Hz poll equal to idle is said
//! once, graph memory is drawn, fast churn is a band; and the SVG of a fixture run, byte for
//! byte (regenerate with `cargo test --test suite -- --ignored --exact reports::regenerate`).

use std::path::{Path, PathBuf};

use crate::common::*;
use headroom::report::plot::labels::Box2;
use headroom::report::plot::scene::{Scene, Shape};
use headroom::report::rundata::RunData;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs a workload (a shipped path or a written file) on `profile` and lays out its plot.
fn plot_of(dir: &Path, wl: &Path, profile: &str) -> (Scene, RunData) {
    let out = dir.join(format!(
        "out-{}-{profile}",
        wl.file_stem().unwrap().to_string_lossy()
    ));
    let r = headroom(
        &root(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            profile,
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
    );
    assert!(r.code <= 2, "{}", r.stderr);
    let run = RunData::load(&out).unwrap();
    (headroom::report::plot::scene(&run), run)
}

/// Every text inside the plot area (not the title, axes or legend), with its box and group.
fn labels(scene: &Scene) -> Vec<(String, String, Box2)> {
    let mut v = Vec::new();
    for g in &scene.groups {
        if matches!(g.class, "title" | "axis" | "legend") {
            continue;
        }
        for s in &g.shapes {
            if let Shape::Text {
                x,
                y,
                text,
                size,
                anchor,
                ..
            } = s
            {
                v.push((
                    g.id.clone(),
                    text.clone(),
                    Box2::of_text(*x, *y, text, *size, *anchor),
                ));
            }
        }
    }
    v
}

fn assert_no_label_overlaps(scene: &Scene, what: &str) {
    let ls = labels(scene);
    for (i, a) in ls.iter().enumerate() {
        for b in &ls[i + 1..] {
            assert!(
                a.2.overlap(&b.2) < 1.0,
                "{what}: {:?} ({}) covers {:?} ({})",
                a.1,
                a.0,
                b.1,
                b.0
            );
        }
    }
}

fn group<'s>(scene: &'s Scene, id: &str) -> Option<&'s headroom::report::plot::scene::Group> {
    scene.groups.iter().find(|g| g.id == id)
}

#[test]
fn labels_cover_neither_labels_nor_marks() {
    let tmp = tempfile::tempdir().unwrap();
    let frag = root().join("workloads/oom/fragmentation.toml");
    let (scene, _) = plot_of(tmp.path(), &frag, "tiny-4g");
    assert_no_label_overlaps(&scene, "fragmentation");
    // The OOM's cross sits on the device total line: the total's name moved off it.
    let oom = group(&scene, "mark-oom-1").unwrap();
    let cross = oom
        .shapes
        .iter()
        .find_map(|s| match s {
            // A diagonal of the cross (the OOM's dashed line is vertical).
            Shape::Path { points, .. }
                if points.len() == 2
                    && points[0].0 != points[1].0
                    && points[0].1 != points[1].1 =>
            {
                Some((
                    (points[0].0 + points[1].0) / 2.0,
                    (points[0].1 + points[1].1) / 2.0,
                ))
            }
            _ => None,
        })
        .unwrap();
    let mark = Box2 {
        x0: cross.0 - 6.0,
        y0: cross.1 - 6.0,
        x1: cross.0 + 6.0,
        y1: cross.1 + 6.0,
    };
    for (id, text, b) in labels(&scene) {
        assert!(
            b.overlap(&mark) == 0.0,
            "{text:?} ({id}) covers the OOM mark"
        );
    }

    let serving = root().join("workloads/serving.toml");
    let (scene, run) = plot_of(tmp.path(), &serving, "h200");
    assert_no_label_overlaps(&scene, "serving");
    // Every phase is named, the short ones too.
    let texts: Vec<String> = group(&scene, "phases")
        .unwrap()
        .shapes
        .iter()
        .filter_map(|s| match s {
            Shape::Text { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    for p in run.summary.phases() {
        assert!(
            texts.iter().any(|t| *t == p.name
                || (t.ends_with('…') && p.name.starts_with(t.trim_end_matches('…')))),
            "phase {:?} has no label: {texts:?}",
            p.name
        );
    }
}

#[test]
fn a_poll_equal_to_idle_is_one_line_and_coinciding_lines_stay_visible() {
    let tmp = tempfile::tempdir().unwrap();
    let frag = root().join("workloads/oom/fragmentation.toml");
    let (scene, run) = plot_of(tmp.path(), &frag, "tiny-4g");
    let idle = run.summary.idle_after().unwrap().device_used_bytes;
    assert_eq!(
        run.summary.peaks().polled["1hz"].peaks["device_used_bytes"],
        idle
    );
    assert!(
        group(&scene, "line-poll-1hz").is_none(),
        "no second line on the idle line"
    );
    let idle_texts: Vec<String> = labels(&scene)
        .into_iter()
        .filter(|l| l.0 == "mark-idle")
        .map(|l| l.1)
        .collect();
    assert_eq!(
        idle_texts,
        ["idle: 256.00 MiB used — a 1 Hz and a 10 Hz poll saw no more"]
    );
    assert!(
        group(&scene, "mark-poll-1hz").is_some(),
        "the poll's tick is still marked"
    );

    // Reserved, allocated and own bytes are equal while the device fills: each is drawn
    // narrower than the one beneath it, so all three colours show.
    let width = |id: &str| {
        group(&scene, id)
            .unwrap()
            .shapes
            .iter()
            .find_map(|s| match s {
                Shape::Path {
                    stroke: Some(st), ..
                } => Some(st.width),
                _ => None,
            })
            .unwrap()
    };
    let order: Vec<&str> = scene
        .groups
        .iter()
        .map(|g| g.id.as_str())
        .filter(|id| id.starts_with("series-"))
        .collect();
    let pos = |id: &str| order.iter().position(|x| *x == id).unwrap();
    let layers = [
        "series-alloc_reserved_bytes",
        "series-alloc_allocated_bytes",
        "series-own_bytes",
    ];
    for w in layers.windows(2) {
        assert!(pos(w[0]) < pos(w[1]), "{order:?}");
        assert!(width(w[0]) > width(w[1]) + 1.0, "{} over {}", w[1], w[0]);
    }
}

#[test]
fn graph_memory_is_drawn_and_churn_is_a_band() {
    let tmp = tempfile::tempdir().unwrap();
    let (scene, _) = plot_of(tmp.path(), &root().join("workloads/graphs.toml"), "tiny-4g");
    for id in ["series-graph_reserved_bytes", "series-graph_used_bytes"] {
        assert!(group(&scene, id).is_some(), "{id}");
    }
    assert_no_label_overlaps(&scene, "graphs");

    let wl = workload(
        tmp.path(),
        "churn",
        "[[phase]]\nname = \"hold\"\nsteps = [{ op = \"allocate\", name = \"w\", size = \"1GiB\" }, { op = \"sleep\", for = \"20ms\" }]\n\n[[phase]]\nname = \"churn\"\nsteps = [{ op = \"repeat\", times = 3000, steps = [{ op = \"allocate\", name = \"t\", size = \"64MiB\" }, { op = \"free\", name = \"t\" }] }]\n",
    );
    let (scene, _) = plot_of(tmp.path(), &wl, "tiny-4g");
    let used = group(&scene, "series-device_used_bytes").unwrap();
    assert!(
        used.shapes.iter().any(|s| matches!(s, Shape::Band { .. })),
        "the churn is drawn as a band"
    );
    // Where it is a band the line stops: no wall of vertical strokes.
    let corners: usize = used
        .shapes
        .iter()
        .map(|s| match s {
            Shape::Path { points, .. } => points.len(),
            _ => 0,
        })
        .sum();
    assert!(corners < 200, "{corners} corners");
}

#[test]
fn the_fixture_plot_matches_its_svg_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tiny-4g");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["summary.json", "timeline.csv", "events.csv"] {
        std::fs::copy(
            root().join("tests/fixtures/runs/tiny-4g").join(f),
            dir.join(f),
        )
        .unwrap();
    }
    let r = headroom(tmp.path(), &["report", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("timeline.svg")).unwrap();
    let snap = root().join("tests/fixtures/snapshots/tiny-4g.timeline.svg");
    let expected = std::fs::read_to_string(&snap).unwrap();
    assert!(
        svg == expected,
        "{} differs from the snapshot; regenerate and review it",
        snap.display()
    );
}

/// The fragmentation scenario's plot shows the evidence: the largest free block drawn next to
/// reserved and allocated and named at the OOM against what was asked; own bytes lifted off
/// the allocator's line it equals (the legend says so); the 10 Hz poll said; every SVG column
/// tooltip gives the exact time and bytes of its reading. A small run on a large device says
/// where the device total and the floor are.
#[test]
fn the_fragmentation_plot_shows_the_largest_free_block_and_tooltips_give_each_reading() {
    let dir = tempfile::tempdir().unwrap();
    let (scene, run) = plot_of(
        dir.path(),
        &root().join("workloads/oom/fragmentation.toml"),
        "tiny-4g",
    );
    for id in [
        "series-alloc_largest_free_bytes",
        "series-alloc_reserved_bytes",
        "series-alloc_allocated_bytes",
        "mark-largest-free",
        "hover-readings",
    ] {
        assert!(group(&scene, id).is_some(), "no {id}");
    }
    let oom = &run.summary.ooms()[0];
    let largest = run
        .timeline
        .points(headroom::record::View::AllocLargestFree)
        .take_while(|(t, _)| *t <= oom.t_ns)
        .last()
        .unwrap()
        .1;
    assert_eq!(
        largest,
        18 * MIB,
        "nine 2 MiB blocks freed in a 20 MiB segment"
    );
    let texts = |id: &str| -> Vec<String> {
        group(&scene, id)
            .unwrap()
            .shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Text { text, .. } => Some(text.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        texts("mark-largest-free"),
        ["largest free block 18.00 MiB < 20.00 MiB asked"]
    );
    let legend = texts("legend").join("\n");
    assert!(
        legend.contains("own_bytes — own bytes (this run, from the driver) (drawn 3 px higher: equal to alloc_reserved_bytes on 100% of rows)"),
        "{legend}"
    );
    assert!(
        legend.contains("peak a 10 Hz poll would report"),
        "{legend}"
    );
    assert!(
        texts("mark-idle")[0].ends_with("a 1 Hz and a 10 Hz poll saw no more"),
        "{:?}",
        texts("mark-idle")
    );
    // The tooltips: one per run of columns showing one reading, each with exact bytes; the
    // column over the OOM's instant holds its device free.
    let hovers: Vec<&String> = group(&scene, "hover-readings")
        .unwrap()
        .shapes
        .iter()
        .filter_map(|s| match s {
            Shape::Hover { title, .. } => Some(title),
            _ => None,
        })
        .collect();
    assert!(
        hovers.len() > 100 && hovers.len() <= 600,
        "{}",
        hovers.len()
    );
    let tl = &run.timeline;
    let last = tl.len() - 1;
    let want = format!(
        "(t_ns {}), {} reading",
        tl.t_ns[last],
        tl.source[last].as_str()
    );
    assert!(
        hovers.last().unwrap().contains(&want),
        "{}",
        hovers.last().unwrap()
    );
    let at_oom = hovers
        .iter()
        .find(|h| h.contains(&format!("(t_ns {})", oom.t_ns)))
        .unwrap_or_else(|| panic!("no tooltip for the OOM's reading at {}", oom.t_ns));
    assert!(
        at_oom.contains(&format!("device_free_bytes: {} B", oom.device_free_bytes)),
        "{at_oom}"
    );
    let svg = headroom::report::plot::svg::render(&scene);
    assert!(svg.contains("<title>t = "), "the SVG carries the tooltips");
    // The rendered example in docs/ shows the same evidence.
    let example = std::fs::read_to_string(root().join("docs/fragmentation-timeline.svg")).unwrap();
    for want in [
        "largest free block 18.00 MiB &lt; 20.00 MiB asked",
        "id=\"hover-readings\"",
        "id=\"series-alloc_largest_free_bytes\"",
    ] {
        assert!(
            example.contains(want),
            "docs/fragmentation-timeline.svg lacks {want}"
        );
    }
    assert!(
        !headroom::report::plot::png::render(&scene)
            .unwrap()
            .is_empty()
    );

    let (scene, _) = plot_of(
        dir.path(),
        &root().join("workloads/quickstart.toml"),
        "h200",
    );
    assert_eq!(
        texts_of(&scene, "mark-off-scale"),
        ["↑ device total 139.80 GiB above this scale, floor at 138.80 GiB used"]
    );
    // On tiny-4g the floor (256 MiB kept free) is on the scale, and drawn.
    let big = workload(
        dir.path(),
        "near-floor",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"a\", size = \"3GiB\" }]\n",
    );
    let (scene, _) = plot_of(dir.path(), &big, "tiny-4g");
    assert_eq!(
        texts_of(&scene, "line-floor"),
        ["floor 3.75 GiB used (256.00 MiB kept free)"]
    );
    assert!(group(&scene, "line-device-total").is_some());
}

fn texts_of(scene: &Scene, id: &str) -> Vec<String> {
    group(scene, id)
        .unwrap_or_else(|| panic!("no {id}"))
        .shapes
        .iter()
        .filter_map(|s| match s {
            Shape::Text { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}
