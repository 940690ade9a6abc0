//! The workloads and capacity plans of `workloads/`, compiled into the binary so that `headroom
//! run quickstart` or `headroom validate card` work from any folder and from an installed wheel,
//! where the repository's files are not. A file that exists at the path given always wins; only
//! an argument that names no file is looked up here.

use std::path::Path;

/// What a shipped file is: a workload (`run`) or a capacity plan (`plan`, `validate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Workload,
    Plan,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Workload => "workload",
            Kind::Plan => "plan",
        }
    }
}

/// One file of `workloads/`, by its name (its path under `workloads/` without `.toml`).
#[derive(Debug, Clone, Copy)]
pub struct Shipped {
    pub name: &'static str,
    pub kind: Kind,
    pub text: &'static str,
}

impl Shipped {
    /// The path it has in the repository, for people (`workloads/oom/fragmentation.toml`).
    pub fn repo_path(&self) -> String {
        format!("workloads/{}.toml", self.name)
    }

    /// The `description` of its `[workload]` or `[plan]` table (one line), or "".
    pub fn description(&self) -> String {
        let Ok(doc) = self.text.parse::<toml::Table>() else {
            return String::new();
        };
        let table = match self.kind {
            Kind::Workload => "workload",
            Kind::Plan => "plan",
        };
        doc.get(table)
            .and_then(|t| t.get("description"))
            .and_then(|d| d.as_str())
            .map(|d| d.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    }
}

macro_rules! shipped {
    ($kind:ident, $name:literal) => {
        Shipped {
            name: $name,
            kind: Kind::$kind,
            text: include_str!(concat!("../workloads/", $name, ".toml")),
        }
    };
}

/// Every file of `workloads/` (a test checks that none is missing), in the order listed.
pub static SHIPPED: &[Shipped] = &[
    shipped!(Workload, "quickstart"),
    shipped!(Workload, "serving"),
    shipped!(Workload, "graphs"),
    shipped!(Workload, "pool-reuse"),
    shipped!(Workload, "comm"),
    shipped!(Workload, "verify"),
    shipped!(Workload, "oom/context-and-stack"),
    shipped!(Workload, "oom/fraction-cap"),
    shipped!(Workload, "oom/fragmentation"),
    shipped!(Workload, "oom/graph-pool"),
    shipped!(Workload, "oom/other-tenant"),
    shipped!(Workload, "oom/outside-allocator"),
    shipped!(Workload, "oom/peak-not-idle"),
    shipped!(Workload, "oom/pending-free"),
    shipped!(Workload, "patterns/activations"),
    shipped!(Workload, "patterns/kv"),
    shipped!(Workload, "patterns/weights"),
    shipped!(Workload, "patterns/workspace"),
    shipped!(Plan, "plans/article"),
    shipped!(Plan, "plans/card"),
    shipped!(Plan, "plans/tiny"),
];

/// The shipped file of `kind` an argument names: `quickstart`, `oom/fragmentation`,
/// `quickstart.toml`, `workloads/oom/fragmentation.toml`; a plan also by its bare name (`card`).
pub fn find(arg: &str, kind: Kind) -> Option<&'static Shipped> {
    let key = arg.strip_prefix("./").unwrap_or(arg);
    let key = key.strip_prefix("workloads/").unwrap_or(key);
    let key = key.strip_suffix(".toml").unwrap_or(key);
    SHIPPED.iter().find(|s| {
        s.kind == kind
            && (s.name == key || (kind == Kind::Plan && s.name.strip_prefix("plans/") == Some(key)))
    })
}

/// The shipped file named `arg` (either kind), for `headroom workloads show`.
pub fn find_any(arg: &str) -> Option<&'static Shipped> {
    find(arg, Kind::Workload).or_else(|| find(arg, Kind::Plan))
}

/// `None` if a file is at `path` (the caller reads it), else the shipped file of `kind` that
/// `path` names; `None` when neither, so the caller reports its own read error with
/// `not_found_hint` added.
pub fn text_for(path: &Path, kind: Kind) -> Option<&'static str> {
    if path.exists() && !path.is_dir() {
        return None;
    }
    find(path.to_str()?, kind).map(|s| s.text)
}

/// Added to "cannot read the file" when the path names neither a file nor a shipped one.
pub fn not_found_hint(path: &Path, kind: Kind) -> String {
    if path.exists() {
        return String::new();
    }
    format!(
        "; nor is it the name of a shipped {} (`headroom workloads` lists them)",
        kind.label()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_workloads_is_shipped_under_its_path() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
        let mut on_disk = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "toml") {
                    let rel = p.strip_prefix(&root).unwrap().with_extension("");
                    on_disk.push(rel.to_str().unwrap().to_string());
                }
            }
        }
        on_disk.sort();
        let mut listed: Vec<String> = SHIPPED.iter().map(|s| s.name.to_string()).collect();
        listed.sort();
        assert_eq!(listed, on_disk);
        for s in SHIPPED {
            let disk = std::fs::read_to_string(root.join(format!("{}.toml", s.name))).unwrap();
            assert_eq!(s.text, disk, "{}", s.name);
            let kind = if s.name.starts_with("plans/") {
                Kind::Plan
            } else {
                Kind::Workload
            };
            assert_eq!(s.kind, kind, "{}", s.name);
            assert!(!s.description().is_empty(), "{} has no description", s.name);
        }
    }

    #[test]
    fn names_paths_and_bare_plan_names_find_the_file() {
        for (arg, kind, want) in [
            ("quickstart", Kind::Workload, "quickstart"),
            ("quickstart.toml", Kind::Workload, "quickstart"),
            ("oom/fragmentation", Kind::Workload, "oom/fragmentation"),
            (
                "workloads/oom/fragmentation.toml",
                Kind::Workload,
                "oom/fragmentation",
            ),
            ("card", Kind::Plan, "plans/card"),
            ("plans/card", Kind::Plan, "plans/card"),
            ("workloads/plans/tiny.toml", Kind::Plan, "plans/tiny"),
        ] {
            assert_eq!(find(arg, kind).map(|s| s.name), Some(want), "{arg}");
        }
        assert!(find("card", Kind::Workload).is_none());
        assert!(find("quickstart", Kind::Plan).is_none());
        assert!(find("oom/nope", Kind::Workload).is_none());
        assert!(find("fragmentation", Kind::Workload).is_none());
        assert_eq!(find_any("card").map(|s| s.name), Some("plans/card"));
    }
}
