"""A job for `headroom watch --torch` on the stand-in torch: weights, a phase mark,
activations, a pause (so NVML's process list, read every 10 ms, sees them), then a request the
device cannot serve. Sizes are whole 2 MiB pages, so every figure is exact."""

import sys
import time

sys.path.insert(0, sys.argv[1])  # docs/, for headroom_mark
from headroom_mark import mark  # noqa: E402

import torch  # noqa: E402

GIB = 1 << 30


def load():
    return [torch.empty(GIB) for _ in range(2)]


def forward():
    acts = [torch.empty(GIB // 2) for _ in range(2)]
    time.sleep(0.5)
    out = torch.empty(GIB)
    return acts, out


mark("load")
weights = load()
mark("step")
forward()
