//! Validation of JSON outputs against the committed schemas in `docs/schema/`, by
//! python-jsonschema (Draft 2020-12, the implementation check-jsonschema is built on) rather
//! than by a validator of our own: `scripts/py-tools` installs it under target/ci-tools on
//! first use, and one `scripts/schema_check.py` process per test binary answers every check,
//! so the suite pays Python's start once. A compiled validator crate would cost the build
//! more than the whole suite spends here. Without Python or PyPI the checks are skipped with
//! the reason printed once (they fail under `CI=true`, where PyPI is reachable).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

struct Server {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// The PYTHONPATH holding jsonschema and polars, or why there is none.
pub fn py_tools() -> Result<String, String> {
    static DIR: OnceLock<Result<String, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/py-tools"))
            .output()
            .map_err(|e| format!("cannot run scripts/py-tools: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    })
    .clone()
}

/// Ok(false) after printing why, when the Python tools are missing outside CI.
pub fn tools_or_skip(what: &str) -> bool {
    match py_tools() {
        Ok(_) => true,
        Err(why) => {
            static SAID: OnceLock<()> = OnceLock::new();
            if super::skip::strict() || SAID.set(()).is_ok() {
                super::skip::missing(
                    &format!("{what}: Python's jsonschema (scripts/py-tools)"),
                    &why,
                );
            }
            false
        }
    }
}

fn server() -> Option<&'static Mutex<Server>> {
    static SERVER: OnceLock<Option<Mutex<Server>>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            if !tools_or_skip("schema validation") {
                return None;
            }
            let mut child = Command::new("python3")
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/schema_check.py"))
                .env("PYTHONPATH", py_tools().unwrap())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3 runs scripts/schema_check.py");
            let stdin = child.stdin.take().unwrap();
            let stdout = BufReader::new(child.stdout.take().unwrap());
            Some(Mutex::new(Server {
                _child: child,
                stdin,
                stdout,
            }))
        })
        .as_ref()
}

/// Up to five reasons `doc` does not match `schema` (a name under `docs/schema/` or a whole
/// schema object), each with the instance's JSON pointer; None when validation is skipped.
pub fn errors_of(schema: Value, doc: &Value) -> Option<Vec<String>> {
    let server = server()?;
    let mut s = server.lock().unwrap_or_else(|p| p.into_inner());
    let mut line =
        serde_json::to_string(&serde_json::json!({"schema": schema, "doc": doc})).unwrap();
    line.push('\n');
    s.stdin.write_all(line.as_bytes()).unwrap();
    s.stdin.flush().unwrap();
    let mut answer = String::new();
    s.stdout.read_line(&mut answer).unwrap();
    let v: Value = serde_json::from_str(&answer)
        .unwrap_or_else(|e| panic!("scripts/schema_check.py answered {answer:?}: {e}"));
    Some(
        v["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap().to_string())
            .collect(),
    )
}

/// Checks `value` against `docs/schema/<name>.schema.json`; panics naming what does not fit.
pub fn check(name: &str, value: &Value, what: &str) {
    if let Some(errors) = errors_of(Value::String(name.to_string()), value) {
        assert!(
            errors.is_empty(),
            "{what} does not match docs/schema/{name}.schema.json: {errors:#?}"
        );
    }
}

/// Up to five reasons `value` does not match `schema` (a whole schema document); empty when
/// validation is skipped.
pub fn errors(schema: &Value, value: &Value) -> Vec<String> {
    errors_of(schema.clone(), value).unwrap_or_default()
}
