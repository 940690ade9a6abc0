"""Prints the signature of every PyTorch function the bootstrap calls, one per line, and checks
that each accepts the bootstrap's own call. Run with the stand-in or the real torch first on
sys.path; `headroom watch --torch`'s tests compare the two where the real wheel is installed."""

import inspect
import sys

import torch
import torch.cuda.memory

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
# A builtin of torch._C: its signature is not introspectable; it is called with one argument.
print("torch._C._cuda_attach_out_of_memory_observer: %s" % callable(torch._C._cuda_attach_out_of_memory_observer))
sys.exit(0)
