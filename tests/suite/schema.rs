//! The JSON Schemas in `docs/schema/` are what the types generate (a field changed without
//! regenerating fails here), every JSON output validates against its schema, and
//! docs/formats.md lists every value of each status, result and cause field. Regenerate the schemas with
//! `cargo test --test suite -- --ignored schema::regenerate_schemas` and review the diff.

use std::path::PathBuf;

use crate::common::schema::check;
use crate::common::*;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn pretty(v: &serde_json::Value) -> String {
    let mut t = serde_json::to_string_pretty(v).unwrap();
    t.push('\n');
    t
}

#[test]
#[ignore = "rewrites docs/schema; run on purpose after a type changes"]
fn regenerate_schemas() {
    let dir = root().join("docs/schema");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, schema) in headroom::schema::documents() {
        std::fs::write(dir.join(name), pretty(&schema)).unwrap();
    }
}

#[test]
fn the_committed_schemas_are_what_the_types_generate() {
    for (name, schema) in headroom::schema::documents() {
        let path = root().join("docs/schema").join(name);
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (regenerate the schemas)", path.display()));
        assert!(
            committed == pretty(&schema),
            "{} is not what the types generate: a field changed; regenerate the schemas",
            path.display()
        );
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn every_json_output_matches_its_schema() {
    let tmp = tempfile::tempdir().unwrap();
    // The committed fixtures, the killed run's included.
    for f in ["runs/tiny-4g", "runs/h100-80g", "killed/tiny-4g"] {
        let p = root().join("tests/fixtures").join(f).join("summary.json");
        check("summary", &json(&std::fs::read_to_string(&p).unwrap()), f);
    }
    // Runs that end every way: completed, OOM (each cause's scenario), stopped at the floor,
    // skipped, with graphs and with a stream-ordered pool. run_tiny checks each summary.json.
    let floor = workload(
        tmp.path(),
        "floor",
        "[[phase]]\nname = \"a\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"95% of total\" }]\n",
    );
    let (out, s, _) = run_tiny(tmp.path(), &floor, &[]);
    assert_eq!(
        (out.code, s["status"].as_str()),
        (2, Some("stopped_at_floor"))
    );
    let serving = root().join("workloads/serving.toml");
    let (out, s, _) = run_tiny(tmp.path(), &serving, &["--skip-unfit"]);
    assert_eq!((out.code, s["status"].as_str()), (0, Some("skipped")));
    for w in [
        "quickstart",
        "graphs",
        "pool-reuse",
        "oom/fragmentation",
        "oom/pending-free",
        "oom/fraction-cap",
        "oom/graph-pool",
        "oom/outside-allocator",
    ] {
        let wl = root().join(format!("workloads/{w}.toml"));
        let (out, s, _) = run_tiny(tmp.path(), &wl, &[]);
        assert!(out.code <= 2 && !s.is_null(), "{w}: {}", out.stderr);
    }
    let (_, _, quick) = run_tiny(tmp.path(), &root().join("workloads/quickstart.toml"), &[]);

    let r = headroom(
        tmp.path(),
        &[
            "bandwidth",
            "--size",
            "64MiB",
            "--profile",
            "tiny-4g",
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    check("bandwidth", &json(&r.stdout), "bandwidth --json");

    let log = quick.join("alloc-log.csv");
    let r = headroom(
        tmp.path(),
        &[
            "replay",
            log.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--json",
        ],
    );
    assert!(r.code <= 1, "{}", r.stderr);
    check("replay", &json(&r.stdout), "replay --json");

    let r = headroom(
        &root(),
        &[
            "compare",
            "tests/fixtures/runs/tiny-4g",
            "tests/fixtures/runs/h100-80g",
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    check("compare", &json(&r.stdout), "compare --json");

    let out = tmp.path().join("validate");
    let r = headroom(
        &root(),
        &[
            "validate",
            "workloads/plans/tiny.toml",
            "--profile",
            "tiny-4g",
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
    );
    assert!(r.code <= 1, "{}", r.stderr);
    let v = std::fs::read_to_string(out.join("validation.json")).unwrap();
    check("validation", &json(&v), "validation.json");
    for probe in std::fs::read_dir(&out).unwrap() {
        let s = probe.unwrap().path().join("summary.json");
        if s.is_file() {
            check(
                "summary",
                &json(&std::fs::read_to_string(&s).unwrap()),
                &s.display().to_string(),
            );
        }
    }

    // Devices, a plan's arithmetic, and a crosscheck of two folders of runs.
    for args in [
        &["devices", "--profile", "tiny-4g", "--json"][..],
        &["devices", "--profile", "8xh100-80g", "--json"],
        &["devices", "--backend", "sim", "--json"],
    ] {
        let r = headroom(tmp.path(), args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        check("devices", &json(&r.stdout), &args.join(" "));
    }
    let r = headroom(&root(), &["plan", "workloads/plans/tiny.toml", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    check("plan", &json(&r.stdout), "plan --json");
    let r = headroom(
        &root(),
        &[
            "plan",
            "--model",
            "openai/gpt-oss-20b",
            "--engine",
            "vllm",
            "--profile",
            "h100-80g",
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    check("model-plan", &json(&r.stdout), "plan --model --json");
    let v = tmp.path().join("validate-model");
    let r = headroom(
        tmp.path(),
        &[
            "validate",
            "--model",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "--engine",
            "vllm",
            "--profile",
            "t4-16g",
            "--out",
            v.to_str().unwrap(),
            "--json",
            "--",
            "--max-model-len",
            "4096",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    check(
        "validation-model",
        &json(&r.stdout),
        "validate --model --json",
    );
    let (a, b) = (tmp.path().join("runs-a"), tmp.path().join("runs-b"));
    for d in [&a, &b] {
        for w in ["quickstart", "oom/pending-free"] {
            let o = headroom(
                &root(),
                &[
                    "run",
                    &format!("workloads/{w}.toml"),
                    "--profile",
                    "tiny-4g",
                    "--results",
                    d.to_str().unwrap(),
                    "-q",
                ],
            );
            assert!(o.code <= 1, "{}", o.stderr);
        }
    }
    let r = headroom(
        tmp.path(),
        &[
            "crosscheck",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    check("crosscheck", &json(&r.stdout), "crosscheck --json");

    // Every JSON file the runs, validations and probes above wrote, whatever its folder.
    let mut checked = 0;
    let mut stack = vec![tmp.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let schema = match name.as_str() {
                "summary.json" => "summary",
                "validation.json" => "validation",
                "validation-model.json" => "validation-model",
                "node.json" => "node",
                "bandwidth.json" => "bandwidth",
                // Chrome's trace-event format, which Perfetto reads; not one of ours.
                "trace.json" => continue,
                other if other.ends_with(".json") => panic!("{}: no schema", p.display()),
                _ => continue,
            };
            check(
                schema,
                &json(&std::fs::read_to_string(&p).unwrap()),
                &p.display().to_string(),
            );
            checked += 1;
        }
    }
    // Ten runs, a validation with its probes, four runs for the crosscheck.
    assert!(checked >= 15, "{checked} JSON files");

    for log in std::fs::read_dir(root().join("tests/fixtures/oom-messages")).unwrap() {
        let p = log.unwrap().path();
        if p.extension().is_some_and(|x| x == "log") {
            let r = headroom(
                tmp.path(),
                &["explain", "--file", p.to_str().unwrap(), "--json"],
            );
            assert!(r.code <= 1, "{}", r.stderr);
            check("explain", &json(&r.stdout), &p.display().to_string());
        }
    }
}

/// The values an enum field may take, from its schema (`enum` or `oneOf` of `const`s).
fn values(schema: &serde_json::Value, def: &str) -> Vec<String> {
    let d = &schema["$defs"][def];
    let mut out: Vec<String> = d["enum"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    for alt in d["oneOf"].as_array().into_iter().flatten() {
        if let Some(c) = alt["const"].as_str() {
            out.push(c.to_string());
        }
        for e in alt["enum"].as_array().into_iter().flatten() {
            out.extend(e.as_str().map(str::to_string));
        }
    }
    assert!(!out.is_empty(), "{def} has no values in the schema");
    out
}

#[test]
fn the_formats_page_lists_every_status_and_cause() {
    let formats = std::fs::read_to_string(root().join("docs/formats.md")).unwrap();
    let summary = &headroom::schema::documents()[0].1;
    for def in ["RunStatus", "PhaseStatus", "Cause", "RefusedBy"] {
        for v in values(summary, def) {
            assert!(
                formats.contains(&format!("`{v}`")),
                "docs/formats.md does not list {def} `{v}`"
            );
        }
    }
}

/// The validator the outputs go through refuses what each keyword forbids, on a schema written
/// for it and on a real summary with one thing broken at a time.
#[test]
fn the_validator_refuses_what_the_schemas_forbid() {
    use crate::common::schema::errors;
    if !crate::common::schema::tools_or_skip(
        "schema::the_validator_refuses_what_the_schemas_forbid",
    ) {
        return;
    }
    let schema = json(
        r##"{
          "type": "object",
          "required": ["bytes", "kind"],
          "additionalProperties": false,
          "properties": {
            "bytes": { "type": "integer", "minimum": 0, "format": "uint64" },
            "kind": { "$ref": "#/$defs/Kind" },
            "peaks": { "type": "array", "items": { "type": ["integer", "null"] }, "maxItems": 2 },
            "pick": { "oneOf": [{ "type": "string" }, { "const": 1 }] },
            "any": { "anyOf": [{ "type": "boolean" }, { "enum": ["x", 2] }] }
          },
          "$defs": { "Kind": { "type": "string", "enum": ["ok", "oom"] } }
        }"##,
    );
    let good = json(r#"{"bytes": 18446744073709551615, "kind": "oom", "peaks": [1, null]}"#);
    assert_eq!(errors(&schema, &good), Vec::<String>::new());
    assert!(
        errors(
            &schema,
            &json(r#"{"bytes": 0, "kind": "ok", "pick": 1.0, "any": 2}"#)
        )
        .is_empty()
    );
    for bad in [
        r#"{"kind": "ok"}"#,
        r#"{"bytes": -1, "kind": "ok"}"#,
        r#"{"bytes": 1.5, "kind": "ok"}"#,
        r#"{"bytes": "1", "kind": "ok"}"#,
        r#"{"bytes": 1, "kind": "maybe"}"#,
        r#"{"bytes": 1, "kind": "ok", "extra": 0}"#,
        r#"{"bytes": 1, "kind": "ok", "peaks": [1, 2, 3]}"#,
        r#"{"bytes": 1, "kind": "ok", "peaks": ["1"]}"#,
        r#"{"bytes": 1, "kind": "ok", "pick": 2}"#,
        r#"{"bytes": 1, "kind": "ok", "any": "y"}"#,
        r#"[]"#,
    ] {
        assert!(!errors(&schema, &json(bad)).is_empty(), "accepted {bad}");
    }

    let summary: serde_json::Value = json(
        &std::fs::read_to_string(root().join("tests/fixtures/runs/tiny-4g/summary.json")).unwrap(),
    );
    let committed =
        json(&std::fs::read_to_string(root().join("docs/schema/summary.schema.json")).unwrap());
    assert!(errors(&committed, &summary).is_empty());
    let broken: [(&str, serde_json::Value); 3] = [
        ("status", serde_json::json!("finished")),
        ("exit_code", serde_json::json!("0")),
        ("end_ns", serde_json::json!(-5)),
    ];
    for (field, value) in broken {
        let mut s = summary.clone();
        s[field] = value;
        assert!(
            !errors(&committed, &s).is_empty(),
            "accepted {field} = {}",
            s[field]
        );
    }
    // Closed: a field the type does not name is refused, at the top and inside.
    for (at, field) in [("", "statuss"), ("workload", "nmae"), ("idle", "kernel")] {
        let mut s = summary.clone();
        let obj = if at.is_empty() { &mut s } else { &mut s[at] };
        obj.as_object_mut()
            .unwrap()
            .insert(field.into(), serde_json::json!(0));
        assert!(
            !errors(&committed, &s).is_empty(),
            "accepted an unknown field {at}.{field}"
        );
    }
    let mut s = summary.clone();
    s.as_object_mut().unwrap().remove("workload");
    assert!(
        !errors(&committed, &s).is_empty(),
        "accepted a summary without its workload"
    );
}
