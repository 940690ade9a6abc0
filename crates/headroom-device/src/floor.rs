//! The oldest NVIDIA driver headroom runs on, and the driver branch ↔ CUDA version ↔ PTX ISA
//! table its messages and checks use.
//!
//! The floor is the newest of two requirements: every driver function headroom calls
//! (`cuDeviceGetUuid_v2`, `cuGraphInstantiateWithFlags`, `cuDeviceGraphMemTrim` and
//! `cuDeviceGetGraphMemAttribute` are the newest, all CUDA 11.4), and the PTX ISA the kernels
//! declare (6.0, CUDA 9.0: `kernels/build.sh` lowers NVRTC's `.version` line to it and checks
//! that the cubins do not change). So the floor is CUDA 11.4, the R470 branch.

/// `cuDriverGetVersion` of the oldest supported driver: CUDA 11.4.
pub const FLOOR_CUDA_VERSION: i32 = 11040;

/// The PTX ISA every kernel module declares (`.version` in `kernels/*.ptx`).
pub const KERNELS_PTX_ISA: (u32, u32) = (6, 0);

/// Driver branch, the CUDA version its `cuDriverGetVersion` reports, and the newest PTX ISA
/// its JIT accepts (NVIDIA's PTX ISA release notes: ISA 7.0 = CUDA 11.0, 7.4 = 11.4,
/// 8.0 = 12.0, 8.4 = 12.4, 9.0 = 13.0; a driver JIT refuses a newer ISA than its CUDA version).
pub const BRANCHES: &[(u32, i32, (u32, u32))] = &[
    (450, 11000, (7, 0)),
    (455, 11010, (7, 1)),
    (460, 11020, (7, 2)),
    (465, 11030, (7, 3)),
    (470, 11040, (7, 4)),
    (495, 11050, (7, 5)),
    (510, 11060, (7, 6)),
    (515, 11070, (7, 7)),
    (520, 11080, (7, 8)),
    (525, 12000, (8, 0)),
    (530, 12010, (8, 1)),
    (535, 12020, (8, 2)),
    (545, 12030, (8, 3)),
    (550, 12040, (8, 4)),
    (555, 12050, (8, 5)),
    (560, 12060, (8, 5)),
    (565, 12070, (8, 6)),
    (570, 12080, (8, 7)),
    (575, 12090, (8, 8)),
    (580, 13000, (9, 0)),
];

/// `12040` as `12.4`.
pub fn cuda_version_text(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

/// The driver branch that first reports `version` (the newest branch at or below it), e.g.
/// `R535` for 12020; `None` below the table, and past its newest CUDA version (a later driver
/// is a later branch the table cannot name: `branch_of_driver` reads it from the driver's own
/// version).
pub fn branch_of(version: i32) -> Option<u32> {
    let newest = BRANCHES.last().map_or(0, |b| b.1);
    if version > newest {
        return None;
    }
    BRANCHES
        .iter()
        .rev()
        .find(|(_, v, _)| *v <= version)
        .map(|(b, _, _)| *b)
}

/// The branch of a driver version as NVML and `nvidia-smi` write it (`590.44.01` → 590).
pub fn branch_of_driver(driver_version: &str) -> Option<u32> {
    let major = driver_version.trim().split('.').next()?;
    major.parse().ok().filter(|b| *b >= 100)
}

/// The compute capability headroom's kernels need: they are PTX for `.target sm_70`, which a
/// driver's JIT refuses on an older GPU (Pascal and before), whatever the driver branch.
pub const MIN_COMPUTE_CAPABILITY: (u32, u32) = (7, 0);

/// Why a GPU of compute capability `cc` (`6.0`) cannot run headroom, naming the GPU; `None`
/// from Volta (7.0) on, or where the capability cannot be read.
pub fn below_volta(name: &str, cc: &str) -> Option<String> {
    let (major, minor) = cc.split_once('.')?;
    let cc_num: (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
    (cc_num < MIN_COMPUTE_CAPABILITY).then(|| {
        format!(
            "{name} is compute capability {cc}; headroom's kernels are built for sm_70 (Volta) \
             and newer, which the driver's JIT does not compile for an older GPU: use a GPU of \
             compute capability 7.0 or newer, or --backend sim"
        )
    })
}

/// The floor's branch number (470).
pub fn floor_branch() -> u32 {
    branch_of(FLOOR_CUDA_VERSION).unwrap_or(0)
}

/// Why a driver reporting `version` is too old, or `None` when it is at or above the floor.
pub fn below_floor(version: i32) -> Option<String> {
    if version >= FLOOR_CUDA_VERSION {
        return None;
    }
    let branch = branch_of(version).map_or_else(String::new, |b| format!(", R{b}"));
    Some(format!(
        "the NVIDIA driver supports CUDA {}{branch}; headroom needs R{} (CUDA {}) or newer: \
         update the driver to R{} or a later branch",
        cuda_version_text(version),
        floor_branch(),
        cuda_version_text(FLOOR_CUDA_VERSION),
        floor_branch()
    ))
}

/// What to say when a driver's JIT refuses the kernels' PTX.
pub fn ptx_hint() -> String {
    let (major, minor) = KERNELS_PTX_ISA;
    format!(
        "the kernels are PTX ISA {major}.{minor} for sm_70, which every driver from R{} (CUDA {}) \
         on accepts on a GPU of compute capability 7.0 or newer",
        floor_branch(),
        cuda_version_text(FLOOR_CUDA_VERSION)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_r470_and_its_jit_accepts_the_kernels_isa() {
        assert_eq!(floor_branch(), 470);
        let floor_isa = BRANCHES
            .iter()
            .find(|(_, v, _)| *v == FLOOR_CUDA_VERSION)
            .map(|(_, _, isa)| *isa)
            .unwrap();
        assert!(
            KERNELS_PTX_ISA <= floor_isa,
            "{KERNELS_PTX_ISA:?} > {floor_isa:?}"
        );
    }

    #[test]
    fn gpus_before_volta_are_refused_by_name() {
        let why = below_volta("Tesla P100-PCIE-16GB", "6.0").unwrap();
        assert!(
            why.starts_with("Tesla P100-PCIE-16GB is compute capability 6.0"),
            "{why}"
        );
        assert!(why.contains("sm_70"), "{why}");
        assert_eq!(below_volta("Tesla V100-SXM2-16GB", "7.0"), None);
        assert_eq!(below_volta("NVIDIA H100", "9.0"), None);
        assert!(ptx_hint().contains("compute capability 7.0 or newer"));
    }

    #[test]
    fn the_table_rises_in_branch_version_and_isa() {
        for w in BRANCHES.windows(2) {
            assert!(
                w[0].0 < w[1].0 && w[0].1 < w[1].1 && w[0].2 <= w[1].2,
                "{w:?}"
            );
        }
    }

    #[test]
    fn branches_are_named_from_the_reported_version() {
        assert_eq!(branch_of(12020), Some(535));
        assert_eq!(branch_of(12040), Some(550));
        assert_eq!(branch_of(11040), Some(470));
        // CUDA 13.1 came with R590: past the table, the branch is not guessed from CUDA.
        assert_eq!(branch_of(13000), Some(580));
        assert_eq!(branch_of(13010), None);
        assert_eq!(branch_of_driver("590.44.01"), Some(590));
        assert_eq!(branch_of_driver("580.95.05"), Some(580));
        assert_eq!(branch_of_driver("unknown"), None);
        assert_eq!(branch_of(10020), None);
        assert_eq!(cuda_version_text(12020), "12.2");
        assert_eq!(below_floor(11040), None);
        assert_eq!(below_floor(12020), None);
        assert_eq!(
            below_floor(11020).unwrap(),
            "the NVIDIA driver supports CUDA 11.2, R460; headroom needs R470 (CUDA 11.4) or \
             newer: update the driver to R470 or a later branch"
        );
        assert_eq!(
            below_floor(10020).unwrap(),
            "the NVIDIA driver supports CUDA 10.2; headroom needs R470 (CUDA 11.4) or newer: \
             update the driver to R470 or a later branch"
        );
    }
}
