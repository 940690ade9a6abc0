//! What a stream's worker does when it reaches an operation: run a kernel, set or copy memory,
//! write host memory, record an event, or make a range usable or unusable.

use std::time::Instant;

use crate::abi::CUresult;
use crate::errors::CUDA_ERROR_ILLEGAL_ADDRESS;
use crate::state::with_driver;
use crate::stream::Work;

/// Whether `device` may touch every range; returns its memory contents if so.
fn usable(
    device: u32,
    ranges: &[(u64, u64)],
) -> Result<std::sync::Arc<std::sync::Mutex<crate::content::Content>>, CUresult> {
    with_driver(|d| {
        let dev = d.devices.get(device as usize)?;
        ranges
            .iter()
            .all(|(p, n)| *n == 0 || dev.regions.covers(*p, *n))
            .then(|| dev.content.clone())
    })
    .flatten()
    .ok_or(CUDA_ERROR_ILLEGAL_ADDRESS)
}

pub fn run(device: u32, work: &Work, at: Instant) -> Result<(), CUresult> {
    match work {
        Work::Nothing => Ok(()),
        Work::Kernel(k) => k.execute(device),
        Work::Memset { ptr, bytes, word } => {
            let c = usable(device, &[(*ptr, *bytes)])?;
            c.lock()
                .unwrap_or_else(|e| e.into_inner())
                .memset(*ptr, *bytes, *word);
            Ok(())
        }
        Work::CopyDtoD { dst, src, bytes } => {
            let c = usable(device, &[(*dst, *bytes), (*src, *bytes)])?;
            c.lock()
                .unwrap_or_else(|e| e.into_inner())
                .copy(*dst, *src, *bytes);
            Ok(())
        }
        Work::CopyHtoD { dst, data } => {
            let c = usable(device, &[(*dst, data.len() as u64)])?;
            c.lock()
                .unwrap_or_else(|e| e.into_inner())
                .write(*dst, data);
            Ok(())
        }
        Work::CopyDtoH { dst, src, bytes } => {
            let c = usable(device, &[(*src, *bytes)])?;
            let mut buf = vec![0u8; *bytes as usize];
            c.lock()
                .unwrap_or_else(|e| e.into_inner())
                .read(*src, &mut buf);
            // SAFETY: the caller of cuMemcpyDtoH* keeps `bytes` bytes at `dst` valid until the
            // copy has run (the driver's contract); the buffer does not overlap device memory.
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst.0, buf.len()) };
            Ok(())
        }
        Work::Record { event, number } => {
            let mut t = event.0.lock().unwrap_or_else(|e| e.into_inner());
            if *number >= t.0 {
                *t = (*number, Some(at));
            }
            Ok(())
        }
        Work::MapRange { ptr, bytes, id } => {
            with_driver(|d| {
                if let Some(dev) = d.devices.get_mut(device as usize) {
                    dev.regions.add(*ptr, *bytes, *id);
                }
            });
            Ok(())
        }
        Work::UnmapRange { ptr, bytes, id } => {
            let content = with_driver(|d| {
                let dev = d.devices.get_mut(device as usize)?;
                dev.regions.remove(*ptr, *id);
                Some(dev.content.clone())
            })
            .flatten();
            if let Some(c) = content {
                c.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .forget(*ptr, *bytes);
            }
            Ok(())
        }
    }
}
