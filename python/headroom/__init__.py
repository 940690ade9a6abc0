"""headroom for Python: phase marks for `headroom watch`, the true peak of a block of code, and
typed results, all through the `headroom` program installed with this package.

    import headroom

    headroom.mark("load")                 # a phase of a surrounding `headroom watch`
    with headroom.mark("train"):          # ... as a block
        train()

    with headroom.peak() as m:            # the true peak of this block, to the byte
        step()
    print(m.device_used_bytes, m.job_used_bytes)

    s = headroom.watch(["python", "train.py"])   # a command under `headroom watch`
    print(s.peak_bytes("job_used_bytes"))

The pytest plugin (`pytest --headroom`) is `headroom.pytest_plugin`. Standard library only."""

from ._binary import binary
from ._mark import mark
from ._watch import HeadroomError, Measurement, peak, read_summary, watch
from .results import (
    Device, Idle, IdleReading, NvmlMemory, Peak, Peaks, PhaseSummary, PolledPeaks, Summary,
)
from .sizes import format_bytes, parse_bytes, parse_duration_s

__all__ = [
    "binary", "mark", "peak", "watch", "read_summary", "HeadroomError", "Measurement",
    "Summary", "Peak", "Peaks", "PolledPeaks", "Idle", "IdleReading", "NvmlMemory", "PhaseSummary",
    "Device",
    "parse_bytes", "format_bytes", "parse_duration_s",
]
