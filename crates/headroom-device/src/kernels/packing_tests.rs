//! Tests of `crate::kernels`: argument packing against the kernels' parameter lists, and the
//! committed PTX and `.cu` sources against the Rust constants.

use super::*;

// ---- argument packing ----

#[test]
fn plan_packs_each_kernel_s_arguments_in_order() {
    let r = 0xAB00;
    let p = |k: Kernel| plan(&k, r).unwrap().unwrap();
    let c = p(Kernel::Fill {
        ptr: 0x1004,
        bytes: 4099,
        seed: 7,
    });
    assert_eq!(c.function, Function::Fill);
    assert_eq!(c.args, vec![Arg::U64(0x1004), Arg::U64(1024), Arg::U32(7)]);
    let c = p(Kernel::Verify {
        ptr: 0x2000,
        bytes: 64,
        seed: 9,
    });
    assert_eq!(
        c.args,
        vec![Arg::U64(0x2000), Arg::U64(16), Arg::U32(9), Arg::U64(r)]
    );
    let c = p(Kernel::Copy {
        dst: 0x3000,
        src: 0x4008,
        bytes: 40,
    });
    assert_eq!(
        c.args,
        vec![Arg::U64(0x3000), Arg::U64(0x4008), Arg::U64(10)]
    );
    let c = p(Kernel::Triad {
        a: 0x10,
        b: 0x20,
        c: 0x30,
        bytes: 8,
        scalar: 2.5,
    });
    assert_eq!(
        c.args,
        vec![
            Arg::U64(0x10),
            Arg::U64(0x20),
            Arg::U64(0x30),
            Arg::U64(2),
            Arg::F32(2.5)
        ]
    );
    let c = p(Kernel::Touch {
        ptr: 0x8000,
        bytes: 1 << 21,
        stride_bytes: 1 << 16,
    });
    assert_eq!(
        c.args,
        vec![Arg::U64(0x8000), Arg::U64(32), Arg::U64(1 << 16)]
    );
    assert_eq!(c.work, Work::GridStride { threads: 32 });
    let c = p(Kernel::Spin { duration_ns: 5_000 });
    assert_eq!(c.args, vec![Arg::U64(5_000)]);
    assert_eq!(c.work, Work::OneBlock { threads: 1 });
    let c = p(Kernel::Stack { frame_bytes: 5000 });
    assert_eq!(c.function, Function::Stack16K);
    assert_eq!(c.args, vec![Arg::U64(0), Arg::U32(5000), Arg::U32(0)]);
    assert_eq!(
        c.work,
        Work::FullWave {
            block_threads: STACK_BLOCK_THREADS
        }
    );
    assert_eq!(
        plan(
            &Kernel::Memset {
                ptr: 0,
                bytes: 4,
                value: 1
            },
            r
        )
        .unwrap(),
        None
    );
    assert_eq!(
        plan(
            &Kernel::DriverCopy {
                dst: 0,
                src: 0,
                bytes: 4
            },
            r
        )
        .unwrap(),
        None
    );
}

#[test]
fn every_plan_matches_its_function_s_parameter_list() {
    let kernels = [
        Kernel::Touch {
            ptr: 0,
            bytes: 4,
            stride_bytes: 4,
        },
        Kernel::Fill {
            ptr: 0,
            bytes: 4,
            seed: 0,
        },
        Kernel::Verify {
            ptr: 0,
            bytes: 4,
            seed: 0,
        },
        Kernel::Copy {
            dst: 0,
            src: 0,
            bytes: 4,
        },
        Kernel::Triad {
            a: 0,
            b: 0,
            c: 0,
            bytes: 4,
            scalar: 0.0,
        },
        Kernel::Spin { duration_ns: 0 },
        Kernel::Stack { frame_bytes: 1 },
        Kernel::Stack {
            frame_bytes: 16 * 1024,
        },
        Kernel::Stack {
            frame_bytes: 64 * 1024,
        },
    ];
    let mut planned = Vec::new();
    for k in kernels {
        let c = plan(&k, 0).unwrap().unwrap();
        let types: Vec<Param> = c.args.iter().map(Arg::param).collect();
        assert_eq!(types, c.function.params(), "{k:?}");
        planned.push(c.function);
    }
    assert_eq!(planned, Function::ALL);
}

#[test]
fn value_ptr_points_at_the_value_bytes() {
    let mut args = [
        Arg::U32(0xA1B2_C3D4),
        Arg::U64(0x0102_0304_0506_0708),
        Arg::F32(1.5),
    ];
    let ptrs: Vec<*mut c_void> = args.iter_mut().map(Arg::value_ptr).collect();
    // SAFETY: each pointer points at the live value of its variant, of the type read here.
    unsafe {
        assert_eq!(*(ptrs[0] as *const u32), 0xA1B2_C3D4);
        assert_eq!(*(ptrs[1] as *const u64), 0x0102_0304_0506_0708);
        assert_eq!(*(ptrs[2] as *const f32), 1.5);
    }
}

#[test]
fn plan_rejects_what_the_kernels_cannot_do() {
    let bad = [
        Kernel::Fill {
            ptr: 0x1002,
            bytes: 8,
            seed: 0,
        },
        Kernel::Verify {
            ptr: 0x1001,
            bytes: 8,
            seed: 0,
        },
        Kernel::Touch {
            ptr: 0x1000,
            bytes: 8,
            stride_bytes: 0,
        },
        Kernel::Touch {
            ptr: 0x1000,
            bytes: 8,
            stride_bytes: 6,
        },
        Kernel::Touch {
            ptr: 0x1002,
            bytes: 8,
            stride_bytes: 4,
        },
        Kernel::Copy {
            dst: 0x1000,
            src: 0x2000,
            bytes: 6,
        },
        Kernel::Copy {
            dst: 0x1000,
            src: 0x2002,
            bytes: 8,
        },
        Kernel::Triad {
            a: 0x1000,
            b: 0x2000,
            c: 0x3001,
            bytes: 8,
            scalar: 1.0,
        },
        Kernel::Triad {
            a: 0x1000,
            b: 0x2000,
            c: 0x3000,
            bytes: 9,
            scalar: 1.0,
        },
        Kernel::Stack {
            frame_bytes: 64 * 1024 + 1,
        },
    ];
    for k in bad {
        assert!(matches!(plan(&k, 0), Err(DeviceError::Invalid(_))), "{k:?}");
    }
}

// ---- stack variants ----

#[test]
fn stack_maps_to_the_smallest_variant_that_holds_the_frame() {
    let cases = [
        (0, Function::Stack4K),
        (1, Function::Stack4K),
        (4096, Function::Stack4K),
        (4097, Function::Stack16K),
        (16384, Function::Stack16K),
        (16385, Function::Stack64K),
        (65536, Function::Stack64K),
    ];
    for (bytes, f) in cases {
        assert_eq!(stack_function(bytes).unwrap(), f, "{bytes}");
        assert!(f.frame_bytes().unwrap() >= bytes);
    }
    assert!(stack_function(65537).is_err());
    assert!(stack_function(u32::MAX).is_err());
    assert_eq!(Function::Fill.frame_bytes(), None);
    // 64 KiB on an H200 (132 SMs x 2048 threads): 16.5 GiB no allocator reports.
    assert_eq!(stack_reservation_bytes(65536, 132, 2048), 17_716_740_096);
}

// ---- verify result ----

#[test]
fn decode_verify_reads_count_and_address() {
    assert_eq!(decode_verify(VERIFY_RESULT_INIT, 0x1000, 64).unwrap(), None);
    assert_eq!(
        decode_verify([3, 0x1008], 0x1000, 64).unwrap(),
        Some((3, 0x1008))
    );
    assert_eq!(
        decode_verify([1, 0x103C], 0x1000, 64).unwrap(),
        Some((1, 0x103C))
    );
    for raw in [
        [1, u64::MAX],
        [1, 0x1040],
        [1, 0xFFC],
        [1, 0x1002],
        [17, 0x1000],
    ] {
        assert!(decode_verify(raw, 0x1000, 64).is_err(), "{raw:?}");
    }
}

// ---- the committed PTX and the .cu sources ----

/// The `.param` types of entry `name` in `ptx`, or `None` if there is no such entry.
fn entry_params(ptx: &str, name: &str) -> Option<Vec<Param>> {
    let start = ptx.find(&format!(".entry {name}("))?;
    let rest = &ptx[start..];
    let end = rest.find(')')?;
    let params = rest[..end]
        .lines()
        .filter_map(|line| line.trim().strip_prefix(".param "))
        .map(|p| match p.split_whitespace().next() {
            Some(".u32") => Param::U32,
            Some(".u64") => Param::U64,
            Some(".f32") => Param::F32,
            other => panic!("unexpected parameter type {other:?} in {name}"),
        })
        .collect();
    Some(params)
}

fn entries(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| l.strip_prefix(".visible .entry "))
        .map(|l| l.trim_end_matches('(').to_string())
        .collect()
}

#[test]
fn the_ptx_declares_exactly_the_parameters_plan_packs() {
    for f in Function::ALL {
        let ptx = f.module().ptx().to_str().unwrap();
        let params = entry_params(ptx, f.name())
            .unwrap_or_else(|| panic!("{}.ptx has no entry {}", f.module().name(), f.name()));
        assert_eq!(params, f.params(), "{}", f.name());
    }
}

#[test]
fn every_module_declares_the_floor_isa_for_sm_70_with_only_known_entries() {
    let (major, minor) = crate::floor::KERNELS_PTX_ISA;
    let version = format!("\n.version {major}.{minor}\n");
    for m in Module::ALL {
        let ptx = m.ptx().to_str().unwrap();
        assert!(ptx.contains(&version), "{}.ptx", m.name());
        assert!(ptx.contains("\n.target sm_70\n"), "{}.ptx", m.name());
        assert!(ptx.contains("\n.address_size 64\n"), "{}.ptx", m.name());
        let mut expected: Vec<&str> = Function::ALL
            .iter()
            .filter(|f| f.module() == m)
            .map(|f| f.name())
            .collect();
        let mut found = entries(ptx);
        expected.sort_unstable();
        found.sort_unstable();
        assert_eq!(found, expected, "{}.ptx", m.name());
    }
}

#[test]
fn grid_stride_entries_are_bounded_to_the_block_size() {
    for f in Function::ALL.into_iter().filter(|f| f.grid_stride()) {
        let ptx = f.module().ptx().to_str().unwrap();
        let start = ptx.find(&format!(".entry {}(", f.name())).unwrap();
        let after = &ptx[start..];
        let body = after.find('{').unwrap();
        assert!(
            after[..body].contains(&format!(".maxntid {BLOCK_THREADS}, 1, 1")),
            "{} lacks __launch_bounds__({BLOCK_THREADS})",
            f.name()
        );
    }
}

const FILL_CU: &str = include_str!("../../../../kernels/fill.cu");
const VERIFY_CU: &str = include_str!("../../../../kernels/verify.cu");
const STREAM_CU: &str = include_str!("../../../../kernels/stream.cu");
const STACK_CU: &str = include_str!("../../../../kernels/stack.cu");

fn block<'a>(source: &'a str, name: &str) -> &'a str {
    let start = source
        .find(&format!("// ---- {name} "))
        .unwrap_or_else(|| panic!("no {name} block"));
    let end = source[start..]
        .find(&format!("// ---- end {name} ----"))
        .unwrap_or_else(|| panic!("no end of the {name} block"));
    &source[start..start + end]
}

#[test]
fn shared_blocks_of_the_cu_files_are_identical() {
    assert_eq!(block(FILL_CU, "pattern"), block(VERIFY_CU, "pattern"));
    assert_eq!(block(FILL_CU, "split"), block(VERIFY_CU, "split"));
    assert_eq!(block(FILL_CU, "split"), block(STREAM_CU, "split"));
    // The constants of fill_pattern appear in the CUDA copy.
    for constant in ["0x9E3779B1u", "0x85EBCA6Bu", "0xC2B2AE35u"] {
        assert!(block(FILL_CU, "pattern").contains(constant), "{constant}");
    }
}

#[test]
fn cu_constants_match_the_rust_ones() {
    for source in [FILL_CU, VERIFY_CU, STREAM_CU] {
        assert!(source.contains(&format!("\n#define UNROLL {UNROLL}\n")));
    }
    for (bytes, f) in STACK_VARIANTS {
        let words = bytes / 4;
        assert!(
            STACK_CU.contains(&format!(
                "{}(unsigned int* out, unsigned int seed, unsigned int store)\n{{\n    \
                 churn<{words}>",
                f.name()
            )),
            "{} is not churn<{words}>",
            f.name()
        );
    }
}
