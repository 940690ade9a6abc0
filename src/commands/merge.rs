//! `headroom merge DIR…`.

use crate::cli::MergeArgs;
use crate::report::merge;

pub fn merge(args: &MergeArgs) -> anyhow::Result<i32> {
    let m = merge::load(&args.dirs, args.skip_incomplete)?;
    for (dir, why) in &m.skipped {
        crate::errln!("skipped {}: incomplete: {why}", dir.display());
    }
    for note in &m.node_notes {
        crate::errln!("note: {note}");
    }
    let csv = merge::csv(&m.runs)?;
    if let Some(out) = &args.out {
        merge::write_new(out, &csv, args.force)?;
        crate::errln!(
            "wrote {} ({} runs{})",
            out.display(),
            m.runs.len(),
            if m.skipped.is_empty() {
                String::new()
            } else {
                format!(", {} incomplete skipped", m.skipped.len())
            }
        );
    }
    if args.csv {
        crate::output::print_bytes(&csv)?;
    } else {
        crate::out!("{}", merge::markdown(&m))?;
    }
    Ok(0)
}
