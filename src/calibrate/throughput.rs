//! Throughput: the bandwidth of headroom's kernels and of the driver's copy and memset, and
//! how fast `touch` makes pages resident.

use anyhow::Context;

use crate::bandwidth;
use crate::calibrate::Notes;
use crate::device::profile::BandwidthModel;
use crate::device::{Device, Kernel, StreamId};
use crate::kernels;
use crate::units::{Bytes, GIB};

pub(super) fn measure(dev: &mut dyn Device, notes: &mut Notes) -> anyhow::Result<BandwidthModel> {
    // Bandwidth, with the harness's kernels and the driver's copy and memset.
    let page = dev.alloc_rounding().page_bytes;
    let size = (GIB)
        .min(
            dev.alloc_rounding()
                .whole_pages_in(dev.mem_info()?.free_bytes / 8),
        )
        .max(page);
    let bw = bandwidth::measure(dev, size, 5, 0).context("measuring bandwidth")?;
    let rate = |n: &str| {
        bw.rows
            .iter()
            .find(|r| r.name == n)
            .map_or(0.0, |r| r.bytes_per_s)
    };
    let t = dev.malloc(size)?;
    let pages = kernels::touch_count(size, 64 << 10);
    let touch_ns = dev.timed_launch(
        Kernel::Touch {
            ptr: t,
            bytes: size,
            stride_bytes: 64 << 10,
        },
        StreamId::MAIN,
        5,
    )?;
    dev.free(t)?;
    let touch_rate = pages as f64 * 5.0 / (touch_ns.max(1) as f64 / 1e9);
    for k in [
        "bandwidth.copy_bytes_per_s",
        "bandwidth.fill_bytes_per_s",
        "bandwidth.verify_bytes_per_s",
        "bandwidth.memset_bytes_per_s",
    ] {
        notes.insert(
            k,
            format!(
                "headroom bandwidth on {} buffers, 5 launches each",
                Bytes(size)
            ),
        );
    }
    notes.insert(
        "bandwidth.touch_pages_per_s",
        format!(
            "5 touch launches over {}, one write per 64 KiB",
            Bytes(size)
        ),
    );

    Ok(BandwidthModel {
        copy_bytes_per_s: rate("cuMemcpyDtoD"),
        fill_bytes_per_s: rate("fill"),
        verify_bytes_per_s: rate("verify"),
        memset_bytes_per_s: rate("cuMemsetD32"),
        touch_pages_per_s: touch_rate,
    })
}
