"""headroom's hook into a job's PyTorch (`headroom watch --torch`), loaded by its
sitecustomize. It never imports torch itself and never initializes CUDA: when the job imports
torch, it asks torch to run `_start` once CUDA is initialized (`torch.cuda._lazy_call`), which

- starts bounded memory-history recording
  (`torch.cuda.memory._record_memory_history(max_entries=N, stacks="python")`),
- attaches an out-of-memory observer (`torch._C._cuda_attach_out_of_memory_observer`) that
  dumps a snapshot (`torch.cuda.memory._dump_snapshot`) and returns, so the OOM is raised as
  before,
- dumps a snapshot at exit, on a phase mark (`on_mark`) and on a signal (SIGUSR2 unless
  HEADROOM_TORCH_SIGNAL names another; only where the job left that signal's default).

PyTorch's private functions used, as read in pytorch/pytorch (v2.5 and later):
torch/cuda/__init__.py `_lazy_call(callable, **kwargs)` (queued calls run at `_lazy_init`, a
raising one makes it raise: `_start` never raises); torch/cuda/memory.py
`_record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
device=None, ...)` and `_dump_snapshot(filename="dump_snapshot.pickle")`;
torch/csrc/cuda/Module.cpp `THCPModule_attachOutOfMemoryObserver` (`observer(device, alloc,
device_allocated, device_free)`; an observer that raises replaces the OOM, so ours never does;
attaching initializes CUDA, so it is done only once CUDA is up).

Snapshots are named `rank{RANK}-pid{PID}-{why}.pickle` (RANK, else LOCAL_RANK, else 0) in
HEADROOM_TORCH_DIR; notes for headroom go to `rank{RANK}-pid{PID}.notes`, one per line.
"""

import atexit
import os
import signal
import sys
import time

_state = {"started": False, "torch": None, "n": 0, "dumping": False}


def _folder():
    return os.environ.get("HEADROOM_TORCH_DIR", "")


def _rank():
    for key in ("RANK", "LOCAL_RANK"):
        v = os.environ.get(key, "")
        if v.strip().lstrip("-").isdigit():
            return int(v)
    return 0


def _stem():
    return os.path.join(_folder(), "rank%d-pid%d" % (_rank(), os.getpid()))


def note(text):
    try:
        if _folder():
            with open(_stem() + ".notes", "a") as f:
                f.write(" ".join(str(text).splitlines()) + "\n")
    except Exception:
        pass


def _dump(why):
    torch = _state["torch"]
    if not _state["started"] or torch is None or _state["dumping"]:
        return
    _state["dumping"] = True
    try:
        _state["n"] += 1
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in why)[:60]
        path = "%s-%03d-%s.pickle" % (_stem(), _state["n"], safe)
        t0 = time.monotonic()
        torch.cuda.memory._dump_snapshot(path)
        note("snapshot %s (%s) in %.3f s" % (os.path.basename(path), why, time.monotonic() - t0))
    except Exception as e:
        note("no snapshot at %s: %r" % (why, e))
    finally:
        _state["dumping"] = False


def _on_oom(device, alloc, device_allocated, device_free):
    try:
        note(
            "oom device=%d alloc=%d device_allocated=%d device_free=%d"
            % (device, alloc, device_allocated, device_free)
        )
        _dump("oom")
    except Exception:
        pass


def _start():
    torch = _state["torch"]
    try:
        max_entries = int(os.environ.get("HEADROOM_TORCH_MAX_ENTRIES", "100000"))
        stacks = os.environ.get("HEADROOM_TORCH_STACKS", "python")
        torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks=stacks)
        _state["started"] = True
        note("recording max_entries=%d stacks=%s" % (max_entries, stacks))
    except Exception as e:
        note("memory history could not start: %r" % (e,))
        return
    try:
        torch._C._cuda_attach_out_of_memory_observer(_on_oom)
    except Exception as e:
        note("the out-of-memory observer could not be attached: %r" % (e,))


def _at_exit():
    if _state["started"]:
        _dump("exit")
    elif _state["torch"] is not None:
        note(
            "no CUDA snapshot was taken: torch %s was imported but CUDA was never initialized in this process"
            % getattr(_state["torch"], "__version__", "?")
        )


def on_mark(name):
    """A phase mark: a snapshot named after it."""
    _dump("mark-%s" % name)


def _signal_handler(signum, frame):
    _dump("signal")


def _on_torch(torch):
    _state["torch"] = torch
    atexit.register(_at_exit)
    try:
        torch.cuda._lazy_call(_start_safely)
    except Exception as e:
        note("torch.cuda._lazy_call is not available: %r" % (e,))
        return
    name = os.environ.get("HEADROOM_TORCH_SIGNAL", "SIGUSR2")
    try:
        sig = getattr(signal, name)
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _signal_handler)
    except Exception as e:
        note("no snapshot on %s: %r" % (name, e))


def _start_safely():
    try:
        _start()
    except BaseException as e:
        note("the hook failed at CUDA's start: %r" % (e,))


class _TorchFinder:
    """Finds nothing itself: when `torch` is first imported, lets the normal machinery find
    it and runs `_on_torch` once the module has loaded."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            try:
                _on_torch(module)
            except Exception as e:
                note("the hook failed after import torch: %r" % (e,))

        try:
            loader.exec_module = exec_module
        except Exception as e:
            note("cannot hook import torch: %r" % (e,))
        return spec


def install():
    if not _folder():
        return
    if "torch" in sys.modules:
        _on_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())
