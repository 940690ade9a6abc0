"""torch.cuda.memory's two private functions the bootstrap calls, with the signatures of
torch/cuda/memory.py as PyPI's torch 2.15.0 wheel ships it (the version scripts/torch-venv pins;
the tests compare the two with inspect.signature): `_record_memory_history`, whose
`__signature__` is `_record_memory_history_impl`'s (enabled="all", context="all", stacks="all",
max_entries=sys.maxsize, device=None, and six later keywords, from clear_history to
record_cuda, which the stand-in accepts and ignores), and `_dump_snapshot(filename=
"dump_snapshot.pickle", augment_with_fx_traces=False)`, which pickles `_snapshot()`'s dict (the
keys of torch/csrc/cuda/Module.cpp `THCPModule_memorySnapshot`, built by the project's fixture
builder, scripts/build-torch-snapshot-fixtures)."""

import importlib.machinery
import importlib.util
import os
import pickle
import sys

_recording = {"enabled": None, "stacks": None, "max_entries": 0, "start": 0}


def _record_memory_history(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: "Device" = None,  # noqa: F821 (a string, as PyTorch annotates it)
    clear_history: bool = False,
    compile_context: bool = False,
    global_record_annotations: bool = False,
    skip_actions: list[str] | None = None,
    record_pinned_host_memory: bool = False,
    record_cuda: bool = True,
):
    from . import _allocator

    start = len(_allocator.trace) if _allocator is not None else 0
    _recording.update(
        enabled=enabled, stacks=stacks if enabled else None, max_entries=max_entries, start=start
    )


def _builder():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
    path = os.path.join(root, "scripts", "build-torch-snapshot-fixtures")
    loader = importlib.machinery.SourceFileLoader("_headroom_fixture_builder", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _snapshot(device=None):
    from . import _allocator

    b = _builder()
    a = _allocator
    if a is None:
        return {"segments": [], "device_traces": [], "allocator_settings": {}}
    keep = _recording["max_entries"] if _recording["enabled"] else 0
    trace = b.trace_entries(a)[_recording["start"] :][-keep:] if keep else []
    return {
        "segments": b.segments(a, []),
        "device_traces": [trace],
        "allocator_settings": b.settings(a, os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")),
        "external_annotations": [],
    }


def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
    s = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(s, f)
