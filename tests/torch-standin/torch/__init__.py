"""A stand-in for PyTorch, written for headroom's tests: exactly the functions `headroom
watch --torch`'s bootstrap calls, with the signatures of PyTorch's own source (see
torch/cuda/memory.py and torch/cuda/__init__.py here for the files and versions), over a port
of PyTorch's caching allocator (scripts/torch_snapshot_model.py). Jobs allocate with
`torch.empty(nbytes, device="cuda")`; a tensor frees its block when it is collected.

Where the environment names a CUDA driver library (STANDIN_LIBCUDA, e.g. the fake driver's),
every segment the allocator takes or returns is also taken from or returned to that driver
with cuMemAlloc/cuMemFree, so NVML sees the job's memory as it would see PyTorch's.
"""

__version__ = "0.0.0+headroom.standin"

from . import _C  # noqa: E402
from . import cuda  # noqa: E402


class Tensor:
    def __init__(self, block, nbytes):
        self._block = block
        self.nbytes = nbytes

    def __del__(self):
        try:
            cuda._free(self._block)
        except Exception:
            pass


def empty(nbytes, device="cuda"):
    if not str(device).startswith("cuda"):
        raise ValueError("the stand-in only allocates on cuda")
    return Tensor(cuda._malloc(int(nbytes)), int(nbytes))
