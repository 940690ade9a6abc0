"""Phase marks for `headroom watch`: mark("warmup") starts a phase named "warmup".

headroom names a FIFO in HEADROOM_MARK; every line written to it starts a phase, so the
report shows the device's and the job's peak per phase. Outside `headroom watch` (no
HEADROOM_MARK), or once headroom has gone, mark() does nothing. With the wheel installed
(`pip install headroom-gpu`), `from headroom import mark` is the same and more (a block, a
decorator); without it, copy this file next to your script, or paste the lines of mark():

    from headroom_mark import mark
    mark("load"); model = load(); mark("train")
"""
import os
import sys


def mark(name):
    """Starts phase `name` (one line; an empty name ends the current phase). Never blocks."""
    path = os.environ.get("HEADROOM_MARK")
    if path:
        try:
            # Non-blocking: with no reader left this fails at once instead of hanging.
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
            try:
                os.write(fd, (" ".join(str(name).splitlines()) + "\n").encode())
            finally:
                os.close(fd)
        except OSError:
            pass
    # Under `headroom watch --torch`: a PyTorch memory snapshot named after the phase.
    hook = sys.modules.get("_headroom_torch")
    if hook is not None:
        try:
            hook.on_mark(name)
        except Exception:
            pass
