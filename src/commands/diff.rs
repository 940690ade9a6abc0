//! `headroom diff A B`.

use crate::cli::DiffArgs;
use crate::diff;

pub fn diff(args: &DiffArgs) -> anyhow::Result<i32> {
    let d = diff::load(&args.a, &args.b)?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&d)?)?;
    } else if args.markdown {
        crate::out!("{}", diff::render::markdown(&d))?;
    } else {
        crate::out!("{}", diff::render::text(&d))?;
    }
    Ok(0)
}
