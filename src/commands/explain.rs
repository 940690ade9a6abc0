//! `headroom explain [MESSAGE…] [--file PATH|-] [--json]`.

use std::io::{IsTerminal, Read};

use anyhow::Context;

use crate::cli::ExplainArgs;
use crate::explain::{explain_text, render};

/// Exit 0 when at least one message was explained, 1 when none was recognized.
pub fn explain(args: &ExplainArgs) -> anyhow::Result<i32> {
    let text = read_input(args)?;
    let report = explain_text(&text);
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        crate::out!("{}", render::render_text(&report))?;
    }
    Ok(if report.explanations.is_empty() { 1 } else { 0 })
}

fn read_input(args: &ExplainArgs) -> anyhow::Result<String> {
    if !args.message.is_empty() {
        return Ok(args.message.join(" "));
    }
    let bytes = match args.file.as_deref() {
        Some(path) if path.as_os_str() != "-" => {
            std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?
        }
        _ => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                eprintln!("reading the message from stdin (paste it, then Ctrl-D)");
            }
            let mut buf = Vec::new();
            stdin
                .lock()
                .read_to_end(&mut buf)
                .context("stdin: cannot read")?;
            buf
        }
    };
    // Logs carry stray bytes; an unreadable byte must not hide the message next to it.
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
