#!/usr/bin/env python3
"""torch_snapshot_long.py: a long PyTorch memory snapshot built without a GPU, for measuring
how faithfully `headroom import torch` / `replay` follow PyTorch on long traces.

    scripts/torch_snapshot_long.py ENTRIES OUT.pickle [SEED]

The trace comes from the port of PyTorch's caching allocator (torch_snapshot_model.py), so
every segment decision follows PyTorch's rules, and it holds what makes long traces drift:
equal-size blocks (best fit's ties break by address), `empty_cache` with the driver handing
freed address ranges out again lowest first (new segments below older ones), a side stream
with `record_stream` (frees pending until that stream catches up), a late start (recording
switched on mid-run: the trace opens with segments it never allocated), and an OOM at the
end. Device 1 runs with expandable segments (segment_map / segment_unmap) on a device the
size of the simulator's H200, so its address reservations match the replay's.

Written with Python's pickle.dump (protocol 4, FRAME opcodes, every entry memoized), as
torch.cuda.memory._dump_snapshot writes it. OUT.json next to it lists the facts the port
computed per device (entries, segment decisions, reserved peak) for the tests to check:
BUILT, NOT RECORDED.
"""

import importlib.machinery
import importlib.util
import json
import os
import pickle
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_snapshot_model import Allocator, OutOfMemory  # noqa: E402

_loader = importlib.machinery.SourceFileLoader(
    "build_fixtures", os.path.join(HERE, "build-torch-snapshot-fixtures"))
_spec = importlib.util.spec_from_loader("build_fixtures", _loader)
fx = importlib.util.module_from_spec(_spec)
_loader.exec_module(fx)

MIB = 1 << 20
GIB = 1 << 30
H200_BYTES = 143156 * MIB  # profiles/h200.toml total_bytes
SIDE = fx.SIDE

# Sizes repeat, so cached blocks of equal size compete and ties break by address.
SMALL = [512, 4096, 65536, 131072 + 512, 700 * 1024]
LARGE = [2 * MIB + 512, 3 * MIB, 6 * MIB, 12 * MIB, 12 * MIB + 4096, 24 * MIB, 40 * MIB]


def workload(w, rng, entries, late_start, expandable):
    """Training-like steps until the trace holds `entries` entries; `empty_cache` now and
    then, a side stream, and recording switched on after `late_start` steps."""
    a = w.a
    live = []
    step = 0
    base_reserved = 0
    if late_start:
        a.record = False
    while True:
        step += 1
        if late_start and step == late_start:
            a.record = True
            base_reserved = a.reserved()
        if a.record and len(a.trace) >= entries:
            break
        for j in range(rng.randrange(4, 12)):
            size = rng.choice(SMALL if rng.random() < 0.4 else LARGE)
            name = f"s{step}.{j}"
            w.malloc(name, size, line=40 + j % 5)
            live.append(name)
        if not expandable and step % 5 == 0:
            name = f"side{step}"
            w.malloc(name, rng.choice(LARGE), stream=SIDE, line=37, op="data")
            w.record_stream(name, 0)
            w.free(name, line=38)
        rng.shuffle(live)
        keep = rng.randrange(8, 40)
        while len(live) > keep:
            w.free(live.pop(), line=60)
        if step % 3 == 0:
            a.stream_done(0)
            a.stream_done(SIDE)
        if step % 23 == 0:
            w.empty_cache()
    if not expandable:
        # The main stream has not caught up with the last side-stream frees: the retry chain
        # waits for them, releases the cache, and still cannot serve this.
        try:
            w.malloc("big", a.dev.capacity, line=42, op="conv")
        except OutOfMemory:
            pass
    return base_reserved


def run(device, entries, capacity, seed, late_start, expandable):
    clock = fx.Clock(1_760_000_000_000_000 + seed * 1_000_000)
    frames = fx.Frames()
    alloc = Allocator(device, capacity, 0x7F00_0000_0000 + (device << 40), clock,
                      expandable=expandable, reuse_addresses=True)
    w = fx.Workload(alloc, frames, clock)
    base = workload(w, random.Random(seed), entries, late_start, expandable)
    return alloc, base


def facts(alloc, base_reserved):
    out = fx.facts(alloc, alloc.dev.capacity)
    # Segments held when recording began count towards the reserved peak.
    reserved = peak = base_reserved
    for action, _addr, size, *_ in alloc.trace:
        if action in ("segment_alloc", "segment_map"):
            reserved += size
        elif action in ("segment_free", "segment_unmap"):
            reserved -= size
        peak = max(peak, reserved)
    out["reserved_peak_bytes"] = peak
    out["reserved_at_start_bytes"] = base_reserved
    return out


def write(path, snap, meta):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    with open(path + ".json", "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def main():
    entries = int(sys.argv[1])
    path = sys.argv[2]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 11
    d0, b0 = run(0, entries * 9 // 10, 8 * GIB, seed, late_start=40, expandable=False)
    # Expandable segments are a process-wide setting: their trace is a snapshot of its own.
    d1, b1 = run(0, max(entries // 10, 100), H200_BYTES, seed + 1, late_start=0,
                 expandable=True)
    out = {}
    for p, a, b, conf in ((path, d0, b0, ""),
                          (path[:-len(".pickle")] + ".expandable.pickle", d1, b1,
                           "expandable_segments:True")):
        meta = {"built_not_recorded": True, "built_by": "scripts/torch_snapshot_long.py",
                "entries": entries, "seed": seed, "devices": {"0": facts(a, b)}}
        write(p, fx.snapshot([a], conf), meta)
        out[os.path.basename(p)] = {x: meta["devices"]["0"][x]
                                    for x in ("entries", "segment_decisions", "reserved_peak_bytes")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
