//! Memory figures: the context's overhead and NVML's reserved share, page granularity, how
//! small allocations pack, the stream-ordered pool's granule and what a kernel module costs,
//! each from the drop in free memory a call causes.

use crate::calibrate::{Notes, drop_of};
use crate::device::profile::{MemoryModel, SimProfile};
use crate::device::{Device, NvmlMemory, PoolConfig, StreamId};
use crate::kernels;
use crate::units::{MIB, Size};

/// How many 1 MiB + 4 KiB allocations may be asked for a page size.
const PAGE_TRIES: usize = 3;
/// The page sizes a GPU's allocator could have: 64 KiB (small pages) to 1 GiB.
const PAGE_RANGE: (u64, u64) = (64 << 10, 1 << 30);

/// The page size a drop in free memory for one 1 MiB + 4 KiB allocation shows (rounded up to a
/// power of two), or `None` when it is no page size (nothing dropped, or another process took
/// or gave back memory meanwhile).
fn sane_page_bytes(drop: i64) -> Option<u64> {
    let bytes = u64::try_from(drop).ok()?.checked_next_power_of_two()?;
    (PAGE_RANGE.0..=PAGE_RANGE.1)
        .contains(&bytes)
        .then_some(bytes)
}

pub(super) fn measure(
    dev: &mut dyn Device,
    before_context: Option<NvmlMemory>,
    fallback: &SimProfile,
    notes: &mut Notes,
) -> anyhow::Result<MemoryModel> {
    let mem0 = dev.mem_info()?;
    let nvml = dev.nvml_memory();
    // Context overhead: NVML used after the context minus before it.
    let context_overhead = match (before_context, nvml) {
        (Some(b), Some(a)) => {
            notes.insert(
                "memory.context_overhead_bytes",
                "NVML used after the context was created minus before".into(),
            );
            a.used_bytes.saturating_sub(b.used_bytes)
        }
        _ => {
            notes.insert(
                "memory.context_overhead_bytes",
                "NOT MEASURED (no NVML): the h200 profile's figure".into(),
            );
            fallback.memory.context_overhead_bytes.0
        }
    };
    let nvml_reserved = match nvml.map(|n| n.reserved_bytes) {
        Some(Some(reserved)) => {
            notes.insert(
                "memory.nvml_reserved_bytes",
                "NVML memory info v2 `reserved`".into(),
            );
            reserved
        }
        Some(None) => {
            notes.insert(
                "memory.nvml_reserved_bytes",
                "NOT MEASURED (only NVML memory info v1 answered, which counts the driver's \
                 reserve in used without saying how much it is): the h200 profile's figure"
                    .into(),
            );
            fallback.memory.nvml_reserved_bytes.0
        }
        None => {
            notes.insert(
                "memory.nvml_reserved_bytes",
                "NOT MEASURED (no NVML): the h200 profile's figure".into(),
            );
            fallback.memory.nvml_reserved_bytes.0
        }
    };
    notes.insert("memory.total_bytes", "cuMemGetInfo total".into());

    // Page granularity: the drop a 1 MiB + 4 KiB allocation causes. One that opens no new page
    // (room left in a page the driver already had) drops nothing: the next one, the first
    // kept, is asked, up to `PAGE_TRIES` in all.
    let mut held = Vec::new();
    let mut drops = Vec::new();
    let mut page = None;
    for _ in 0..PAGE_TRIES {
        let (drop, p) = drop_of(dev, |d| Ok(d.malloc(MIB + 4096)?))?;
        held.push(p);
        drops.push(drop);
        page = sane_page_bytes(drop);
        if page.is_some() {
            break;
        }
    }
    for p in held {
        dev.free(p)?;
    }
    let page_bytes = match page {
        Some(bytes) => {
            let drop = drops.last().copied().unwrap_or(0);
            notes.insert(
                "memory.page_bytes",
                format!("free memory dropped {drop} bytes for a 1 MiB + 4 KiB cuMemAlloc"),
            );
            bytes
        }
        None => {
            notes.insert(
                "memory.page_bytes",
                format!(
                    "NOT MEASURED: free memory dropped {drops:?} bytes for {PAGE_TRIES} 1 MiB + \
                     4 KiB cuMemAllocs, none within {}–{} bytes: the h200 profile's figure",
                    PAGE_RANGE.0, PAGE_RANGE.1
                ),
            );
            fallback.memory.page_bytes.0
        }
    };

    // Small-allocation packing: the distance between two small allocations in one page.
    let (first_drop, a) = drop_of(dev, |d| Ok(d.malloc(100)?))?;
    let (second_drop, b) = drop_of(dev, |d| Ok(d.malloc(100)?))?;
    let spacing = if second_drop == 0 && b > a {
        (b - a).next_power_of_two()
    } else {
        512
    };
    notes.insert(
        "memory.small_alloc_spacing_bytes",
        format!("two 100-byte cuMemAllocs: the first took {first_drop} bytes, the second {second_drop}, {} bytes apart", b.abs_diff(a)),
    );
    dev.free(a)?;
    dev.free(b)?;

    // The largest size whose second allocation shares the first one's page.
    let mut small_limit = 0;
    for size in [64 << 10, 256 << 10, 512 << 10, MIB, MIB + 512, 2 * MIB] {
        let x = dev.malloc(size)?;
        let (d2, y) = drop_of(dev, |d| Ok(d.malloc(size)?))?;
        dev.free(y)?;
        dev.free(x)?;
        if d2 == 0 {
            small_limit = size;
        }
    }
    notes.insert(
        "memory.small_alloc_limit_bytes",
        "largest of 64 KiB…2 MiB whose second allocation took no new page".into(),
    );

    // The pool's granule: what a 1-byte stream-ordered allocation reserves.
    let pool_granule = if dev.info().capabilities.memory_pools_supported {
        dev.pool_configure(PoolConfig::default())?;
        let p = dev.malloc_async(1, StreamId::MAIN)?;
        let granule = dev.pool_usage()?.reserved_current_bytes;
        dev.free_async(p, StreamId::MAIN)?;
        dev.synchronize()?;
        let released = dev.pool_usage()?.reserved_current_bytes == 0;
        notes.insert(
            "memory.pool_granularity_bytes",
            format!("pool reserved after a 1-byte stream-ordered allocation; released at synchronize with threshold 0: {released}"),
        );
        granule
    } else {
        notes.insert("memory.pool_granularity_bytes", super::NO_POOLS.into());
        fallback.memory.pool_granularity_bytes.0
    };
    Ok(MemoryModel {
        total_bytes: Size(mem0.total_bytes),
        nvml_reserved_bytes: Size(nvml_reserved),
        context_overhead_bytes: Size(context_overhead),
        page_bytes: Size(page_bytes),
        small_alloc_limit_bytes: Size(small_limit.min(page_bytes)),
        small_alloc_spacing_bytes: Size(spacing),
        pool_granularity_bytes: Size(pool_granule.max(1).next_power_of_two()),
    })
}

/// What one loaded kernel module takes: loading headroom's kernels (all but the stack
/// kernels), less the page verify's 16-byte result buffer opens.
pub(super) fn kernel_modules(
    dev: &mut dyn Device,
    page_bytes: u64,
    notes: &mut Notes,
) -> anyhow::Result<u64> {
    let all_but_stack: Vec<_> = kernels::Module::ALL
        .into_iter()
        .filter(|m| *m != kernels::Module::Stack)
        .collect();
    let (kernels_drop, modules) = drop_of(dev, |d| Ok(d.load_kernels(&all_but_stack)?))?;
    let module_bytes =
        (kernels_drop.max(0) as u64).saturating_sub(page_bytes) / modules.max(1) as u64;
    notes.insert(
        "kernels.module_bytes",
        format!(
            "free memory dropped {kernels_drop} bytes when {modules} modules and verify's result \
             buffer (one page) were loaded"
        ),
    );

    Ok(module_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_size_is_taken_only_within_its_sane_range() {
        assert_eq!(sane_page_bytes(2 << 20), Some(2 << 20));
        // 1 MiB + 4 KiB rounded up.
        assert_eq!(sane_page_bytes((1 << 20) + 4096), Some(2 << 20));
        // An allocation that opened no page, or a tenant that gave memory back meanwhile.
        assert_eq!(sane_page_bytes(0), None);
        assert_eq!(sane_page_bytes(-(4 << 20)), None);
        assert_eq!(sane_page_bytes(512), None);
        assert_eq!(sane_page_bytes(3 << 30), None);
    }
}
