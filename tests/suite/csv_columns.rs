//! One column, one type, whoever writes the file: polars, with its default settings, reads the
//! `timeline.csv`, `events.csv` and `alloc-log.csv` of a run, a watch and an import, infers
//! each column's type per file, and concatenates the files of one name.

use std::path::{Path, PathBuf};

use crate::common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The three producers' folders: a run of the quickstart, a watch on the simulator replaying
/// a usage script, and an import of a two-stream snapshot (a stream other than the default).
fn three_folders(dir: &Path) -> [PathBuf; 3] {
    let run = dir.join("run");
    let o = headroom(
        dir,
        &[
            "run",
            root().join("workloads/quickstart.toml").to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--out",
            run.to_str().unwrap(),
            "-q",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let script = dir.join("usage.toml");
    std::fs::write(
        &script,
        "usage = [\n  { at = \"0ms\", job_used = \"0B\" },\n  \
         { at = \"20ms\", job_used = \"512MiB\" },\n]\n",
    )
    .unwrap();
    let watch = dir.join("watch");
    let o = headroom(
        dir,
        &[
            "watch",
            "--profile",
            "tiny-4g",
            "--sim-script",
            script.to_str().unwrap(),
            "--out",
            watch.to_str().unwrap(),
            "-q",
            "--",
            "sleep",
            "0.1",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let import = dir.join("import");
    let snapshot = root().join("tests/fixtures/torch/built-two-streams.pickle");
    let o = headroom(
        dir,
        &[
            "import",
            "torch",
            snapshot.to_str().unwrap(),
            "--out",
            import.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    [run, watch, import]
}

/// For each file name: every column's type in each folder that has the file (`-` where the
/// column is empty throughout that file), then whether the files concatenate and their rows.
const POLARS: &str = r#"
import os, sys, polars as pl
for f in ["timeline", "events", "alloc-log"]:
    paths = [d + "/" + f + ".csv" for d in sys.argv[1:] if os.path.exists(d + "/" + f + ".csv")]
    frames = [pl.read_csv(p) for p in paths]
    agreed = {}
    for p, df in zip(paths, frames):
        for c in df.columns:
            empty = df[c].null_count() == df.height
            print("type", f, c, os.path.basename(os.path.dirname(p)), "-" if empty else df[c].dtype)
            if not empty:
                agreed.setdefault(c, df[c].dtype)
    # A column one file leaves empty takes the type the others agree on; nothing else is cast.
    typed = [df.with_columns([pl.col(c).cast(agreed[c]) for c in df.columns
                              if c in agreed and df[c].null_count() == df.height])
             for df in frames]
    both = pl.concat(typed)
    print("rows", f, len(frames), both.height, sum(x.height for x in frames))
"#;

#[test]
fn a_run_a_watch_and_an_import_give_each_column_one_type() {
    if !crate::common::schema::tools_or_skip("csv_columns::polars") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let folders = three_folders(dir.path());
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(POLARS)
        .args(&folders)
        .env("PYTHONPATH", crate::common::schema::py_tools().unwrap())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // polars refuses to concatenate frames whose column types differ: a failure here names
    // the column.
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // file, column → the types the producers wrote it with (an empty column has none).
    let mut types: std::collections::BTreeMap<(String, String), Vec<(String, String)>> =
        Default::default();
    let mut rows = vec![];
    for l in text.lines() {
        let w: Vec<&str> = l.split(' ').collect();
        match w[0] {
            "type" if w[4] != "-" => types
                .entry((w[1].into(), w[2].into()))
                .or_default()
                .push((w[3].into(), w[4].into())),
            "type" => {}
            "rows" => rows.push((w[1].to_string(), w[2].to_string(), w[3] == w[4])),
            _ => panic!("{text}"),
        }
    }
    for ((file, column), by) in &types {
        assert!(
            by.iter().all(|(_, t)| *t == by[0].1),
            "{file}.csv's {column} has more than one type: {by:?}"
        );
    }
    let files: Vec<_> = rows
        .iter()
        .map(|(f, n, _)| (f.as_str(), n.as_str()))
        .collect();
    // A watch writes no allocation log.
    assert_eq!(
        files,
        [("timeline", "3"), ("events", "3"), ("alloc-log", "2")],
        "{text}"
    );
    assert!(rows.iter().all(|r| r.2), "every row concatenated: {text}");
    let of = |file: &str, column: &str| -> Vec<String> {
        types[&(file.to_string(), column.to_string())]
            .iter()
            .map(|(who, t)| format!("{who}:{t}"))
            .collect()
    };
    // The stream is a name in all three (an import's is the cudaStream_t in hex), and the
    // allocation log's stream a number in both that write one.
    assert_eq!(
        of("events", "stream"),
        ["run:String", "watch:String", "import:String"]
    );
    assert_eq!(of("alloc-log", "stream"), ["run:Int64", "import:Int64"]);
    assert_eq!(
        of("events", "t_ns"),
        ["run:Int64", "watch:Int64", "import:Int64"]
    );
    assert_eq!(
        of("timeline", "device_free_bytes"),
        ["run:Int64", "watch:Int64"],
        "an import has no device reading"
    );

    // A watch's own rows name its job, as its `start` row does; the pid is in `detail`.
    let events = csv_rows(&folders[1].join("events.csv"));
    let start = events.iter().find(|r| r["op"] == "start").unwrap();
    let exit = events.iter().find(|r| r["op"] == "exit").unwrap();
    assert_eq!(exit["name"], start["name"]);
    assert!(exit["name"].parse::<u64>().is_err(), "{exit:?}");
    let pid = start["detail"].strip_prefix("started as pid ").unwrap();
    assert_eq!(exit["detail"], format!("pid {pid} exited with status 0"));
}
