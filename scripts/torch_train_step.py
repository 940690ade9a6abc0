"""A small real training step for scripts/gpu-check, run under `headroom watch --torch`: a tiny
MLP, a few AdamW steps, a phase mark at each stage, then one deliberate out-of-memory request
(the device's whole memory) caught inside the job, so that the bootstrap's snapshot at the OOM
exists and the job still exits 0. Its figures go to stdout, one `name value` line each, bytes
as raw integers.

    python3 scripts/torch_train_step.py          on the GPU (under headroom watch --torch)
    python3 scripts/torch_train_step.py --cpu    one model and optimizer step on the CPU, no
                                                 memory figures and no OOM: a check of this
                                                 script where there is no GPU

Exit codes: 0 it ran; 3 not run, torch or its CUDA is absent (the reason on stdout, `not run:
…`); 1 the step failed (the deliberate request did not fail, or anything raised).
"""

import os
import sys

STEPS = 5
BATCH = 256
WIDTH = 1024
HIDDEN = 4096


def main(argv):
    on_cpu = argv[1:] == ["--cpu"]
    if argv[1:] and not on_cpu:
        print("usage: torch_train_step.py [--cpu]", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError as e:
        print("not run: import torch failed: %s" % e)
        return 3
    if not on_cpu and not torch.cuda.is_available():
        print("not run: torch %s: torch.cuda.is_available() is False" % torch.__version__)
        return 3
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "docs"))
    from headroom_mark import mark

    device = torch.device("cpu" if on_cpu else "cuda")
    torch.manual_seed(0)
    mark("load")
    model = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, WIDTH)
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    print("torch_version %s" % torch.__version__)
    print("device %s" % (device if on_cpu else torch.cuda.get_device_name(0)))
    print("parameter_bytes %d" % params)

    mark("train")
    steps = 1 if on_cpu else STEPS
    for _ in range(steps):
        x = torch.randn(BATCH, WIDTH, device=device)
        y = torch.randn(BATCH, WIDTH, device=device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    print("steps %d" % steps)
    print("final_loss %.6f" % loss.item())
    if on_cpu:
        return 0
    torch.cuda.synchronize()
    print("max_allocated_bytes %d" % torch.cuda.max_memory_allocated())
    print("max_reserved_bytes %d" % torch.cuda.max_memory_reserved())

    mark("oom")
    free, total = torch.cuda.mem_get_info()
    print("device_free_bytes_before_oom %d" % free)
    try:
        held = torch.empty(total, dtype=torch.uint8, device=device)
    except torch.cuda.OutOfMemoryError as e:
        print("oom_requested_bytes %d" % total)
        print("oom_message %s" % " ".join(str(e).split())[:200])
    else:
        print("the deliberate request of %d bytes did not fail" % held.numel())
        return 1
    mark("")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
