//! `--device`: one GPU (`3`: run in this process, as always), a list (`0,2,5`) or `all`,
//! which run a node: one worker process per GPU.

use std::fmt;

/// Which GPUs a command runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSelection {
    /// One GPU, in this process.
    One(u32),
    /// These GPUs, one worker process each (in the order given).
    List(Vec<u32>),
    /// Every GPU the driver (or the node profile) has, one worker process each.
    All,
}

impl DeviceSelection {
    /// `all`, `N`, or `N,M,…` (two or more distinct indices).
    pub fn parse(text: &str) -> Result<DeviceSelection, String> {
        let t = text.trim();
        if t == "all" {
            return Ok(DeviceSelection::All);
        }
        let parse_one = |s: &str| {
            s.trim().parse::<u32>().map_err(|_| {
                format!("{s:?} is not a GPU index: give N, a list such as 0,2,5, or all")
            })
        };
        if !t.contains(',') {
            return parse_one(t).map(DeviceSelection::One);
        }
        let mut list = Vec::new();
        for part in t.split(',') {
            let i = parse_one(part)?;
            if list.contains(&i) {
                return Err(format!("GPU {i} is named twice in {t:?}"));
            }
            list.push(i);
        }
        Ok(DeviceSelection::List(list))
    }

    /// Whether this runs a node (one worker process per GPU) rather than one GPU in-process.
    pub fn is_node(&self) -> bool {
        !matches!(self, DeviceSelection::One(_))
    }

    /// The GPU of a one-GPU selection.
    pub fn one(&self) -> Option<u32> {
        match self {
            DeviceSelection::One(i) => Some(*i),
            _ => None,
        }
    }
}

impl Default for DeviceSelection {
    fn default() -> Self {
        DeviceSelection::One(0)
    }
}

impl fmt::Display for DeviceSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSelection::One(i) => write!(f, "{i}"),
            DeviceSelection::All => f.write_str("all"),
            DeviceSelection::List(l) => {
                let parts: Vec<String> = l.iter().map(u32::to_string).collect();
                f.write_str(&parts.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_list_and_all() {
        assert_eq!(DeviceSelection::parse("3"), Ok(DeviceSelection::One(3)));
        assert_eq!(DeviceSelection::parse("all"), Ok(DeviceSelection::All));
        assert_eq!(
            DeviceSelection::parse("0, 2,5"),
            Ok(DeviceSelection::List(vec![0, 2, 5]))
        );
        assert!(!DeviceSelection::parse("3").unwrap().is_node());
        assert!(DeviceSelection::parse("0,1").unwrap().is_node());
        assert_eq!(DeviceSelection::List(vec![0, 2]).to_string(), "0,2");
        for bad in ["", "x", "1,,2", "-1", "2,2", "0,all"] {
            assert!(DeviceSelection::parse(bad).is_err(), "{bad}");
        }
        assert!(
            DeviceSelection::parse("2,2")
                .unwrap_err()
                .contains("named twice")
        );
    }
}
