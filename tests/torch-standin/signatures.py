"""Prints the signature of every PyTorch function the bootstrap calls, one per line, and checks
that each accepts the bootstrap's own call. Run with the stand-in or the real torch first on
sys.path; `headroom watch --torch`'s tests require the two outputs to be identical."""

import inspect
import os
import sys

# Python puts this script's folder first on sys.path, and the stand-in's torch is in it: only
# PYTHONPATH and the interpreter's own site-packages decide which torch is read.
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == os.path.dirname(
    os.path.abspath(__file__)
):
    del sys.path[0]

import torch  # noqa: E402
import torch.cuda.memory  # noqa: E402

print("torch %s" % torch.__version__, file=sys.stderr)

calls = [
    ("torch.cuda.memory._record_memory_history", torch.cuda.memory._record_memory_history,
     ((), {"max_entries": 100000, "stacks": "python"})),
    ("torch.cuda.memory._dump_snapshot", torch.cuda.memory._dump_snapshot, (("x.pickle",), {})),
    ("torch.cuda._lazy_call", torch.cuda._lazy_call, ((print,), {})),
]
for name, f, (args, kwargs) in calls:
    sig = inspect.signature(f)
    sig.bind(*args, **kwargs)
    print("%s%s" % (name, sig))
# A builtin of torch._C (METH_O): its signature is not introspectable. The bootstrap calls it
# with one argument; none and two must be refused before it runs (and initializes CUDA).
observer = torch._C._cuda_attach_out_of_memory_observer
refused = []
for args in ((), (print, print)):
    try:
        observer(*args)
    except TypeError:
        refused.append(len(args))
    except Exception:
        pass
print(
    "torch._C._cuda_attach_out_of_memory_observer: callable %s, refuses %s arguments"
    % (callable(observer), " and ".join(str(n) for n in refused) or "no count of")
)
sys.exit(0)
