//! Stream capture and CUDA graphs: begin/end capture, instantiate, upload, launch, destroy, and
//! the device's graph memory (trim, attributes).

use std::ffi::c_void;

use crate::abi::*;
use crate::errors::*;
use crate::ffi::{cuda, out};
use crate::graphs::{Capture, GraphRec};
use crate::state::{Tag, cu, handle, id_of};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(stream: Handle, mode: u32) -> CUresult {
    cuda("cuStreamBeginCapture_v2", || {
        if mode > CU_STREAM_CAPTURE_MODE_RELAXED {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        cu(|d| {
            let dev = d.current()?;
            let sid = d.stream_id(dev, stream)?;
            let s = d.streams.get_mut(&sid).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            if s.legacy {
                return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
            }
            if s.capture.is_some() {
                return Err(CUDA_ERROR_ILLEGAL_STATE);
            }
            s.capture = Some(Capture::default());
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamEndCapture(stream: Handle, graph: *mut Handle) -> CUresult {
    cuda("cuStreamEndCapture", || {
        if graph.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let r = cu(|d| {
            let dev = d.current()?;
            let sid = d.stream_id(dev, stream)?;
            let s = d.streams.get_mut(&sid).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            let c = s.capture.take().ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
            if c.invalidated {
                return Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
            }
            let id = d.next_id();
            d.graphs.insert(
                id,
                GraphRec {
                    device: dev,
                    nodes: c.nodes,
                    execs: 0,
                },
            );
            Ok(id)
        });
        let h = r
            .as_ref()
            .map_or(std::ptr::null_mut(), |id| handle(Tag::Graph, *id));
        // SAFETY: checked non-null; the caller passes a valid out-pointer.
        unsafe { out(graph, h)? };
        r.map(|_| ())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamIsCapturing(stream: Handle, status: *mut u32) -> CUresult {
    cuda("cuStreamIsCapturing", || {
        let v = cu(|d| {
            let dev = d.current()?;
            let sid = d.stream_id(dev, stream)?;
            Ok(match &d.streams[&sid].capture {
                None => CU_STREAM_CAPTURE_STATUS_NONE,
                Some(c) if c.invalidated => CU_STREAM_CAPTURE_STATUS_INVALIDATED,
                Some(_) => CU_STREAM_CAPTURE_STATUS_ACTIVE,
            })
        })?;
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(status, v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut Handle,
    graph: Handle,
    flags: u64,
) -> CUresult {
    cuda("cuGraphInstantiateWithFlags", || {
        let known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
            | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD
            | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
            | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
        if exec.is_null() || flags & !known != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let id = cu(|d| {
            let dev = d.current()?;
            let g = id_of(Tag::Graph, graph)?;
            match d.graphs.get(&g) {
                Some(rec) if rec.device == dev => {}
                _ => return Err(CUDA_ERROR_INVALID_HANDLE),
            }
            d.instantiate(
                g,
                flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH != 0,
            )
        })?;
        // SAFETY: checked non-null; the caller passes a valid out-pointer.
        unsafe { out(exec, handle(Tag::Exec, id)) }
    })
}

fn map(exec: Handle, stream: Handle, launch: bool) -> Result<(), CUresult> {
    cu(|d| {
        let dev = d.current()?;
        let sid = d.stream_id(dev, stream)?;
        let e = id_of(Tag::Exec, exec)?;
        match d.execs.get(&e) {
            Some(rec) if rec.device == dev => {}
            _ => return Err(CUDA_ERROR_INVALID_HANDLE),
        }
        if d.streams[&sid].capture.is_some() {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        d.graph_map(e, sid, launch)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphUpload(exec: Handle, stream: Handle) -> CUresult {
    cuda("cuGraphUpload", || map(exec, stream, false))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphLaunch(exec: Handle, stream: Handle) -> CUresult {
    cuda("cuGraphLaunch", || map(exec, stream, true))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: Handle) -> CUresult {
    cuda("cuGraphExecDestroy", || {
        cu(|d| {
            d.current_any()?;
            d.exec_destroy(id_of(Tag::Exec, exec)?)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphDestroy(graph: Handle) -> CUresult {
    cuda("cuGraphDestroy", || {
        cu(|d| {
            d.current_any()?;
            d.graphs
                .remove(&id_of(Tag::Graph, graph)?)
                .map(|_| ())
                .ok_or(CUDA_ERROR_INVALID_HANDLE)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGraphMemTrim(dev: CUdevice) -> CUresult {
    cuda("cuDeviceGraphMemTrim", || {
        cu(|d| {
            let i = d.device(dev)?;
            d.graph_trim(i);
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetGraphMemAttribute(
    dev: CUdevice,
    attr: u32,
    value: *mut c_void,
) -> CUresult {
    cuda("cuDeviceGetGraphMemAttribute", || {
        let v = cu(|d| {
            let i = d.device(dev)?;
            let u = d.graph_usage(i);
            match attr {
                CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT..=CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH => {
                    Ok(u[attr as usize])
                }
                _ => Err(CUDA_ERROR_INVALID_VALUE),
            }
        })?;
        // SAFETY: the four attributes are documented as cuuint64_t; null is refused.
        unsafe { out(value.cast::<u64>(), v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceSetGraphMemAttribute(
    dev: CUdevice,
    attr: u32,
    value: *mut c_void,
) -> CUresult {
    cuda("cuDeviceSetGraphMemAttribute", || {
        if value.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: checked non-null; the attributes are documented as cuuint64_t.
        let v = unsafe { value.cast::<u64>().read_unaligned() };
        cu(|d| {
            let i = d.device(dev)?;
            let [used, _, reserved, _] = d.graph_usage(i);
            let g = &mut d.dev(i).graph;
            match attr {
                CU_GRAPH_MEM_ATTR_USED_MEM_HIGH if v == 0 => g.used_high = used,
                CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH if v == 0 => g.reserved_high = reserved,
                _ => return Err(CUDA_ERROR_INVALID_VALUE),
            }
            Ok(())
        })
    })
}
