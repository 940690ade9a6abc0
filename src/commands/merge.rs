//! `headroom merge DIR…`.

use std::io::Write as _;

use crate::cli::MergeArgs;
use crate::report::merge;

pub fn merge(args: &MergeArgs) -> anyhow::Result<i32> {
    let runs = merge::load(&args.dirs)?;
    let csv = merge::csv(&runs)?;
    if let Some(out) = &args.out {
        merge::write_new(out, &csv, args.force)?;
        eprintln!("wrote {} ({} runs)", out.display(), runs.len());
    }
    if args.csv {
        std::io::stdout().write_all(&csv)?;
    } else {
        print!("{}", merge::markdown(&runs));
    }
    Ok(0)
}
