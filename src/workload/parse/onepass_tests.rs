//! The one-pass reader against the `toml` crate's: the same workload from every file it reads,
//! and the general reader's result (and error) for every file it leaves.

use std::path::{Path, PathBuf};

use crate::workload::parse::{parse, parse_general, parse_one_pass};

const FILE: &str = "w.toml";

/// What the general reader makes of `text`, as text (a workload or the error).
fn general(text: &str) -> String {
    match parse_general(text, Path::new(FILE)) {
        Ok(w) => format!("{w:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// Asserts that the one-pass reader reads `text`, to what the general reader makes of it.
fn reads_alike(text: &str) {
    let Some(w) = parse_one_pass(text, Path::new(FILE)) else {
        panic!(
            "the one-pass reader gave up on:\n{text}\nwhich the general reader reads as {}",
            general(text)
        );
    };
    assert_eq!(format!("{w:?}"), general(text), "read differently:\n{text}");
}

/// Asserts that the one-pass reader leaves `text` to the general reader, and that `parse` then
/// gives what the general reader does.
fn left_to_general(text: &str) {
    assert!(
        parse_one_pass(text, Path::new(FILE)).is_none(),
        "the one-pass reader read:\n{text}"
    );
    let parsed = match parse(text, Path::new(FILE)) {
        Ok(w) => format!("{w:?}"),
        Err(e) => format!("error: {e}"),
    };
    assert_eq!(parsed, general(text));
}

fn doc(steps: &str) -> String {
    format!("[workload]\nname = \"t\"\n\n[[phase]]\nname = \"p\"\nsteps = [\n{steps}\n]\n")
}

/// Every workload file the project ships (the examples, the OOM reproductions, the CI gate,
/// the fixtures) is read in one pass, to the same workload.
#[test]
fn every_shipped_workload_is_read_in_one_pass_alike() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut dirs = vec![
        root.join("workloads"),
        root.join("docs"),
        root.join("tests/fixtures"),
    ];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                if text.contains("[[phase]]") {
                    files.push((path, crate::workload::Rank::SINGLE.substitute(&text)));
                }
            }
        }
    }
    assert!(files.len() >= 20, "{} workload files found", files.len());
    for (path, text) in files {
        let Some(w) = parse_one_pass(&text, Path::new(FILE)) else {
            panic!("{} is left to the general reader", path.display());
        };
        assert_eq!(format!("{w:?}"), general(&text), "{}", path.display());
    }
}

#[test]
fn scalars_decode_as_the_toml_crate_decodes_them() {
    // Strings: escapes, unicode, literal and multi-line forms.
    reads_alike(&format!(
        "[workload]\nname = \"t \\\"q\\\" \\u00e9 \\U0001F600\"\ndescription = \"\"\"\nline \\n one\\\n   two\\ttab\"\"\"\n\n[[phase]]\nname = 'lit \\ eral'\nsteps = [\n{}\n]\n",
        r#"{ op = "allocate", name = "a\\b", size = '''1 GiB''' }, { op = "free", name = """a\\b""" }"#
    ));
    // Integers in every radix, with underscores and signs; floats in every form.
    reads_alike(&doc(
        r#"{ op = "allocate", name = "w", size = 1_048_576, count = 0x3 },
{ op = "fill", name = "w", seed = 0o17 },
{ op = "verify", name = "w", seed = 0b1111 },
{ op = "triad", a = "w", b = "w", c = "w", scalar = -1.5e-3 },
{ op = "triad", a = "w", b = "w", c = "w", scalar = +2E2 },
{ op = "triad", a = "w", b = "w", c = "w", scalar = 3_000.5 },
{ op = "triad", a = "w", b = "w", c = "w", scalar = -0.0 },
{ op = "free", name = "w" }"#,
    ));
    // Booleans and special floats in other sections.
    reads_alike(&format!(
        "[workload]\nname = \"t\"\n[settings]\nallow_oom = true\n[expect]\noom = false\n[expect.peak]\nalloc_reserved_bytes = 1073741824\n{}",
        doc("{ op = \"allocate\", name = \"w\", size = \"1MiB\" }")
            .replace("[workload]\nname = \"t\"\n", "")
    ));
}

#[test]
fn layout_forms_read_alike() {
    // Comments everywhere a comment may be, CRLF line ends, blank lines, a byte-order mark.
    reads_alike(
        "\u{feff}# a workload\r\n[workload] # the head\r\nname = \"t\"   # its name\r\n\r\n[[phase]]\r\nname = \"p\"\r\nsteps = [ # the steps\r\n  { op = \"allocate\", name = \"w\", size = \"1MiB\" }, # first\r\n  # between\r\n  { op = \"free\", name = \"w\" },\r\n]\r\n",
    );
    // TOML 1.1 inline tables: newlines, comments and a trailing comma inside; nested arrays
    // and tables; empty arrays; quoted keys; a steps array with no trailing comma.
    reads_alike(&doc(r#"{
    op = "repeat", # the loop
    times = 2,
    steps = [
      { op = "allocate", "name" = "w", size = "1MiB" },
      { op = "free", name = "w" }
    ],
  },
{ op = "weights", total = "64MiB" }, { op = "weights", total = "64MiB", name = "w2" }"#));
    // Steps before the name, several phases, every section.
    reads_alike(
        "[workload]\nname = \"t\"\ndescription = \"d\"\n[settings]\nsample_interval = \"2ms\"\n[allocator]\nkind = \"caching\"\n[expect]\noom = \"none\"\n[[phase]]\nsteps = [{ op = \"allocate\", name = \"w\", size = \"1MiB\" }]\nname = \"first\"\n[[phase]]\nname = \"second\"\nsteps = [{ op = \"free\", name = \"w\" }]\n",
    );
    // A capture's inner steps are kept as written.
    reads_alike(&doc(
        r#"{ op = "capture", graph = "g", stream = "s", steps = [{ op = "allocate", name = "t", size = "1MiB" }, { op = "free", name = "t" }] },
{ op = "instantiate", graph = "g" }"#,
    ));
}

#[test]
fn what_it_does_not_read_is_left_to_the_toml_crate() {
    let step = "{ op = \"allocate\", name = \"w\", size = \"1MiB\" }";
    for text in [
        // TOML it does not read itself: dotted keys, datetimes, deeper headers, array tables
        // under a phase, keys at the top level, a section opened twice.
        doc(step).replace("name = \"t\"", "name.first = \"t\""),
        doc(step).replace("name = \"t\"", "name = \"t\"\nwhen = 1979-05-27T07:32:00Z"),
        doc(step).replace("name = \"t\"", "name = \"t\"\nwhen = 1979-05-27 07:32:00"),
        format!("{}[expect.peak.x]\ny = 1\n", doc(step)),
        "[workload]\nname = \"t\"\n[[phase]]\nname = \"p\"\n[[phase.steps]]\nop = \"allocate\"\nname = \"w\"\nsize = \"1MiB\"\n".to_string(),
        format!("title = \"x\"\n{}", doc(step)),
        format!("{}[workload]\nname = \"u\"\n", doc(step)),
        format!("[expect.peak]\nalloc_reserved = 1\n{}[expect]\noom = false\n", doc(step)),
        format!("phase = [{{ name = \"p\", steps = [{step}] }}]\n[workload]\nname = \"t\"\n"),
        // Errors, which the general reader names.
        doc(step).replace("name = \"t\"", "name = \"t\"\nname = \"u\""),
        doc("{ op = \"allocate\", name = \"w\", name = \"v\", size = \"1MiB\" }"),
        doc("{ op = \"allocate\", name = \"w\", size = \"1MiB\", colour = \"red\" }"),
        doc("{ op = \"allocate\", name = \"w\", size = 9223372036854775808 }"),
        doc("{ op = \"allocate\", name = \"w\", size = 01 }"),
        doc("{ op = \"allocate\", name = \"w\\q\", size = \"1MiB\" }"),
        doc("{ op = \"allocate\", name = \"w\", size = \"1MiB\" }, \"free\""),
        doc("{ op = \"allocate\", name = \"w\", size = \"1MiB\" },,"),
        doc("{ op = \"allocate\" name = \"w\" }"),
        doc(step).replace("[[phase]]", "[ [phase] ]"),
        doc(step).replace("[[phase]]", "[[phase]] extra"),
        doc(step).replace("name = \"p\"", "name = \"p\"\ncolour = \"red\""),
        doc(step).replace("name = \"p\"\n", ""),
        doc(step).replace("name = \"p\"", "name = 5"),
        format!("# a bell \u{7}\n{}", doc(step)),
        "[workload]\nname = \"t\"\n".to_string(),
        "[workload]\nname = \"t\"\nsteps = [\n".to_string(),
        format!("[workload]\nname = \"t\"\n{}", "[[phase]]\nname = \"p\"\nsteps = []\n"),
        doc(&"[".repeat(100)),
        doc(&format!(
            "{{ op = \"repeat\", times = 1, steps = {}{} }}",
            "[".repeat(100),
            "]".repeat(100)
        )),
    ] {
        left_to_general(&text);
    }
}

/// A file that reads in one pass but fails a later check (a phase name used twice, no
/// workload name) gives the general reader's error.
#[test]
fn later_errors_are_named_by_the_general_reader() {
    let step = "{ op = \"allocate\", name = \"w\", size = \"1MiB\" }";
    for text in [
        format!("{}[[phase]]\nname = \"p\"\nsteps = [{step}]\n", doc(step)),
        doc(step).replace("name = \"t\"", "description = \"no name\""),
        doc(step).replace("name = \"p\"", "name = \"\""),
        doc(step).replace(
            "[workload]\nname = \"t\"",
            "[workload]\nname = \"t\"\nmin_total_bytes = 0",
        ),
        doc("{ op = \"allocate\", name = \"w\", size = \"1MiB\" }")
            .replace("[workload]", "[workload]\n[unknown]\nx = 1\n[other]"),
    ] {
        assert!(parse_one_pass(&text, Path::new(FILE)).is_none(), "{text}");
        let err = parse(&text, Path::new(FILE)).unwrap_err();
        assert_eq!(format!("error: {err}"), general(&text));
    }
}

/// `repeat` and `capture` steps keep their inner steps without serde's buffer: the same step,
/// and the same error, as `try_into`.
#[test]
fn nested_steps_are_moved_into_the_step_alike() {
    use crate::workload::parse::step_from_value;
    use crate::workload::step::Step;
    let inner = "steps = [{ op = \"allocate\", name = \"w\", size = \"1MiB\" }, { op = \"free\", name = \"w\" }]";
    for table in [
        format!("op = \"repeat\"\ntimes = 3\n{inner}"),
        format!("op = \"capture\"\ngraph = \"g\"\nstream = \"s\"\n{inner}"),
        "op = \"repeat\"\ntimes = 3\nsteps = []".to_string(),
        // Errors: a missing field, an unknown one, a bad value, steps where none belong.
        format!("op = \"repeat\"\n{inner}"),
        format!("op = \"capture\"\ngraph = \"g\"\n{inner}"),
        format!("op = \"repeat\"\ntimes = 3\ncolour = 1\n{inner}"),
        format!("op = \"repeat\"\ntimes = -3\n{inner}"),
        "op = \"repeat\"\ntimes = 3\nsteps = 5".to_string(),
        format!("op = \"allocate\"\nname = \"w\"\nsize = \"1MiB\"\n{inner}"),
        format!("op = \"nothing\"\n{inner}"),
        inner.to_string(),
    ] {
        let value: toml::Value = toml::from_str(&table).unwrap();
        let want: Result<Step, String> = value
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| e.to_string());
        let got = step_from_value(value).map_err(|e| e.to_string());
        assert_eq!(got, want, "{table}");
    }
}

/// An op written with a newline inside its quotes (`"spi\n"`) is refused in one line: the
/// step's place and the message write the newline as `\n`.
#[test]
fn an_op_with_a_newline_in_it_is_refused_in_one_line() {
    let text = "[workload]\nname = \"w\"\n[[phase]]\nname = \"p\"\nsteps = [\n  { op = \"spi\\n\", for = \"1s\" },\n]\n";
    let e = parse(text, Path::new(FILE)).unwrap_err().to_string();
    assert!(!e.contains('\n'), "{e:?}");
    assert!(e.starts_with("w.toml: phase 1"), "{e}");
    assert!(e.contains("step 1 (spi\\n)"), "{e}");
}
