//! Plain allocations (pages, small-allocation packing), host copies, memsets, sparse content,
//! and virtual memory management.

use crate::common::*;

#[test]
fn pages_and_small_allocation_packing() {
    let _g = setup(&[]);
    let idle = free_mem();
    let a = alloc(100);
    assert_eq!(
        idle - free_mem(),
        2 * MIB,
        "a small allocation takes a shared page"
    );
    let b = alloc(1000);
    let c = alloc(512);
    assert_eq!((b - a, c - b), (512, 1024), "packed at 512 B spacing");
    let d = alloc(MIB);
    assert_eq!(
        idle - free_mem(),
        2 * MIB,
        "1 MiB still fits the shared page"
    );
    let e = alloc(MIB + 1);
    assert_eq!(idle - free_mem(), 4 * MIB, "above 1 MiB: whole pages");
    let f = alloc(3 * MIB);
    assert_eq!(idle - free_mem(), 8 * MIB);
    assert_eq!(a % (2 * MIB), 0);
    assert_eq!(e % (2 * MIB), 0);
    for p in [e, f, a, b, c] {
        free(p);
    }
    assert_eq!(
        idle - free_mem(),
        2 * MIB,
        "the page stays while `d` lives in it"
    );
    free(d);
    assert_eq!(free_mem(), idle);
    // Addresses are not reused soon after a free.
    let again = alloc(100);
    assert!(again > f, "{again:#x} reuses freed address space");
    // A use after free, an unknown pointer, and zero bytes are refused.
    // SAFETY: plain calls with valid out-pointers.
    unsafe {
        err(cuMemFree_v2(d), CUDA_ERROR_INVALID_VALUE);
        let mut p = 0;
        err(cuMemAlloc_v2(&mut p, 0), CUDA_ERROR_INVALID_VALUE);
        err(
            cuMemAlloc_v2(&mut p, (5 * GIB) as usize),
            CUDA_ERROR_OUT_OF_MEMORY,
        );
    }
}

#[test]
fn copies_and_memsets_move_the_bytes() {
    let _g = setup(&[]);
    let buf = alloc(8 * MIB);
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let mut back = vec![0u8; 4096];
    // SAFETY: host buffers outlive every copy; device ranges are live.
    unsafe {
        ok(cuMemcpyHtoD_v2(buf + 100, data.as_ptr().cast(), data.len()));
        ok(cuMemcpyDtoH_v2(
            back.as_mut_ptr().cast(),
            buf + 100,
            back.len(),
        ));
        assert_eq!(
            back, data,
            "a synchronous DtoH on the legacy stream comes after the HtoD"
        );
        ok(cuMemcpyDtoD_v2(buf + 4 * MIB + 3, buf + 100, 4096));
        ok(cuMemcpyDtoH_v2(
            back.as_mut_ptr().cast(),
            buf + 4 * MIB + 3,
            back.len(),
        ));
        assert_eq!(back, data);
        ok(cuMemsetD8_v2(buf, 0xab, 10));
        ok(cuMemsetD32_v2(buf + 16, 0x1234_5678, 2));
        err(cuMemsetD32_v2(buf + 2, 1, 1), CUDA_ERROR_INVALID_VALUE);
        let mut head = [0u8; 24];
        ok(cuMemcpyDtoH_v2(head.as_mut_ptr().cast(), buf, 24));
        assert_eq!(
            &head[..11],
            &[0xab; 10].iter().copied().chain([0]).collect::<Vec<u8>>()[..]
        );
        assert_eq!(
            u32::from_le_bytes(head[16..20].try_into().unwrap()),
            0x1234_5678
        );
        // Out of any allocation: refused at the call.
        err(cuMemsetD8_v2(buf + 8 * MIB, 0, 1), CUDA_ERROR_INVALID_VALUE);
        err(
            cuMemcpyHtoD_v2(buf + 8 * MIB - 2, data.as_ptr().cast(), 4),
            CUDA_ERROR_INVALID_VALUE,
        );
    }
    free(buf);
}

#[test]
fn a_filled_device_costs_no_host_memory() {
    let _g = setup(&[]);
    let k = kernels();
    let s = stream(CU_STREAM_NON_BLOCKING);
    let big = alloc(3 * GIB);
    k.fill(s, big, 3 * GIB, 11);
    let dst = alloc(256 * MIB);
    // SAFETY: live device ranges.
    ok(unsafe { cuMemcpyDtoDAsync_v2(dst, big + 12, (256 * MIB) as usize, s) });
    assert_eq!(k.verify(s, big, 3 * GIB, 11), (0, u64::MAX));
    let (bad, first) = k.verify(s, dst, 256 * MIB, 11);
    assert_eq!(
        (bad, first),
        (64 * MIB, dst),
        "the copy keeps the source addresses' pattern"
    );
    assert_eq!(read_u32(dst + 40), content::fill_pattern(big + 52, 11));
    let backed =
        state::with_driver(|d| d.devices[0].content.lock().unwrap().backed_bytes()).unwrap();
    assert!(
        backed <= 4 * MIB,
        "{backed} bytes of host memory for 4 GiB of device memory"
    );
}

pub fn prop() -> CUmemAllocationProp {
    CUmemAllocationProp {
        type_: CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: 0,
        location: CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_DEVICE,
            id: 0,
        },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: CUmemAllocationPropFlags {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

#[test]
fn vmm_reserve_create_map_access_unmap_release() {
    let _g = setup(&[]);
    let k = kernels();
    let s = stream(CU_STREAM_NON_BLOCKING);
    let p = prop();
    let idle = free_mem();
    // SAFETY: valid out-pointers and properties throughout.
    unsafe {
        let mut g = 0usize;
        ok(cuMemGetAllocationGranularity(&mut g, &p, 0));
        assert_eq!(g as u64, 2 * MIB);
        let mut base = 0;
        err(
            cuMemAddressReserve(&mut base, (3 * MIB) as usize, 0, 0, 0),
            CUDA_ERROR_INVALID_VALUE,
        );
        ok(cuMemAddressReserve(&mut base, (64 * MIB) as usize, 0, 0, 0));
        assert_eq!(free_mem(), idle, "a reservation costs nothing");
        let mut h = 0;
        err(
            cuMemCreate(&mut h, (3 * MIB) as usize, &p, 0),
            CUDA_ERROR_INVALID_VALUE,
        );
        err(
            cuMemCreate(&mut h, (8 * GIB) as usize, &p, 0),
            CUDA_ERROR_OUT_OF_MEMORY,
        );
        ok(cuMemCreate(&mut h, (8 * MIB) as usize, &p, 0));
        assert_eq!(
            idle - free_mem(),
            8 * MIB,
            "physical memory is taken at create"
        );
        err(
            cuMemMap(base + MIB, (8 * MIB) as usize, 0, h, 0),
            CUDA_ERROR_INVALID_VALUE,
        );
        err(
            cuMemMap(base + 60 * MIB, (8 * MIB) as usize, 0, h, 0),
            CUDA_ERROR_INVALID_VALUE,
        );
        ok(cuMemMap(base, (8 * MIB) as usize, 0, h, 0));
        err(
            cuMemMap(base + 2 * MIB, (2 * MIB) as usize, 0, h, 0),
            CUDA_ERROR_ALREADY_MAPPED,
        );
        let desc = CUmemAccessDesc {
            location: p.location,
            flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        ok(cuMemSetAccess(base, (8 * MIB) as usize, &desc, 1));
        k.fill(s, base, 8 * MIB, 5);
        assert_eq!(k.verify(s, base, 8 * MIB, 5), (0, u64::MAX));
        err(
            cuMemUnmap(base, (4 * MIB) as usize),
            CUDA_ERROR_INVALID_VALUE,
        );
        ok(cuMemUnmap(base, (8 * MIB) as usize));
        assert_eq!(idle - free_mem(), 8 * MIB, "still held by the handle");
        ok(cuMemRelease(h));
        assert_eq!(free_mem(), idle, "released and unmapped: given back");
        ok(cuMemAddressFree(base, (64 * MIB) as usize));
        err(
            cuMemAddressFree(base, (64 * MIB) as usize),
            CUDA_ERROR_INVALID_VALUE,
        );
    }
}

#[test]
fn a_mapping_without_access_faults_the_kernel() {
    let _g = setup(&[]);
    let k = kernels();
    let s = stream(CU_STREAM_NON_BLOCKING);
    let p = prop();
    // SAFETY: valid out-pointers and properties throughout.
    unsafe {
        let (mut base, mut h) = (0, 0);
        ok(cuMemAddressReserve(&mut base, (4 * MIB) as usize, 0, 0, 0));
        ok(cuMemCreate(&mut h, (4 * MIB) as usize, &p, 0));
        ok(cuMemMap(base, (4 * MIB) as usize, 0, h, 0));
        k.fill(s, base, 4 * MIB, 5);
        err(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
        let (mut f, mut t) = (0usize, 0usize);
        err(cuMemGetInfo_v2(&mut f, &mut t), CUDA_ERROR_ILLEGAL_ADDRESS);
    }
}
