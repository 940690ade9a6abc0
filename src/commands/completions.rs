//! `headroom completions SHELL` and `headroom man [COMMAND]`: shell completions (clap_complete)
//! and manual pages (clap_mangen), both generated from the clap definitions in `cli`, so
//! neither can drift from the flags. `docs/man/` holds the pages as generated; a test fails
//! when they are not what the definitions give.

use clap::CommandFactory;

use crate::cli::Cli;

/// Prints the completion script for `shell` on standard output.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<i32> {
    let mut cmd = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "headroom", &mut script);
    crate::output::print_bytes(&script)?;
    Ok(0)
}

/// Every manual page: `headroom.1`, then `headroom-COMMAND.1` per subcommand, as
/// (file name, roff text).
pub fn man_pages() -> anyhow::Result<Vec<(String, String)>> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = Vec::new();
    let page = |c: clap::Command| -> anyhow::Result<(String, String)> {
        let man = clap_mangen::Man::new(c)
            .source(format!("headroom {}", env!("CARGO_PKG_VERSION")))
            .manual("headroom");
        let mut text = Vec::new();
        man.render(&mut text)?;
        Ok((man.get_filename(), String::from_utf8(text)?))
    };
    pages.push(page(cmd.clone())?);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        pages.push(page(sub.clone())?);
    }
    Ok(pages)
}

/// Prints the manual page of `command` (the main page without one): `headroom man run |
/// man -l -`.
pub fn man(command: Option<&str>) -> anyhow::Result<i32> {
    let want = match command {
        None => "headroom.1".to_string(),
        Some(c) => format!("headroom-{c}.1"),
    };
    let pages = man_pages()?;
    let Some((_, text)) = pages.iter().find(|(name, _)| *name == want) else {
        let names: Vec<&str> = pages
            .iter()
            .filter_map(|(n, _)| n.strip_prefix("headroom-")?.strip_suffix(".1"))
            .collect();
        anyhow::bail!(
            "headroom man {}: no such command; one of {}",
            command.unwrap_or_default(),
            names.join(", ")
        );
    };
    crate::output::print(text)?;
    Ok(0)
}
