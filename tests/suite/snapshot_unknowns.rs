//! An imported snapshot's device figures the snapshot does not record: the device total and
//! the modeled free memory are null (empty CSV cells) in every file and reader, with the
//! reason; given `--device-total` or `--profile`, they are that figure, labeled.

use std::path::{Path, PathBuf};

use crate::common::{GIB, csv_rows, headroom, u};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/torch")
        .join(name)
}

/// Imports the OOM fixture into `<tmp>/<out>` with `extra` flags; its folder and summary.
fn import(tmp: &Path, out: &str, extra: &[&str]) -> (PathBuf, Value) {
    let dir = tmp.join(out);
    let snapshot = fixture("built-oom.pickle");
    let mut args = vec![
        "import",
        "torch",
        snapshot.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let r = headroom(tmp, &args);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    crate::common::schema::check("summary", &s, "an imported summary.json");
    (dir, s)
}

#[test]
fn an_imports_device_total_and_free_memory_are_null_unless_given() {
    let tmp = tempfile::tempdir().unwrap();
    let (plain, s) = import(tmp.path(), "plain", &[]);
    assert!(s["device"]["total_bytes"].is_null(), "{}", s["device"]);
    assert!(s["import"]["device_evidence"]["device_total_bytes"].is_null());
    // The OOM: free memory as recorded, device used (total − free) unknown.
    let oom = &s["ooms"][0];
    assert!(oom["device_used_bytes"].is_null(), "{oom}");
    assert!(oom["unexplained_used_bytes"].is_null(), "{oom}");
    let free = u(&oom["device_free_bytes"]);
    let reserved = u(&oom["alloc_reserved_bytes"]);
    let rows = csv_rows(&plain.join("timeline.csv"));
    assert!(
        rows.iter()
            .all(|r| r["device_free_bytes"].is_empty() && r["device_used_bytes"].is_empty())
    );
    let report = std::fs::read_to_string(plain.join("report.md")).unwrap();
    assert!(
        report.contains("CUDA-visible total not in the snapshot"),
        "{report}"
    );
    let svg = std::fs::read_to_string(plain.join("timeline.svg")).unwrap();
    assert!(!svg.contains("line-device-total"), "a total line drawn");
    assert!(
        !svg.contains("mark-off-scale"),
        "a total said off the scale"
    );

    let total = 8 * GIB;
    let (given, g) = import(tmp.path(), "given", &["--device-total", &total.to_string()]);
    assert_eq!(u(&g["device"]["total_bytes"]), total);
    assert_eq!(u(&g["ooms"][0]["device_used_bytes"]), total - free);
    // Beside PyTorch's reserved memory, derived from the total given.
    assert_eq!(
        g["ooms"][0]["unexplained_used_bytes"].as_i64(),
        Some((total - free - reserved) as i64)
    );
    assert_eq!(
        u(&g["ooms"][0]["outside_allocator_bytes"]),
        total - free - reserved
    );
    let ev = &g["import"]["device_evidence"];
    assert_eq!(
        (u(&ev["device_total_bytes"]), u(&ev["idle_free_bytes"])),
        (total, total)
    );
    let report = std::fs::read_to_string(given.join("report.md")).unwrap();
    let line = format!("{} CUDA-visible", headroom::units::Bytes(total));
    assert!(report.contains(&line), "{report}");

    let (profiled, p) = import(tmp.path(), "profiled", &["--profile", "tiny-4g"]);
    let profile_total = u(&p["device"]["total_bytes"]);
    assert_eq!(profile_total, 4 * GIB);
    assert_eq!(
        u(&p["import"]["device_evidence"]["device_total_bytes"]),
        profile_total
    );
    let rows = csv_rows(&profiled.join("timeline.csv"));
    let used = |r: &std::collections::HashMap<String, String>| -> u64 {
        r["device_used_bytes"].parse().unwrap()
    };
    let free = |r: &std::collections::HashMap<String, String>| -> u64 {
        r["device_free_bytes"].parse().unwrap()
    };
    assert!(rows.iter().all(|r| used(r) + free(r) == profile_total));

    // compare and merge read the unknown total as unknown, the given one as given.
    let (a, b) = (plain.to_str().unwrap(), given.to_str().unwrap());
    let r = headroom(tmp.path(), &["compare", a, b, "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let c: Value = serde_json::from_str(&r.stdout).unwrap();
    crate::common::schema::check("compare", &c, "compare --json of two imports");
    assert!(c["a"]["device_total_bytes"].is_null(), "{}", c["a"]);
    assert_eq!(u(&c["b"]["device_total_bytes"]), total);
    let csv = tmp.path().join("merged.csv");
    let r = headroom(tmp.path(), &["merge", a, b, "--out", csv.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows = csv_rows(&csv);
    assert_eq!(rows[0]["device_total_bytes"], "");
    assert_eq!(rows[1]["device_total_bytes"].parse::<u64>().unwrap(), total);
}
