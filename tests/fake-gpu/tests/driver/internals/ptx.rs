//! `ptx`'s own rules, checked from outside the library.

use headroom_fake_gpu::errors::*;
use headroom_fake_gpu::ptx::*;

#[test]
fn reads_headroom_kernels() {
    let m = parse(
        include_bytes!("../../../../../kernels/stream.ptx"),
        90,
        MAX_VERSION,
    )
    .unwrap();
    // Declared low enough for the driver floor, R470 (CUDA 11.4, ISA 7.4).
    assert!(
        m.version <= headroom_fake_gpu::branch::max_ptx_isa(11040),
        "{:?}",
        m.version
    );
    let names: Vec<&str> = m.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["copy", "triad"]);
    assert_eq!(
        m.entries[1].params,
        [Param::U64, Param::U64, Param::U64, Param::U64, Param::F32]
    );
    assert_eq!(m.entries[0].max_threads, Some(256));
    let s = parse(
        include_bytes!("../../../../../kernels/stack.ptx"),
        90,
        MAX_VERSION,
    )
    .unwrap();
    let frames: Vec<u32> = s.entries.iter().map(|e| e.local_bytes).collect();
    assert_eq!(frames, [4096, 16384, 65536]);
    assert_eq!(s.entries[0].max_threads, None);
}

#[test]
fn refuses_newer_isa_and_garbage() {
    let e = parse(b".version 9.0\n.target sm_90\n", 90, MAX_VERSION).unwrap_err();
    assert_eq!(e.code, CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
    assert!(e.log.contains("Unsupported .version 9.0"), "{}", e.log);
    // The boundary of an older JIT: CUDA 11.4 compiles ISA 7.4, not 7.5.
    let isa_11_4 = headroom_fake_gpu::branch::max_ptx_isa(11040);
    assert!(parse(b".version 7.4\n.target sm_70\n", 90, isa_11_4).is_ok());
    let e = parse(b".version 7.5\n.target sm_70\n", 90, isa_11_4).unwrap_err();
    assert_eq!(e.code, CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
    assert!(
        e.log
            .ends_with("line 1; fatal   : Unsupported .version 7.5; current version is '7.4'"),
        "{}",
        e.log
    );
    assert_eq!(
        parse(b"hello", 90, MAX_VERSION).unwrap_err().code,
        CUDA_ERROR_INVALID_PTX
    );
    assert_eq!(
        parse(b".version 8.4\n.target sm_100\n", 90, MAX_VERSION)
            .unwrap_err()
            .code,
        CUDA_ERROR_INVALID_PTX
    );
    assert_eq!(
        parse(b"\x7fELF....", 90, MAX_VERSION).unwrap_err().code,
        CUDA_ERROR_INVALID_IMAGE
    );
}
