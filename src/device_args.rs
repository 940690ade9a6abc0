//! The device flags every command takes (`DeviceArgs`, flattened into the command line), and
//! `--device`: one GPU (`3`: run in this process, as always), a list (`0,2,5`) or `all`,
//! which run a node: one worker process per GPU. They sit low, beside the request they make
//! (`device::select::Request`), so that every command and producer (`watch` too) takes them
//! without reaching up into `cli` or `node`.

use std::fmt;

use clap::Args;

use crate::device::select::Backend;

#[derive(Debug, Clone, Args)]
pub struct DeviceArgs {
    /// Which device backend to use.
    #[arg(long, global = true, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// The CUDA device index (or the simulated device's index); for run, validate, bandwidth
    /// and calibrate also `all` or a list such as `0,2,5`: one worker process per GPU, into a
    /// node folder (a GPU other processes use is skipped unless --shared-ok).
    #[arg(
        long = "device",
        global = true,
        default_value = "0",
        value_name = "INDEX|all|LIST",
        value_parser = DeviceSelection::parse
    )]
    pub device: DeviceSelection,
    /// A simulated device profile: a built-in name (tiny-4g, t4-16g, l4-24g, a10g-24g, a100-40g,
    /// h100-80g, h200; a MIG instance of one, such as h200-1g.18gb) or a TOML file. Implies the
    /// sim backend under --backend auto.
    #[arg(long, global = true, value_name = "NAME|FILE")]
    pub profile: Option<String>,
    /// Refuse to run anywhere but on a real GPU: without a usable driver and device, exit 2
    /// instead of falling back to the simulator (for CI jobs on GPU runners).
    #[arg(long, global = true)]
    pub require_gpu: bool,
    /// When to colour OOM, failed and skipped rows of the tables: auto (a terminal, unless
    /// NO_COLOR is set), always, never.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = crate::output::ColorWhen::Auto)]
    pub color: crate::output::ColorWhen,
}

impl DeviceArgs {
    /// The device request these flags make.
    pub fn request(&self) -> crate::device::select::Request<'_> {
        crate::device::select::Request {
            backend: self.backend,
            profile: self.profile.as_deref(),
            require_gpu: self.require_gpu,
        }
    }

    /// The one GPU a command that drives a single device runs on; `--device all` or a list is
    /// refused with the command's name.
    pub fn one_gpu(&self, command: &str) -> anyhow::Result<u32> {
        self.device.one().ok_or_else(|| {
            anyhow::anyhow!(
                "--device {}: `headroom {command}` drives one GPU; give one index (all and lists \
                 are for run, validate, bandwidth and calibrate)",
                self.device
            )
        })
    }
}

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
