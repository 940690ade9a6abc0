//! `.ci/module-graph`: the tree as it stands keeps the layer order docs/architecture.md states,
//! and the check names an upward edge, a two-way import and a module in no layer.

use std::path::Path;
use std::process::Command;

/// `.ci/module-graph ARGS` from the repository root: (exit code, stdout, stderr), or `None`
/// with the reason printed when python3 is missing (a failure under CI=true).
fn module_graph(args: &[&str]) -> Option<(i32, String, String)> {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = match Command::new("python3")
        .arg(Path::new(root).join(".ci/module-graph"))
        .args(args)
        .current_dir(root)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "python3 is needed for .ci/module-graph under CI=true: {e}"
            );
            eprintln!("skipped: python3 is not installed ({e})");
            return None;
        }
    };
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn the_tree_keeps_the_documented_layer_order() {
    let Some((code, out, err)) = module_graph(&[]) else {
        return;
    };
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("layers, from the bottom (docs/architecture.md):\n  1. "),
        "{out}"
    );
    assert!(
        out.contains("none upward, no two-way import, no cycle"),
        "{out}"
    );
    // The producers sit above the folder they write and below the commands.
    let layer_of = |m: &str| {
        out.lines()
            .find(|l| {
                l.split(". ")
                    .nth(1)
                    .is_some_and(|ms| ms.split(", ").any(|x| x == m))
            })
            .and_then(|l| l.trim().split('.').next()?.parse::<u32>().ok())
            .unwrap_or_else(|| panic!("{m} in no layer: {out}"))
    };
    for producer in ["run", "watch", "import"] {
        assert!(layer_of("folder") < layer_of(producer), "{out}");
        assert!(layer_of(producer) < layer_of("commands"), "{out}");
    }
    assert!(layer_of("report") < layer_of("folder"), "{out}");
}

#[test]
fn an_upward_edge_a_two_way_import_and_a_module_in_no_layer_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "pub mod low;\npub mod high;\npub mod extra;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("low.rs"),
        "use crate::high::Up;\npub struct Down;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("high.rs"),
        "use crate::low::Down;\npub struct Up;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("extra.rs"),
        "// a comment naming crate::high is no edge\n",
    )
    .unwrap();
    let doc = tmp.path().join("architecture.md");
    std::fs::write(
        &doc,
        "# x\n\n## The module graph\n\n1. `low` (`high` in a remark is no layer's)\n2. `high`\n\n## Next\n\n3. `extra`\n",
    )
    .unwrap();
    let Some((code, out, err)) = module_graph(&[
        "--src",
        src.to_str().unwrap(),
        "--doc",
        doc.to_str().unwrap(),
    ]) else {
        return;
    };
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("  1. low\n  2. high\n"), "{out}");
    assert!(err.contains("module graph of src/: 4 problem(s)"), "{err}");
    assert!(err.contains("module extra is in no layer"), "{err}");
    assert!(
        err.contains("upward edge: low (layer 1) -> high (layer 2), 1 paths"),
        "{err}"
    );
    assert!(
        err.contains("two-way: high -> low (1 paths), low -> high (1 paths)"),
        "{err}"
    );
    assert!(
        err.contains("cycle among {high, low}: high -> low, low -> high"),
        "{err}"
    );
}
