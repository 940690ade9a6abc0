//! Hostile and odd input ends in a short, printable error naming the file and the place, exit
//! 2, and nothing written: a binary file given to `replay`, a key as long as the file, `--out`
//! through a link, help written to a full disk.

use crate::common::*;

/// An error a person can read: short and free of the file's control bytes.
fn printable_and_short(stderr: &str) {
    assert!(
        stderr.len() < 1024,
        "{} bytes: {stderr:.2000}",
        stderr.len()
    );
    assert!(
        !stderr.chars().any(|c| c.is_control() && c != '\n'),
        "{stderr:?}"
    );
}

#[test]
fn replay_of_a_binary_file_quotes_its_header_printably() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("core.bin");
    std::fs::write(&bin, b"\x7fELF\x02\x01\x1b[2J\x07,\x00\x00\n\x01\x02\n").unwrap();
    let r = headroom(
        dir.path(),
        &["replay", bin.to_str().unwrap(), "--backend", "sim"],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    printable_and_short(&r.stderr);
    assert!(
        r.stderr.contains(
            "unknown log format: the header is `\\x7fELF\\x02\\x01\\x1b[2J\\x07,\\x00\\x00`"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn a_key_as_long_as_the_file_is_named_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let long = "k".repeat(1 << 20);
    for (name, text, place) in [
        (
            "top",
            format!("{long} = 1\n[workload]\nname = \"w\"\n[[phase]]\nname = \"p\"\nsteps = []\n"),
            "unknown top-level key \"kkk",
        ),
        (
            "inside",
            format!("[workload]\nname = \"w\"\n{long} = 1\n[[phase]]\nname = \"p\"\nsteps = []\n"),
            "[workload]: unknown field `kkk",
        ),
    ] {
        let wl = dir.path().join(format!("{name}.toml"));
        std::fs::write(&wl, text).unwrap();
        let r = headroom(
            dir.path(),
            &["run", wl.to_str().unwrap(), "--profile", "tiny-4g"],
        );
        assert_eq!(r.code, 2, "{name}: {:.500}", r.stderr);
        printable_and_short(&r.stderr);
        assert!(r.stderr.contains(place), "{name}: {}", r.stderr);
        assert!(r.stderr.contains(&format!("{name}.toml")), "{}", r.stderr);
    }
}

#[test]
fn out_through_a_link_to_a_folder_is_followed_and_a_link_to_a_file_refused() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "w",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"a\", size = \"1MiB\" }]\n",
    );
    let real = dir.path().join("scratch");
    std::fs::create_dir(&real).unwrap();
    let link = dir.path().join("results");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let r = headroom(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--out",
            "results",
            "-q",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(real.join("summary.json")).unwrap()).unwrap();
    assert_eq!(u(&s["peaks"]["run"]["own_bytes"]["bytes"]), MIB);

    let to_file = dir.path().join("to-file");
    std::os::unix::fs::symlink(&wl, &to_file).unwrap();
    let r = headroom(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--out",
            "to-file",
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "--out to-file: is a link to {}, which is not a folder",
            wl.display()
        )),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::read_link(&to_file).unwrap(), wl);
}

#[test]
fn help_and_version_on_a_full_disk_are_exit_2() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full (Linux)");
    for args in [&["plan", "--help"][..], &["--version"][..], &["--help"][..]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
            .args(args)
            .stdout(full.try_clone().unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("cannot write to standard output: No space left on device"),
            "{args:?}: {stderr}"
        );
    }
}

/// A log that contradicts itself is refused at the row, naming both rows: a free whose size
/// is not its allocation's, and time running backwards. `--keep-going` lists the row instead.
#[test]
fn replay_refuses_a_free_of_another_size_and_time_running_backwards() {
    let dir = tempfile::tempdir().unwrap();
    let header = "t_ns,action,ptr,bytes,stream,detail\n";
    for (name, rows, want) in [
        (
            "size",
            "0,allocate,0x1000,1048576,0,\n10,free,0x1000,2097152,0,\n",
            "size.csv line 3: free of 0x1000 names 2097152 bytes, but line 2 allocated 1048576 bytes there",
        ),
        (
            "time",
            "100,allocate,0x1000,1048576,0,\n50,free,0x1000,1048576,0,\n",
            "time.csv line 3: t_ns 50 is earlier than the 100 before it: the log's time runs backwards",
        ),
    ] {
        let log = dir.path().join(format!("{name}.csv"));
        std::fs::write(&log, format!("{header}{rows}")).unwrap();
        let r = headroom(
            dir.path(),
            &["replay", log.to_str().unwrap(), "--backend", "sim"],
        );
        assert_eq!(r.code, 2, "{name}: {}", r.stderr);
        assert!(r.stderr.contains(want), "{name}: {}", r.stderr);
        let r = headroom(
            dir.path(),
            &[
                "replay",
                log.to_str().unwrap(),
                "--backend",
                "sim",
                "--keep-going",
                "--json",
            ],
        );
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(v["bad_rows"][0]["line"], 3, "{name}: {v}");
        // The free was not replayed: the allocation is the only event.
        assert_eq!(v["frees"], 0, "{name}: {v}");
    }
    // The same rows in order and of one size replay.
    let log = dir.path().join("fine.csv");
    std::fs::write(
        &log,
        format!("{header}100,allocate,0x1000,1048576,0,\n150,free,0x1000,1048576,0,\n"),
    )
    .unwrap();
    let r = headroom(
        dir.path(),
        &["replay", log.to_str().unwrap(), "--backend", "sim"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}
