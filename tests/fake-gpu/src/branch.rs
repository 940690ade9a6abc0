//! The driver release the fake pretends to be (`HEADROOM_FAKE_DRIVER`): its branch, the
//! version strings CUDA and NVML report, the newest PTX ISA its JIT accepts, and which of the
//! exported symbols it has.
//!
//! Without the setting the fake is what it always was: an R550 driver (`550.54.15`, CUDA 12.4,
//! PTX ISA 8.4) with every symbol of `symbols`. With it, the symbols the branch's CUDA release
//! lacks are withheld: `scripts/fake-gpu` loads the fake through a filter library that exports
//! only the branch's symbols (`symbols::present`), so they are absent to `dlsym`.

/// Every branch the fake can be: (branch, `cuDriverGetVersion`, NVML's driver version string).
/// The CUDA version is the one NVIDIA ships with the branch (CUDA toolkit release notes, table
/// "CUDA Toolkit and Corresponding Driver Versions"); the NVML strings are a late release of
/// each long-lived branch, `<branch>.00` for the others.
pub const BRANCHES: &[(u32, i32, &str)] = &[
    (450, 11000, "450.00"),
    (460, 11020, "460.00"),
    (470, 11040, "470.256.02"),
    (525, 12000, "525.00"),
    (535, 12020, "535.261.03"),
    (545, 12030, "545.00"),
    (550, 12040, "550.163.01"),
    (555, 12050, "555.00"),
    (560, 12060, "560.00"),
    (565, 12070, "565.00"),
    (570, 12080, "570.00"),
    (575, 12090, "575.00"),
    (580, 13000, "580.95.05"),
];

/// The newest PTX ISA each CUDA release's JIT compiles (the PTX ISA reference's release
/// history: ISA 7.0 came with CUDA 11.0, 7.4 with 11.4, 8.0 with 12.0, ... 9.0 with 13.0).
const PTX_ISA: &[(i32, (u32, u32))] = &[
    (11000, (7, 0)),
    (11010, (7, 1)),
    (11020, (7, 2)),
    (11030, (7, 3)),
    (11040, (7, 4)),
    (11050, (7, 5)),
    (11060, (7, 6)),
    (11070, (7, 7)),
    (11080, (7, 8)),
    (12000, (8, 0)),
    (12010, (8, 1)),
    (12020, (8, 2)),
    (12030, (8, 3)),
    (12040, (8, 4)),
    (12050, (8, 5)),
    (12060, (8, 5)),
    (12070, (8, 6)),
    (12080, (8, 7)),
    (12090, (8, 8)),
    (13000, (9, 0)),
];

/// The newest PTX ISA the JIT of CUDA `cuda_version` (`12040` for 12.4) accepts.
pub fn max_ptx_isa(cuda_version: i32) -> (u32, u32) {
    PTX_ISA
        .iter()
        .rev()
        .find(|(v, _)| *v <= cuda_version)
        .map_or((7, 0), |(_, isa)| *isa)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub branch: u32,
    /// `nvmlSystemGetDriverVersion`.
    pub nvml_version: String,
    /// `cuDriverGetVersion` and `nvmlSystemGetCudaDriverVersion`: 1000 × major + 10 × minor.
    pub cuda_version: i32,
    /// The newest `.version` the JIT accepts.
    pub max_ptx: (u32, u32),
    /// Chosen with `HEADROOM_FAKE_DRIVER`; `false`: the default, every symbol kept.
    pub chosen: bool,
}

impl Default for Release {
    /// The fake without `HEADROOM_FAKE_DRIVER`: R550, CUDA 12.4, every symbol.
    fn default() -> Release {
        Release {
            branch: 550,
            nvml_version: "550.54.15".into(),
            cuda_version: 12040,
            max_ptx: (8, 4),
            chosen: false,
        }
    }
}

impl Release {
    /// `HEADROOM_FAKE_DRIVER`'s value: a branch (`470`) or a full version (`535.261.03`).
    pub fn parse(text: &str) -> Result<Release, String> {
        let t = text.trim();
        let well_formed = !t.is_empty()
            && t.split('.').count() <= 3
            && t.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        let branch = t.split('.').next().and_then(|b| b.parse::<u32>().ok());
        let known = branch.and_then(|b| BRANCHES.iter().find(|(n, _, _)| *n == b));
        let (Some(&(branch, cuda_version, nvml)), true) = (known, well_formed) else {
            let names: Vec<String> = BRANCHES.iter().map(|(b, _, _)| b.to_string()).collect();
            return Err(format!(
                "HEADROOM_FAKE_DRIVER={text:?}: give a driver branch ({}) or a full version of \
                 one such as 535.261.03",
                names.join(", ")
            ));
        };
        Ok(Release {
            branch,
            nvml_version: if t.contains('.') { t } else { nvml }.to_string(),
            cuda_version,
            max_ptx: max_ptx_isa(cuda_version),
            chosen: true,
        })
    }

    /// Whether this release's library has `symbol` (one of `symbols`).
    pub fn has(&self, symbol: &str) -> bool {
        !self.chosen || crate::symbols::present(symbol, self.cuda_version)
    }

    /// The size of the records `nvmlDeviceGetComputeRunningProcesses_v3` writes. nvml.h of
    /// 535.43.02 gave `_v3` a 32-byte `nvmlProcessInfo_v3_t` (`usedGpuCcProtectedMemory` after
    /// the instance ids) under the same name; 535.98's header dropped it and 535.104.05's
    /// brought `_v3` back on the 24-byte `nvmlProcessInfo_v2_t`, which R510–R530 and R545 on
    /// also use. `_v2` writes 24 bytes on every branch.
    pub fn process_record_v3_bytes(&self) -> usize {
        let parts: Vec<u32> = self
            .nvml_version
            .split('.')
            .map(|p| p.parse().unwrap_or(0))
            .collect();
        let (minor, patch) = (parts.get(1).copied(), parts.get(2).copied().unwrap_or(0));
        match (self.branch, minor) {
            (535, Some(m)) if (43, 2) <= (m, patch) && m < 98 => 32,
            _ => 24,
        }
    }

    /// `"12.4"`.
    pub fn cuda_text(&self) -> String {
        format!(
            "{}.{}",
            self.cuda_version / 1000,
            self.cuda_version % 1000 / 10
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_535_43_to_535_86_write_32_byte_records_through_v3() {
        let bytes = |v: &str| Release::parse(v).unwrap().process_record_v3_bytes();
        for v in ["535.43.02", "535.54.03", "535.86.10"] {
            assert_eq!(bytes(v), 32, "{v}");
        }
        for v in [
            "535",
            "535.104.05",
            "535.261.03",
            "525.60.13",
            "550",
            "550.54.15",
            "470",
        ] {
            assert_eq!(bytes(v), 24, "{v}");
        }
        assert_eq!(Release::default().process_record_v3_bytes(), 24);
    }
}
