"""Phase marks for a surrounding `headroom watch`.

headroom names a FIFO in HEADROOM_MARK; every line written to it starts a phase (an empty line
ends the current one), so the watch's report has the device's and the job's peak per phase.
Outside `headroom watch`, or once it has gone, marking does nothing and never blocks."""

import functools
import os

ENV = "HEADROOM_MARK"


def write_mark(name):
    """Starts phase `name` now (one line; "" ends the current phase). Never blocks."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = " ".join(str(name).splitlines()) + "\n"
    try:
        # Non-blocking: with no reader left this fails at once instead of hanging. One write
        # of up to 4 KiB is atomic, so processes of one job marking at once never mix lines.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


class mark:
    """Marks phase `name`, three ways:

    - `mark("load")` as a statement starts phase "load" there and then;
    - `with mark("load"):` the phase is the block (after it, an enclosing `with mark` phase
      starts again, as "outer (2)", or the phase ends);
    - `@mark("step")` on a function: each call is a phase.

    The statement form writes its line when the object is dropped at the end of the statement
    (CPython frees it at once), so a `mark(...)` kept in a variable marks only when dropped; a
    block or a decorator never writes that line."""

    _open = []  # names of the `with mark(...)` blocks now open, innermost last

    def __init__(self, name):
        self.name = str(name)
        self._used = False

    def __enter__(self):
        self._used = True
        write_mark(self.name)
        mark._open.append(self.name)
        return self

    def __exit__(self, *exc):
        mark._open.pop()
        write_mark(mark._open[-1] if mark._open else "")
        return False

    def __call__(self, fn):
        self._used = True
        name = self.name

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with mark(name):
                return fn(*args, **kwargs)

        return wrapper

    def __del__(self):
        if not self._used:
            write_mark(self.name)
