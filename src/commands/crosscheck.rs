//! `headroom crosscheck REAL SIM`.

use anyhow::Context;

use crate::cli::CrosscheckArgs;
use crate::crosscheck::{crosscheck as compare, render, to_csv};

pub fn crosscheck(args: &CrosscheckArgs) -> anyhow::Result<i32> {
    if let Some(p) = &args.csv {
        anyhow::ensure!(
            !p.exists(),
            "--csv {}: already exists; results are never overwritten",
            p.display()
        );
    }
    let c = compare(&args.real, &args.sim)?;
    if let Some(p) = &args.csv {
        std::fs::write(p, to_csv(&c)?).with_context(|| format!("writing {}", p.display()))?;
    }
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&c)?)?;
    } else {
        crate::out!("{}", render(&c))?;
    }
    Ok(if c.all_agree() { 0 } else { 1 })
}
