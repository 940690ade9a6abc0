//! `headroom workloads` (the built-in workloads and plans, one line each) and `headroom
//! workloads show NAME` (one of them as its TOML file).

use crate::cli::{WorkloadsAction, WorkloadsArgs};
use crate::shipped::{self, SHIPPED};

pub fn workloads(args: &WorkloadsArgs) -> anyhow::Result<i32> {
    match &args.action {
        None => {
            crate::output::print(&listing())?;
            Ok(0)
        }
        Some(WorkloadsAction::Show { name }) => {
            let Some(s) = shipped::find_any(name) else {
                let names: Vec<&str> = SHIPPED.iter().map(|s| s.name).collect();
                anyhow::bail!(
                    "headroom workloads show {name:?}: no built-in workload or plan of that name; \
                     one of {}",
                    names.join(", ")
                );
            };
            crate::output::print(s.text)?;
            Ok(0)
        }
    }
}

/// One line per shipped file: its name, its kind and its description.
pub fn listing() -> String {
    let width = SHIPPED.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for s in SHIPPED {
        // A plan is named by its bare name (`validate card`), as people type it.
        let name = s.name.strip_prefix("plans/").unwrap_or(s.name);
        out.push_str(&format!(
            "{name:<width$}  {:<8}  {}\n",
            s.kind.label(),
            s.description()
        ));
    }
    out
}
