//! Outputs never damage anything: a run writes only into a new or empty folder, a user's
//! files (and a `.tmp` beside a merged CSV) are left alone, and a planted link is never
//! written through. A write that fails (a full disk) is exit 2 naming the file.

use crate::common::*;

fn quick(dir: &std::path::Path) -> std::path::PathBuf {
    workload(
        dir,
        "quick",
        r#"[[phase]]
name = "p"
steps = [{ op = "allocate", name = "a", size = "64MiB" }]
"#,
    )
}

#[test]
fn a_run_refuses_a_folder_holding_a_users_file() {
    let dir = tempfile::tempdir().unwrap();
    let wl = quick(dir.path());
    let out = dir.path().join("mine");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("report.md"), "my notes").unwrap();
    let o = headroom(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("is not empty (report.md)"),
        "{}",
        o.stderr
    );
    assert_eq!(
        std::fs::read_to_string(out.join("report.md")).unwrap(),
        "my notes"
    );
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        1,
        "nothing was added"
    );
    let o = headroom(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--out",
            "/",
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--out /: is not empty"), "{}", o.stderr);
}

#[test]
fn merge_leaves_a_users_tmp_file_and_refuses_a_planted_link() {
    let dir = tempfile::tempdir().unwrap();
    let wl = quick(dir.path());
    let run = dir.path().join("run");
    let o = headroom(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--out",
            run.to_str().unwrap(),
            "-q",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    std::fs::write(dir.path().join("fleet.tmp"), "mine").unwrap();
    let csv = dir.path().join("fleet.csv");
    let o = headroom(
        dir.path(),
        &[
            "merge",
            run.to_str().unwrap(),
            "--out",
            csv.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(std::fs::read_to_string(&csv).unwrap().contains("quick"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("fleet.tmp")).unwrap(),
        "mine"
    );
    // A link where the output goes is refused without --force; with it, it is replaced and
    // its target left alone.
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let linked = dir.path().join("linked.csv");
    std::os::unix::fs::symlink(&victim, &linked).unwrap();
    let o = headroom(
        dir.path(),
        &[
            "merge",
            run.to_str().unwrap(),
            "--out",
            linked.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    let o = headroom(
        dir.path(),
        &[
            "merge",
            run.to_str().unwrap(),
            "--out",
            linked.to_str().unwrap(),
            "--force",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A write that fails part-way (here a file-size limit, as a full disk would) fails the run
/// with exit 2 and a message naming the file; the summary says so, and the device memory was
/// released before.
#[test]
fn a_write_that_fails_names_the_file_and_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    // `ulimit -f 64`: no file may pass 64 KiB; SIGXFSZ ignored, so writes fail with EFBIG.
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f 64; exec {} run {} --profile tiny-4g --out {} -q",
            env!("CARGO_BIN_EXE_headroom"),
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("workloads/oom/fragmentation.toml")
                .display(),
            out_dir.display()
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let named = ["timeline.csv", "events.csv"]
        .iter()
        .any(|f| stderr.contains(&format!("cannot write {}", out_dir.join(f).display())));
    assert!(named && !stderr.contains("panicked"), "{stderr}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["status"], "failed", "{s}");
    assert!(
        s["status_detail"]
            .as_str()
            .unwrap()
            .contains("cannot write"),
        "{s}"
    );
    assert_eq!(s["exit_code"], 2);
    // Everything the run held was released before the record was written.
    assert_eq!(s["release"]["difference_bytes"], 0, "{}", s["release"]);
}

/// Runs `headroom run WL --profile P --out DIR -q` in `dir` and returns the folder.
fn run_into(dir: &std::path::Path, wl: &str, profile: &str, name: &str) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = dir.join(name);
    let o = headroom(
        dir,
        &[
            "run",
            root.join(wl).to_str().unwrap(),
            "--profile",
            profile,
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
    );
    assert!(o.code <= 1, "{wl}: {}", o.stderr);
    out
}

/// Every CSV has its header from the moment it exists, and each column one type in every
/// run: polars, with its default settings, reads the timelines, events and allocation logs
/// of a completed run, OOM runs of two causes, a pool run, a graph run and a SIGKILLed run,
/// and concatenates each kind.
#[test]
fn polars_reads_and_concatenates_the_csvs_of_different_runs_with_its_defaults() {
    if !crate::common::schema::tools_or_skip("outputs::polars") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut dirs = vec![
        run_into(dir.path(), "workloads/quickstart.toml", "tiny-4g", "quick"),
        run_into(
            dir.path(),
            "workloads/oom/fragmentation.toml",
            "tiny-4g",
            "frag",
        ),
        run_into(
            dir.path(),
            "workloads/oom/pending-free.toml",
            "tiny-4g",
            "pending",
        ),
        run_into(dir.path(), "workloads/pool-reuse.toml", "tiny-4g", "pool"),
        run_into(dir.path(), "workloads/graphs.toml", "tiny-4g", "graphs"),
    ];
    // Killed: filling an 80 GiB device 2 MiB at a time takes seconds; SIGKILL once every
    // file holds rows.
    let killed = dir.path().join("killed");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args([
            "run",
            root.join("workloads/oom/fragmentation.toml")
                .to_str()
                .unwrap(),
        ])
        .args([
            "--profile",
            "h100-80g",
            "--out",
            killed.to_str().unwrap(),
            "-q",
        ])
        .spawn()
        .unwrap();
    let rows = |f: &str| std::fs::read_to_string(killed.join(f)).map_or(0, |t| t.lines().count());
    let t0 = std::time::Instant::now();
    while ["timeline.csv", "events.csv", "alloc-log.csv"]
        .iter()
        .any(|f| rows(f) < 3)
    {
        assert!(t0.elapsed().as_secs() < 60, "the run wrote no rows");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the kill"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let summary = std::fs::read_to_string(killed.join("summary.json")).unwrap_or_default();
    assert!(!summary.contains("\"status\": \"completed\""));
    dirs.push(killed);

    let script = r#"
import sys, polars as pl
for f in ["timeline", "events", "alloc-log"]:
    frames = [pl.read_csv(d + "/" + f + ".csv") for d in sys.argv[1:]]
    both = pl.concat(frames)
    ints = [c for c, t in both.schema.items() if t == pl.Int64]
    print(f, both.height, sum(x.height for x in frames), ",".join(ints))
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(&dirs)
        .env("PYTHONPATH", crate::common::schema::py_tools().unwrap())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 3, "{text}");
    for l in &lines {
        assert_eq!(l[1], l[2], "every row concatenated: {text}");
    }
    // The byte and time columns are integers, not strings.
    let mut timeline_ints = vec!["t_ns", "device_free_bytes"];
    timeline_ints.extend(
        headroom::record::View::ALL
            .iter()
            .map(|v| v.key())
            .filter(|k| *k != "job_used_bytes"),
    );
    assert_eq!(lines[0][3], timeline_ints.join(","), "{text}");
    assert_eq!(
        lines[1][3], "t_ns,requested_bytes,size_bytes,latency_ns,device_free_bytes",
        "{text}"
    );
    assert_eq!(lines[2][3], "t_ns,bytes,stream", "{text}");

    // A skipped run (nothing ran): its timeline's idle row types like any other; its events
    // and allocation log have their headers and no row.
    let skipped = dir.path().join("skipped");
    let o = headroom(
        dir.path(),
        &[
            "run",
            root.join("workloads/serving.toml").to_str().unwrap(),
            "--profile",
            "t4-16g",
            "--skip-unfit",
            "--out",
            skipped.to_str().unwrap(),
            "-q",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    for (f, header) in [
        (
            "events.csv",
            headroom::record::timeline::EVENT_HEADER.join(","),
        ),
        (
            "alloc-log.csv",
            headroom::alloc::adaptors::LOG_HEADER.join(","),
        ),
    ] {
        assert_eq!(
            std::fs::read_to_string(skipped.join(f)).unwrap(),
            header + "\n",
            "{f}"
        );
    }
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg("import sys, polars as pl; print(pl.concat([pl.read_csv(d + '/timeline.csv') for d in sys.argv[1:]]).height)")
        .arg(&dirs[0])
        .arg(&skipped)
        .env("PYTHONPATH", crate::common::schema::py_tools().unwrap())
        .output()
        .unwrap();
    let rows = |d: &std::path::Path| csv_rows(&d.join("timeline.csv")).len();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        (rows(&dirs[0]) + rows(&skipped)).to_string(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `headroom validate` leaves a top-level junit.xml with one case per claim of the plan, whose
/// failures are exactly the claims validation.json says failed, and a report.md; its probes'
/// junit.xml files (runs above the limit are meant to fail) count no failure.
#[test]
fn validate_writes_a_junit_whose_failures_are_the_plans_failed_claims() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    // tiny.toml forgets the context: 20 planned, 16 fit. From the free reading (3840 MiB)
    // it plans 16 and holds.
    for (name, extra, want_code, want_failed, kv) in [
        (
            "fails",
            &[][..],
            1,
            &["admitted count", "margin at the peak"][..],
            20,
        ),
        ("holds", &["--capacity", "3840MiB"][..], 0, &[][..], 16),
    ] {
        let out = dir.path().join(name);
        let mut args = vec![
            "validate",
            "workloads/plans/tiny.toml",
            "--profile",
            "tiny-4g",
            "--out",
            out.to_str().unwrap(),
            "-q",
        ];
        args.extend_from_slice(extra);
        let r = headroom(root, &args);
        assert_eq!(r.code, want_code, "{name}: {}", r.stderr);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("validation.json")).unwrap())
                .unwrap();
        let claims = v["claims"].as_array().unwrap();
        let failed: Vec<&str> = claims
            .iter()
            .filter(|c| c["held"] == false)
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(failed, want_failed, "{name}");
        let names: Vec<&str> = claims.iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "admitted count",
                "margin at the peak",
                "category: weights",
                &format!("category: KV, {kv} requests"),
                "category: other peak"
            ],
            "{name}"
        );
        let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
        assert!(
            junit.contains(&format!(
                r#"<testsuites name="headroom validate" tests="5" failures="{}" errors="0">"#,
                failed.len()
            )),
            "{junit}"
        );
        assert_eq!(junit.matches("<testcase ").count(), 5, "{junit}");
        assert_eq!(junit.matches("<failure ").count(), failed.len(), "{junit}");
        for f in &failed {
            let case = junit
                .split("<testcase ")
                .find(|c| c.contains(&format!("name=\"{f}\"")))
                .unwrap();
            assert!(case.contains("<failure "), "{f}: {case}");
        }
        let md = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert_eq!(md.matches("**failed**").count(), failed.len(), "{md}");
        let mut probes = 0;
        for p in std::fs::read_dir(&out).unwrap() {
            let j = p.unwrap().path().join("junit.xml");
            if j.is_file() {
                probes += 1;
                let t = std::fs::read_to_string(&j).unwrap();
                assert!(!t.contains("<failure"), "{}: {t}", j.display());
                assert!(t.contains(r#"<property name="validate_probe" value="true"/>"#));
            }
        }
        assert!(probes >= 2, "{name}: {probes} probes");
    }
}

fn manifest() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
#[ignore = "rewrites docs/man; run on purpose after a flag changes"]
fn regenerate_man_pages() {
    let dir = manifest().join("docs/man");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in headroom::commands::completions::man_pages().unwrap() {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// The man pages in docs/man are what the clap definitions generate (regenerate with
/// `cargo test --test suite -- --ignored outputs::regenerate_man_pages`), one per command; the
/// completion scripts of every shell name every subcommand and every long flag of `run`.
#[test]
fn completions_and_man_pages_are_generated_from_the_command_line() {
    use clap::CommandFactory;
    let pages = headroom::commands::completions::man_pages().unwrap();
    let dir = manifest().join("docs/man");
    let mut committed: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    committed.sort();
    let mut names: Vec<String> = pages.iter().map(|(n, _)| n.clone()).collect();
    names.sort();
    assert_eq!(committed, names, "docs/man: regenerate the man pages");
    for (name, text) in &pages {
        let on_disk = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(
            on_disk == *text,
            "docs/man/{name} is not what the flags generate: regenerate the man pages"
        );
    }
    let mut cli = headroom::cli::Cli::command();
    cli.build();
    let subs: Vec<String> = cli
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .filter(|s| s != "help")
        .collect();
    assert!(subs.len() >= 17 && subs.contains(&"completions".to_string()));
    for s in &subs {
        assert!(
            names.contains(&format!("headroom-{s}.1")),
            "no man page for {s}"
        );
    }
    let run_flags: Vec<String> = cli
        .find_subcommand("run")
        .unwrap()
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    assert!(
        run_flags.contains(&"expect-oom".to_string()) && run_flags.contains(&"color".to_string())
    );
    let run_page = &pages.iter().find(|(n, _)| n == "headroom-run.1").unwrap().1;
    for f in &run_flags {
        assert!(
            run_page.contains(&format!("\\-\\-{}", f.replace('-', "\\-"))),
            "man run lacks --{f}"
        );
    }
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let r = headroom(manifest(), &["completions", shell]);
        assert_eq!(r.code, 0, "{shell}: {}", r.stderr);
        for s in &subs {
            assert!(
                r.stdout.contains(s.as_str()),
                "{shell} completion lacks {s}"
            );
        }
        for f in &run_flags {
            // fish names a long flag as `-l NAME`.
            let spelled = if shell == "fish" {
                format!("-l {f}")
            } else {
                format!("--{f}")
            };
            assert!(
                r.stdout.contains(&spelled),
                "{shell} completion lacks --{f}"
            );
        }
    }
    let r = headroom(manifest(), &["man", "run"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, run_page.as_str()));
    let r = headroom(manifest(), &["man", "nope"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("headroom man nope: no such command"),
        "{}",
        r.stderr
    );
    // bash itself reads the script and completes a subcommand.
    let script = headroom(manifest(), &["completions", "bash"]).stdout;
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{script}\nCOMP_WORDS=(headroom valid); COMP_CWORD=1; _headroom headroom valid headroom; echo \"${{COMPREPLY[@]}}\""
        ))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "validate");
}

/// `--color never`, `NO_COLOR=1` and a pipe give no escape code; `--color always` colours the
/// OOM headline (which names its cause), the phase that ran out and the OOM line, and no
/// other; a terminal (through `script`) colours by default.
#[test]
fn colour_follows_the_flag_no_color_and_the_terminal_and_marks_the_oom_rows() {
    let dir = tempfile::tempdir().unwrap();
    let wl = manifest().join("workloads/oom/fragmentation.toml");
    let run = |name: &str, extra: &[&str], env: &[(&str, &str)]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"));
        c.args([
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--out",
            name,
        ])
        .args(extra)
        .current_dir(dir.path())
        .env_remove("NO_COLOR");
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    for (name, extra, env) in [
        ("never", &["--color", "never"][..], &[][..]),
        ("no-color", &[][..], &[("NO_COLOR", "1")][..]),
        ("pipe", &[][..], &[][..]),
        (
            "never-tty",
            &["--color", "never"][..],
            &[("TERM", "xterm")][..],
        ),
    ] {
        let out = run(name, extra, env);
        assert!(!out.contains('\x1b'), "{name}: {out}");
        assert!(out.starts_with("headroom · oom-fragmentation on tiny 4 GiB GPU (simulated) [sim, profile tiny-4g] · oom (fragmentation)\n"), "{out}");
        assert!(
            out.contains("\nOOM (fragmentation) at request/s1 (allocate big): "),
            "{out}"
        );
    }
    let out = run("always", &["--color", "always"], &[("NO_COLOR", "1")]);
    let red: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("\x1b[1;31m"))
        .map(|l| {
            l.trim_start_matches("\x1b[1;31m")
                .split_whitespace()
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(red, ["headroom", "request", "OOM"], "{out}");
    assert_eq!(out.matches('\x1b').count(), 6, "{out}");
    // On a terminal, by default.
    let tty = std::process::Command::new("script")
        .args(["-qec"])
        .arg(format!(
            "{} run {} --profile tiny-4g --out tty",
            env!("CARGO_BIN_EXE_headroom"),
            wl.display()
        ))
        .arg("/dev/null")
        .current_dir(dir.path())
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .output();
    match tty {
        Ok(o) => {
            // `script -e` returns headroom's own exit code: the run under a terminal must
            // succeed as it does in a pipe, and colour the same three words.
            let t = String::from_utf8_lossy(&o.stdout);
            assert_eq!(o.status.code(), Some(0), "headroom under script: {t}");
            assert!(
                t.contains("oom (fragmentation)")
                    && t.contains("OOM (fragmentation) at request/s1"),
                "{t}"
            );
            assert_eq!(t.matches("\x1b[1;31m").count(), 3, "{t}");
        }
        Err(e) => crate::common::skip::missing(
            "outputs: the terminal case (util-linux's script)",
            &e.to_string(),
        ),
    }
}

/// `-q`: nothing at all on a run that succeeds, not even the note that no driver was found;
/// the statuses are spelled as summary.json spells them; `explain -` reads stdin; `hold`
/// takes a share of the device as workloads do; docs/formats.md's `result` table is the list
/// the writers use.
#[test]
fn quiet_is_silent_statuses_have_one_spelling_explain_reads_stdin_and_hold_takes_shares() {
    let dir = tempfile::tempdir().unwrap();
    let o = headroom(
        dir.path(),
        &[
            "run",
            manifest()
                .join("workloads/quickstart.toml")
                .to_str()
                .unwrap(),
            "--out",
            "q",
            "-q",
        ],
    );
    assert_eq!((o.code, o.stdout.as_str(), o.stderr.as_str()), (0, "", ""));
    let o = headroom(
        dir.path(),
        &[
            "run",
            manifest()
                .join("workloads/quickstart.toml")
                .to_str()
                .unwrap(),
            "--out",
            "n",
        ],
    );
    assert!(o.stderr.starts_with("note: "), "{}", o.stderr);
    assert!(
        o.stdout.lines().next().unwrap().ends_with(" · completed"),
        "{}",
        o.stdout
    );
    for debug in [
        "Completed",
        "StoppedAtFloor",
        "(Failed)",
        "Oom",
        "stoppedatfloor",
    ] {
        assert!(!o.stdout.contains(debug), "{debug}: {}", o.stdout);
    }
    let floor = workload(
        dir.path(),
        "floor",
        "[[phase]]\nname = \"a\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"95% of total\" }]\n",
    );
    let o = headroom(
        dir.path(),
        &[
            "run",
            floor.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--out",
            "f",
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stdout
            .lines()
            .next()
            .unwrap()
            .ends_with(" · stopped_at_floor"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["a", "stopped"])),
        "{}",
        o.stdout
    );

    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["explain", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 4.00 GiB of which 0 bytes is free.\n")
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("message 1 of 1 · line 1"), "{text}");

    for (share, bytes) in [("50% of total", 2048 * MIB), ("12.5% of total", 512 * MIB)] {
        let o = headroom(
            dir.path(),
            &["hold", share, "--for", "1ms", "--profile", "tiny-4g"],
        );
        assert_eq!(o.code, 0, "{share}: {}", o.stderr);
        assert!(
            o.stdout.starts_with(&format!("holding {bytes} bytes")),
            "{}",
            o.stdout
        );
    }
    let o = headroom(
        dir.path(),
        &[
            "hold",
            "150% of total",
            "--for",
            "1ms",
            "--profile",
            "tiny-4g",
        ],
    );
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("150% of total"), "{}", o.stderr);

    let formats = std::fs::read_to_string(manifest().join("docs/formats.md")).unwrap();
    assert!(
        formats.contains(&headroom::record::timeline::event_results_table()),
        "docs/formats.md's result table is not EVENT_RESULTS:\n{}",
        headroom::record::timeline::event_results_table()
    );
}
