//! MIG instances as devices: a `[[mig]]` table of a shipped profile as a simulated card
//! (`--profile h200-1g.18gb`), and on the fake driver's MIG mode (`HEADROOM_FAKE_MIG`) every
//! instance listed with its own total, `run` and `watch` on one instance chosen by
//! `CUDA_VISIBLE_DEVICES=MIG-…`, process lists refused without privileges recorded as
//! unavailable, and `--device all` as one worker per instance. Every expected figure is read
//! from the profile's `[[mig]]` table.

use crate::common::*;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `(total_bytes, multiprocessors)` of `profile`'s `[[mig]]` table for `mig`.
fn mig_table(profile: &str, mig: &str) -> (u64, u64) {
    let text = std::fs::read_to_string(root().join(format!("profiles/{profile}.toml"))).unwrap();
    let t: toml::Table = toml::from_str(&text).unwrap();
    let row = t["mig"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["profile"].as_str() == Some(mig))
        .unwrap_or_else(|| panic!("{profile} has no [[mig]] {mig}"));
    let total = headroom::units::parse_size(row["total_bytes"].as_str().unwrap()).unwrap();
    (total, row["multiprocessors"].as_integer().unwrap() as u64)
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

const SMALL: &str = "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"512MiB\" }, { op = \"sleep\", for = \"10ms\" }]\n";

#[test]
fn a_mig_profile_is_a_simulated_card_of_that_instance() {
    let dir = tempfile::tempdir().unwrap();
    let (total, sms) = mig_table("h200", "1g.18gb");
    let o = headroom(
        dir.path(),
        &["devices", "--profile", "h200-1g.18gb", "--json"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let g = &json(&o.stdout)["gpus"][0];
    assert_eq!(
        (u(&g["total_bytes"]), u(&g["multiprocessors"])),
        (total, sms)
    );
    assert_eq!(g["mig"]["profile"], "1g.18gb");
    assert!(g["uuid"].as_str().unwrap().starts_with("MIG-"), "{g}");
    assert!(
        g["mig"]["parent_uuid"]
            .as_str()
            .unwrap()
            .starts_with("GPU-"),
        "{g}"
    );

    let wl = workload(dir.path(), "small", SMALL);
    let out = dir.path().join("run");
    let o = headroom(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "h200-1g.18gb",
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let s = json(&std::fs::read_to_string(out.join("summary.json")).unwrap());
    assert_eq!(u(&s["device"]["total_bytes"]), total);
    assert_eq!(u(&s["idle"]["after_context"]["device_total_bytes"]), total);
    assert_eq!(s["device"]["mig"]["profile"], "1g.18gb");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("MIG instance 1g.18gb of GPU-"), "{report}");

    // Listed with the built-in profiles; an unknown instance names the ones there are.
    let o = headroom(dir.path(), &["devices", "--backend", "sim", "--json"]);
    let rows = json(&o.stdout)["profiles"].as_array().unwrap().clone();
    let row = rows
        .iter()
        .find(|r| r["name"] == "h100-80g-3g.40gb")
        .unwrap();
    assert_eq!(row["mig_parent"], "h100-80g");
    assert_eq!(u(&row["total_bytes"]), mig_table("h100-80g", "3g.40gb").0);
    let o = headroom(dir.path(), &["devices", "--profile", "h200-2g.18gb"]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("\"h200-2g.18gb\"") && o.stderr.contains("1g.18gb, 1g.35gb, 2g.35gb"),
        "{}",
        o.stderr
    );
}
