"""scripts/gpu-check's training step on the stand-in torch, for its tests on the fake driver:
run by tests/torch-standin/gpu-check-python in place of scripts/torch_train_step.py (which needs
the real torch's nn and optim). Weights, three steps' activations, then a request of the
device's whole memory caught inside the job, with the figures in torch_train_step.py's format,
as this job holds them (whole 2 MiB pages, so the stand-in's allocator reserves exactly them)."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "docs"))
from headroom_mark import mark  # noqa: E402

MIB = 1 << 20

mark("load")
weights = torch.empty(64 * MIB)
mark("train")
for _ in range(3):
    activations = torch.empty(32 * MIB)
    del activations
print("max_allocated_bytes %d" % (96 * MIB))
print("max_reserved_bytes %d" % (96 * MIB))
mark("oom")
total = torch.cuda._driver.free_memory()[1]
try:
    torch.empty(total)
except torch.cuda.OutOfMemoryError:
    print("oom_requested_bytes %d" % total)
else:
    sys.exit("the deliberate request of %d bytes did not fail" % total)
