"""torch.cuda's lazy initialization, as torch/cuda/__init__.py (pytorch/pytorch v2.5, and PyPI's
torch 2.15.0 wheel with the same signature) does it: `_lazy_call(callable, **kwargs)` runs the
callable now if CUDA is initialized, else queues it for `_lazy_init`, where a queued call that
raises makes initialization raise."""

import ctypes
import os
import sys
import time

from . import memory  # noqa: F401

_initialized = False
_queued_calls = []
_allocator = None
_driver = None
_driver_ptrs = {}


class OutOfMemoryError(RuntimeError):
    pass


class DeferredCudaCallError(Exception):
    pass


def is_initialized():
    return _initialized


def is_available():
    return True


def _lazy_call(callable, **kwargs):
    if is_initialized():
        callable()
    else:
        _queued_calls.append((callable, None))


class _Clock:
    """Microseconds since the epoch, as PyTorch's trace entries record time."""

    def now(self):
        return time.time_ns() // 1000

    def tick(self, us=0):
        pass


def _model():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
    sys.path.insert(0, os.path.join(root, "scripts"))
    try:
        import torch_snapshot_model
    finally:
        sys.path.pop(0)
    return torch_snapshot_model


class _Device:
    """Segments also taken from a CUDA driver library (STANDIN_LIBCUDA), so NVML sees them."""

    def __init__(self, path):
        self.cu = ctypes.CDLL(path)
        ctx = ctypes.c_void_p()
        dev = ctypes.c_int()
        self._check(self.cu.cuInit(0), "cuInit")
        self._check(self.cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self._check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self._check(self.cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    @staticmethod
    def _check(rc, what):
        if rc != 0:
            raise RuntimeError("%s failed: CUDA error %d" % (what, rc))

    def free_memory(self):
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(self.cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
        return free.value, total.value

    def alloc(self, size):
        p = ctypes.c_uint64()
        rc = self.cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size))
        return p.value if rc == 0 else None

    def free(self, ptr):
        self.cu.cuMemFree_v2(ctypes.c_uint64(ptr))


def _lazy_init():
    global _initialized, _allocator, _driver, _queued_calls
    if _initialized:
        return
    m = _model()
    lib = os.environ.get("STANDIN_LIBCUDA")
    if lib:
        _driver = _Device(lib)
        # The device's free memory once the context exists: what cudaMalloc can still take.
        capacity = _driver.free_memory()[0]
    else:
        capacity = int(os.environ.get("STANDIN_CUDA_BYTES", str(1 << 30)))
    _allocator = m.Allocator(0, capacity, 0x7F00_0000_0000, _Clock())
    if lib:
        _mirror_segments(m)
    _initialized = True
    calls, _queued_calls = _queued_calls, []
    for call, _ in calls:
        try:
            call()
        except Exception as e:
            raise DeferredCudaCallError("CUDA call failed lazily at initialization: %s" % e) from e


def _mirror_segments(m):
    """Each segment the model's device takes is taken from the driver too."""
    dev = _allocator.dev
    take, give = dev.malloc, dev.free

    def malloc(size):
        ptr = take(size)
        if ptr is not None:
            real = _driver.alloc(size)
            if real is None:
                give(ptr)
                return None
            _driver_ptrs[ptr] = real
        return ptr

    def free(ptr):
        real = _driver_ptrs.pop(ptr, None)
        if real is not None:
            _driver.free(real)
        return give(ptr)

    dev.malloc, dev.free = malloc, free


def _frames():
    """The Python stack, innermost first, as `stacks="python"` records it."""
    out = []
    f = sys._getframe(2)
    while f is not None:
        out.append({"name": f.f_code.co_name, "filename": f.f_code.co_filename, "line": f.f_lineno})
        f = f.f_back
    return out


def _format_size(n):
    """c10/cuda/CUDACachingAllocator.cpp `format_size`."""
    if n <= 1024:
        return "%d bytes" % n
    if n <= 1048576:
        return "%.2f KiB" % (n / 1024.0)
    if n <= 1073741824:
        return "%.2f MiB" % (n / 1048576.0)
    return "%.2f GiB" % (n / 1073741824.0)


def _malloc(nbytes):
    _lazy_init()
    a = _allocator
    ctx = _frames() if memory._recording["stacks"] else None
    try:
        return a.malloc(nbytes, 0, ctx)
    except Exception as e:
        if type(e).__name__ != "OutOfMemory":
            raise
    from . import memory as _m
    from .. import _C

    allocated = sum(b.size for b in a.active)
    free = a.dev.free_bytes()
    size = a.round_size(nbytes)
    for obs in list(_C._observers):
        obs(0, size, allocated, free)
    reserved = a.reserved()
    total = _driver.free_memory()[1] if _driver is not None else a.dev.capacity
    raise OutOfMemoryError(
        "CUDA out of memory. Tried to allocate %s. GPU 0 has a total capacity of %s of which %s is free. "
        "Including non-PyTorch memory, this process has %s memory in use. Of the allocated memory %s is "
        "allocated by PyTorch, and %s is reserved by PyTorch but unallocated."
        % (
            _format_size(size),
            _format_size(total),
            _format_size(free),
            _format_size(reserved),
            _format_size(allocated),
            _format_size(reserved - allocated),
        )
    )


def _free(block):
    if _allocator is not None:
        _allocator.free(block, _frames() if memory._recording["stacks"] else None)
