//! `headroom watch --torch` on the fake NVIDIA driver: the job's outcome unchanged (output,
//! exit status, the user's own sitecustomize, a job without torch or without CUDA), and on the
//! stand-in torch (`tests/torch-standin`, allocating its segments from the fake driver) the
//! folder's PyTorch section: every view apart at the OOM with exact bytes, the top lines,
//! explain with the snapshot's figures, one snapshot per rank. `real_wheel`: the same with PyPI's
//! own torch wheel (HEADROOM_TORCH_PYTHON), and the stand-in's signatures compared with it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// python3, or a skip (a failure under CI=true).
fn python_or_skip() -> bool {
    match Command::new("python3").arg("--version").output() {
        Ok(o) if o.status.success() => true,
        other => {
            crate::common::skip::missing("watch_torch: python3", &format!("{other:?}"));
            false
        }
    }
}

/// `headroom watch --torch --out DIR -- ARGS…` on the fake driver, with the stand-in torch
/// importable when `standin` and `extra_path` first on the job's PYTHONPATH.
fn watch_torch(
    dir: &Path,
    job: &[&str],
    standin: bool,
    extra_path: Option<&Path>,
) -> (Out, PathBuf) {
    let out = dir.join("w");
    let mut paths: Vec<String> = extra_path.iter().map(|p| p.display().to_string()).collect();
    if standin {
        paths.push(root().join("tests/torch-standin").display().to_string());
    }
    let pythonpath = paths.join(":");
    let out_s = out.display().to_string();
    let mut args = vec!["watch", "--torch", "--out", &out_s, "--"];
    args.extend_from_slice(job);
    let o = on_fake(
        dir,
        &args,
        &[
            ("PYTHONPATH", pythonpath.as_str()),
            ("STANDIN_LIBCUDA", "libcuda.so.1"),
        ],
    );
    (o, out)
}

#[test]
fn a_job_without_torch_runs_unchanged_and_the_users_sitecustomize_still_runs() {
    if !python_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    std::fs::create_dir(&site).unwrap();
    let mark = dir.path().join("user-site-ran");
    std::fs::write(
        site.join("sitecustomize.py"),
        format!("open({:?}, 'w').write('yes')\n", mark.display().to_string()),
    )
    .unwrap();
    let (o, _) = watch_torch(
        dir.path(),
        &[
            "python3",
            "-c",
            "import sys; print('out 1'); print('err 1', file=sys.stderr); sys.exit(3)",
        ],
        false,
        Some(&site),
    );
    assert_eq!(o.code, 3, "{}", o.stderr);
    assert_eq!(o.stdout, "out 1\n");
    assert!(o.stderr.contains("err 1\n"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&mark).unwrap(), "yes");
    assert!(
        o.stderr.contains("note: no CUDA snapshot was taken"),
        "{}",
        o.stderr
    );
}

#[test]
fn torch_without_cuda_prints_as_before_and_says_no_snapshot_was_taken() {
    if !python_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (o, out) = watch_torch(
        dir.path(),
        &["python3", "-c", "import torch; print(torch.__version__)"],
        true,
        None,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "0.0.0+headroom.standin\n");
    assert!(
        o.stderr.contains(
            "torch 0.0.0+headroom.standin was imported but CUDA was never initialized in this process"
        ) && o.stderr.contains("note: no CUDA snapshot was taken"),
        "{}",
        o.stderr
    );
    // No snapshot, no section.
    assert!(!out.join("torch.md").exists());

    // A job that raises exits with its own status, its traceback on stderr.
    let again = dir.path().join("again");
    std::fs::create_dir(&again).unwrap();
    let (o, _) = watch_torch(
        &again,
        &["python3", "-c", "import torch; raise KeyError('boom')"],
        true,
        None,
    );
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("KeyError: 'boom'"), "{}", o.stderr);
}

fn row(md: &str, view: &str) -> u64 {
    let line = md
        .lines()
        .find(|l| l.starts_with(&format!("| {view} | ")))
        .unwrap_or_else(|| panic!("no {view} row in\n{md}"));
    line.split('|').nth(2).unwrap().trim().parse().unwrap()
}

#[test]
fn an_oom_on_the_standin_shows_every_view_apart_with_the_lines_and_explain() {
    if !python_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let job = root().join("tests/torch-standin/jobs/train_oom.py");
    let docs = root().join("docs");
    let (o, out) = watch_torch(
        dir.path(),
        &["python3", job.to_str().unwrap(), docs.to_str().unwrap()],
        true,
        None,
    );
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 MiB"
        ),
        "{}",
        o.stderr
    );

    let names: Vec<String> = std::fs::read_dir(out.join("torch"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for want in [
        "-001-mark-step.pickle",
        "-002-oom.pickle",
        "-003-exit.pickle",
    ] {
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("rank0-pid") && n.ends_with(want)),
            "{want} not in {names:?}"
        );
    }
    let md = std::fs::read_to_string(out.join("torch.md")).unwrap();
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.ends_with(&md),
        "report.md does not end with torch.md"
    );

    // The OOM, from the first snapshot that holds it; tiny-4g: 4 GiB, a 256 MiB context.
    let oom = md
        .split("#### Out of memory at trace entry")
        .nth(1)
        .expect("an OOM section")
        .split("#### At the device's true peak")
        .next()
        .unwrap();
    assert!(
        oom.contains("1.00 GiB (1073741824 bytes) requested on device 0"),
        "{oom}"
    );
    let reserved = 3 * GIB;
    assert_eq!(row(oom, "pytorch_reserved_bytes"), reserved);
    assert_eq!(row(oom, "pytorch_allocated_bytes"), reserved);
    assert_eq!(row(oom, "device_free_bytes"), 4 * GIB - CTX - reserved);
    assert_eq!(row(oom, "device_used_bytes"), CTX + reserved);
    assert_eq!(row(oom, "job_used_bytes"), CTX + reserved);
    assert_eq!(row(oom, "outside_pytorch_bytes"), CTX);
    assert_eq!(row(oom, "other_processes_bytes"), 0);
    let top: Vec<&str> = oom
        .split("Top source lines holding memory at that instant:")
        .nth(1)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("| train_oom.py"))
        .collect();
    assert_eq!(
        top,
        [
            "| train_oom.py:17 (&lt;listcomp&gt;) | 2147483648 | 2.00 GiB | 2 |",
            "| train_oom.py:21 (&lt;listcomp&gt;) | 1073741824 | 1.00 GiB | 2 |"
        ]
    );
    // explain reads the snapshot's exact figures, not a message's rounding.
    let figure = |name: &str| -> Vec<String> {
        oom.lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} figure in\n{oom}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    assert_eq!(
        figure("requested")[1..],
        ["1073741824", "bytes", "1073741824", "B"]
    );
    assert_eq!(
        figure("device_free")[1..],
        ["805306368", "bytes", "805306368", "B"]
    );
    assert_eq!(
        figure("allocated")[1..],
        ["3221225472", "bytes", "3221225472", "B"]
    );
    assert_eq!(
        figure("this_process")[1..],
        ["3489660928", "bytes", "3489660928", "B"]
    );
    assert!(oom.contains("cause: capacity"), "{oom}");
    assert!(
        md.contains("Imported as a run folder: `torch/rank0-pid"),
        "{md}"
    );
}

#[test]
fn two_ranks_leave_their_own_snapshots_at_a_signal_and_at_exit() {
    if !python_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (o, out) = watch_torch(
        dir.path(),
        &[
            "bash",
            "-c",
            "for r in 0 1; do RANK=$r python3 -c 'import os, signal, torch; t = torch.empty(64 << 20); os.kill(os.getpid(), signal.SIGUSR2); print(\"after\")' & done; wait",
        ],
        true,
        None,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    // SIGUSR2 took a snapshot and the job went on.
    assert_eq!(o.stdout, "after\nafter\n");
    let mut names: Vec<String> = std::fs::read_dir(out.join("torch"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pickle"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
    for (i, rank) in [(0, "rank0-pid"), (2, "rank1-pid")] {
        assert!(
            names[i].starts_with(rank) && names[i].ends_with("-001-signal.pickle"),
            "{names:?}"
        );
        assert!(
            names[i + 1].starts_with(rank) && names[i + 1].ends_with("-002-exit.pickle"),
            "{names:?}"
        );
    }
}

/// The stand-in's signatures are PyTorch's (torch/cuda/memory.py, torch/cuda/__init__.py of
/// PyPI's torch 2.15.0, as cited in the stand-in); `real_wheel::the_real_wheel_and_the_standin…`
/// requires that wheel to print the same lines.
#[test]
fn the_standin_has_the_signatures_the_bootstrap_calls() {
    if !python_or_skip() {
        return;
    }
    let script = root().join("tests/torch-standin/signatures.py");
    let o = Command::new("python3")
        .arg(&script)
        .env("PYTHONPATH", root().join("tests/torch-standin"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "torch.cuda.memory._record_memory_history(enabled: str | None = 'all', context: str | None = 'all', \
         stacks: str = 'all', max_entries: int = 9223372036854775807, device: 'Device' = None, \
         clear_history: bool = False, compile_context: bool = False, global_record_annotations: bool = False, \
         skip_actions: list[str] | None = None, record_pinned_host_memory: bool = False, record_cuda: bool = True)\n\
         torch.cuda.memory._dump_snapshot(filename='dump_snapshot.pickle', augment_with_fx_traces=False)\n\
         torch.cuda._lazy_call(callable, **kwargs)\n\
         torch._C._cuda_attach_out_of_memory_observer: callable True, refuses 0 and 2 arguments\n"
    );
}

/// PyPI's own torch wheel (the CUDA build, which on a machine without a GPU imports and says CUDA
/// is not available), from the venv `scripts/torch-venv` makes; HEADROOM_TORCH_PYTHON names its
/// python. `.ci/run` makes the venv beside the build and runs these after the suite.
mod real_wheel {
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::OnceLock;

    use super::{root, watch_torch};
    use crate::common::Out;

    /// The real torch, as a job sees it alone.
    #[derive(Clone)]
    struct Real {
        python: PathBuf,
        version: String,
        /// What `import torch` writes on stderr (nothing where numpy is installed beside it).
        import_stderr: String,
    }

    /// HEADROOM_TORCH_PYTHON and the real torch it imports; or a skip (a failure under CI=true)
    /// naming what is missing. Asked once: each import takes seconds.
    fn real_python_or_skip() -> Option<Real> {
        static REAL: OnceLock<Result<Real, String>> = OnceLock::new();
        let found = REAL.get_or_init(|| {
            let python = std::env::var_os("HEADROOM_TORCH_PYTHON").ok_or(
                "HEADROOM_TORCH_PYTHON is not set (scripts/torch-venv makes the venv and prints \
                 its python)",
            )?;
            let python = PathBuf::from(python);
            let job = "import torch; print(torch.__version__); print(torch.__file__)";
            let o = direct(&python, &["-c", job], None);
            let standin = root().join("tests/torch-standin").display().to_string();
            match o.stdout.lines().collect::<Vec<_>>()[..] {
                [version, file] if o.code == 0 && !file.starts_with(&standin) => Ok(Real {
                    python,
                    version: version.to_string(),
                    import_stderr: o.stderr.clone(),
                }),
                _ => Err(format!(
                    "HEADROOM_TORCH_PYTHON={}: import torch: exit {}, {}{}",
                    python.display(),
                    o.code,
                    o.stdout.trim(),
                    o.stderr.trim()
                )),
            }
        });
        match found {
            Ok(found) => Some(found.clone()),
            Err(why) => {
                crate::common::skip::missing("watch_torch::real_wheel: PyPI's torch wheel", why);
                None
            }
        }
    }

    /// The job run as it is, without headroom (no PYTHONPATH but `path`).
    fn direct(python: &Path, args: &[&str], path: Option<&Path>) -> Out {
        let mut cmd = Command::new(python);
        cmd.args(args).env_remove("PYTHONPATH");
        if let Some(p) = path {
            cmd.env("PYTHONPATH", p);
        }
        let o = cmd.output().unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// The notes file the bootstrap left for the job's one process.
    fn the_one_note(out: &Path) -> String {
        let notes: Vec<PathBuf> = std::fs::read_dir(out.join("torch"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        let name = notes[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("rank0-pid") && name.ends_with(".notes"),
            "{name}"
        );
        std::fs::read_to_string(&notes[0]).unwrap()
    }

    fn no_snapshot(version: &str) -> String {
        format!(
            "no CUDA snapshot was taken: torch {version} was imported but CUDA was never \
             initialized in this process"
        )
    }

    #[test]
    fn import_torch_prints_the_version_unchanged_and_the_folder_says_no_snapshot_was_taken() {
        let Some(Real {
            python,
            version,
            import_stderr,
        }) = real_python_or_skip()
        else {
            return;
        };
        let py = python.to_str().unwrap();
        let job = "import torch; print(torch.__version__)";
        let dir = tempfile::tempdir().unwrap();
        let (o, out) = watch_torch(dir.path(), &[py, "-c", job], false, None);
        assert_eq!(o.code, 0, "{}", o.stderr);
        // The job's stdout, as it prints it alone.
        assert_eq!(o.stdout, format!("{version}\n"));
        // The job's stderr (import torch's alone), then headroom's lines, the notes among them.
        assert!(
            o.stderr.starts_with(&import_stderr)
                && o.stderr[import_stderr.len()..].starts_with("note: "),
            "{}",
            o.stderr
        );
        let notes: Vec<&str> = o.stderr[import_stderr.len()..]
            .lines()
            .filter(|l| l.contains("snapshot"))
            .collect();
        assert_eq!(notes.len(), 2, "{}", o.stderr);
        assert!(
            notes[0].starts_with("note: torch (rank0-pid")
                && notes[0].ends_with(&format!("): {}", no_snapshot(&version))),
            "{}",
            o.stderr
        );
        assert_eq!(
            notes[1],
            "note: no CUDA snapshot was taken: no process of the job initialized CUDA through torch"
        );
        // The folder says so: the process's notes, and no snapshot, no section.
        assert_eq!(the_one_note(&out), format!("{}\n", no_snapshot(&version)));
        assert!(!out.join("torch.md").exists());
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary["exit_code"], 0);
    }

    #[test]
    fn a_job_that_raises_or_exits_keeps_its_code_and_its_traceback() {
        let Some(Real {
            python,
            import_stderr,
            ..
        }) = real_python_or_skip()
        else {
            return;
        };
        let py = python.to_str().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let raises = "import torch\nprint('before')\nraise KeyError('boom from ' + torch.__name__)";
        let alone = direct(&python, &["-c", raises], None);
        assert_eq!(alone.code, 1, "{}", alone.stderr);
        assert!(
            alone.stderr.starts_with(&format!(
                "{import_stderr}Traceback (most recent call last):\n"
            )) && alone.stderr.ends_with("KeyError: 'boom from torch'\n"),
            "{}",
            alone.stderr
        );
        for (job, code, stderr) in [
            (raises, 1, alone.stderr.as_str()),
            (
                "import sys, torch; print('before'); sys.exit(7)",
                7,
                import_stderr.as_str(),
            ),
        ] {
            let here = dir.path().join(format!("exit-{code}"));
            std::fs::create_dir(&here).unwrap();
            let (o, _) = watch_torch(&here, &[py, "-c", job], false, None);
            assert_eq!(o.code, code, "{}", o.stderr);
            assert_eq!(o.stdout, "before\n");
            // Its stderr, byte for byte, then headroom's own lines.
            assert!(
                o.stderr.starts_with(stderr) && o.stderr[stderr.len()..].starts_with("note: "),
                "alone:\n{stderr}\nwatched:\n{}",
                o.stderr
            );
        }
    }

    #[test]
    fn a_users_sitecustomize_that_imports_torch_still_runs() {
        let Some(Real {
            python, version, ..
        }) = real_python_or_skip()
        else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let site = dir.path().join("site");
        std::fs::create_dir(&site).unwrap();
        let mark = dir.path().join("user-site-ran");
        std::fs::write(
            site.join("sitecustomize.py"),
            format!(
                "import torch\nopen({:?}, 'w').write('torch ' + torch.__version__)\n",
                mark.display().to_string()
            ),
        )
        .unwrap();
        let job = "import sys, torch; print(sys.modules['sitecustomize'].__file__)";
        let (o, out) = watch_torch(
            dir.path(),
            &[python.to_str().unwrap(), "-c", job],
            false,
            Some(&site),
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert_eq!(
            o.stdout,
            format!("{}\n", site.join("sitecustomize.py").display())
        );
        assert_eq!(
            std::fs::read_to_string(&mark).unwrap(),
            format!("torch {version}")
        );
        // torch, first imported by the user's sitecustomize, was seen by headroom's hook.
        assert_eq!(the_one_note(&out), format!("{}\n", no_snapshot(&version)));
    }

    /// scripts/gpu-check's training step (scripts/torch_train_step.py) with the real wheel: where
    /// CUDA is absent it says so and exits 3, which gpu-check records as not run; its model and
    /// optimizer step runs on the CPU.
    #[test]
    fn the_training_step_says_cuda_is_absent_and_its_model_runs_on_the_cpu() {
        let Some(Real {
            python, version, ..
        }) = real_python_or_skip()
        else {
            return;
        };
        let script = root().join("scripts/torch_train_step.py");
        let script = script.to_str().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (o, out) = watch_torch(dir.path(), &[python.to_str().unwrap(), script], false, None);
        assert_eq!(o.code, 3, "{}", o.stderr);
        assert_eq!(
            o.stdout,
            format!("not run: torch {version}: torch.cuda.is_available() is False\n")
        );
        assert!(!out.join("torch.md").exists());

        let cpu = direct(&python, &[script, "--cpu"], None);
        assert_eq!(cpu.code, 0, "{}", cpu.stderr);
        let lines: Vec<&str> = cpu.stdout.lines().collect();
        // Linear(1024, 4096) and Linear(4096, 1024) in float32: weights and biases.
        let params = 4 * (2 * 1024 * 4096 + 4096 + 1024);
        assert_eq!(
            lines[..4],
            [
                format!("torch_version {version}"),
                "device cpu".to_string(),
                format!("parameter_bytes {params}"),
                "steps 1".to_string()
            ]
        );
        let loss: f64 = lines[4]
            .strip_prefix("final_loss ")
            .unwrap()
            .parse()
            .unwrap();
        assert!(loss.is_finite() && loss > 0.0, "{}", cpu.stdout);
        assert_eq!(lines.len(), 5, "{}", cpu.stdout);
    }

    /// Every signature the bootstrap uses, printed by the real wheel and by the stand-in
    /// (tests/torch-standin/signatures.py under each): identical, line for line.
    #[test]
    fn the_real_wheel_and_the_standin_agree_on_every_signature_the_bootstrap_calls() {
        let Some(Real {
            python,
            version,
            import_stderr,
        }) = real_python_or_skip()
        else {
            return;
        };
        let script = root().join("tests/torch-standin/signatures.py");
        let script = script.to_str().unwrap();
        let real = direct(&python, &[script], None);
        assert_eq!(real.code, 0, "{}", real.stderr);
        let standin = direct(
            Path::new("python3"),
            &[script],
            Some(&root().join("tests/torch-standin")),
        );
        assert_eq!(standin.code, 0, "{}", standin.stderr);
        // Each says which torch it read (the rest of its stderr is empty).
        assert_eq!(real.stderr, format!("{import_stderr}torch {version}\n"));
        assert_eq!(standin.stderr, "torch 0.0.0+headroom.standin\n");
        assert_eq!(real.stdout.lines().count(), 4, "{}", real.stdout);
        for (r, s) in real.stdout.lines().zip(standin.stdout.lines()) {
            assert_eq!(
                r, s,
                "the real wheel (left) and the stand-in (right) differ"
            );
        }
        assert_eq!(real.stdout, standin.stdout);
    }
}
