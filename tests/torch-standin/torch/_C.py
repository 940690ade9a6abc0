"""torch._C's one function the bootstrap calls."""

_observers = []


def _cuda_attach_out_of_memory_observer(observer):
    """torch/csrc/cuda/Module.cpp `THCPModule_attachOutOfMemoryObserver` (pytorch/pytorch, v2.5):
    one positional argument; the observer is called as observer(device, alloc,
    device_allocated, device_free); attaching initializes CUDA."""
    from . import cuda

    cuda._lazy_init()
    _observers.append(observer)
