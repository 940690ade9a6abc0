//! The stack reservation: two deep-stack kernels and the driver's stack limit around each give
//! the resident threads the reservation covers and the limit a context starts with.

use crate::calibrate::{Notes, drop_of};
use crate::device::profile::StackModel;
use crate::device::{Device, Kernel, StreamId};
use crate::kernels;
use crate::units::Size;

pub(super) fn measure(dev: &mut dyn Device, notes: &mut Notes) -> anyhow::Result<StackModel> {
    let info = dev.info().clone();
    // Stack reservation: two deep-stack kernels, 4 KiB then 16 KiB frames (their module loaded
    // first, so that its memory is not counted as stack).
    dev.load_kernels(&[kernels::Module::Stack])?;
    // The driver reports the stack limit before and after each launch (`cuCtxGetLimit`), so
    // nothing about the kernels' frames is assumed: the second launch's drop divided by how
    // far it raised the limit, per SM, is the resident threads the reservation covers.
    let (d4, o4) = drop_of(dev, |d| {
        Ok(d.launch(Kernel::Stack { frame_bytes: 4096 }, StreamId::MAIN)?)
    })?;
    let (d16, o16) = drop_of(dev, |d| {
        Ok(d.launch(Kernel::Stack { frame_bytes: 16384 }, StreamId::MAIN)?)
    })?;
    let (Some(s4), Some(s16)) = (o4.stack, o16.stack) else {
        anyhow::bail!("the device did not report the stack limit around a stack_* launch");
    };
    let sms = info.multiprocessors.max(1) as u64;
    let raised_bytes = s16.limit_after_bytes.saturating_sub(s4.limit_after_bytes);
    let threads = (d16.max(0) as u64) / (raised_bytes.max(1) * sms);
    let default_stack = s4.limit_before_bytes;
    notes.insert(
        "stack.threads_per_multiprocessor",
        format!(
            "a kernel raising the stack limit from {} to {} bytes per thread took {d16} bytes \
             ({d4} for the one raising it to {}): bytes ÷ (raise × SMs)",
            s4.limit_after_bytes, s16.limit_after_bytes, s4.limit_after_bytes
        ),
    );
    notes.insert(
        "stack.default_per_thread_bytes",
        "cuCtxGetLimit(CU_LIMIT_STACK_SIZE) before the first deep-stack kernel".into(),
    );

    Ok(StackModel {
        threads_per_multiprocessor: threads.max(1) as u32,
        default_per_thread_bytes: Size(default_stack),
    })
}
