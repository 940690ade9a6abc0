//! `headroom compare A B`.

use crate::cli::CompareArgs;
use crate::report::compare;

pub fn compare(args: &CompareArgs) -> anyhow::Result<i32> {
    let c = compare::load(&args.a, &args.b)?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&c)?)?;
    } else if args.markdown {
        crate::out!("{}", compare::render_markdown(&c))?;
    } else {
        crate::out!("{}", compare::render_text(&c))?;
    }
    Ok(0)
}
