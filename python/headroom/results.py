"""Typed results: `summary.json` of a run or a watch as dataclasses.

Field names are the JSON Schema's (docs/schema/summary.schema.json, the same names in the same
places), byte counts are raw integers, and a key this version does not know is ignored, so a
newer headroom's folder still reads. Only what a Python caller needs is typed; `raw` keeps the
whole document."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class Peak:
    """A true interval peak: its bytes, when (ns since the start) and what saw it."""

    bytes: int
    t_ns: int
    source: str

    @classmethod
    def from_json(cls, d):
        return cls(bytes=d["bytes"], t_ns=d["t_ns"], source=d["source"])


@dataclass
class PolledPeaks:
    """What a dashboard polling every `period_ns` would have reported, per view."""

    period_ns: int
    ticks: int
    peaks: Dict[str, int]

    @classmethod
    def from_json(cls, d):
        return cls(period_ns=d["period_ns"], ticks=d["ticks"], peaks=dict(d["peaks"]))


@dataclass
class Peaks:
    """`peaks`: the true peak of each view over the whole run, and the pollers'."""

    run: Dict[str, Peak]
    headroom_at_peak_bytes: Optional[int]
    polled: Dict[str, PolledPeaks]

    @classmethod
    def from_json(cls, d):
        return cls(
            run={k: Peak.from_json(v) for k, v in d["run"].items()},
            headroom_at_peak_bytes=d.get("headroom_at_peak_bytes"),
            polled={k: PolledPeaks.from_json(v) for k, v in d.get("polled", {}).items()},
        )


@dataclass
class IdleReading:
    """One reading of the device (`idle.after_context`, `idle.before_context`)."""

    t_ns: int
    device_free_bytes: int
    device_used_bytes: int
    device_total_bytes: int

    @classmethod
    def from_json(cls, d):
        if d is None:
            return None
        return cls(
            t_ns=d["t_ns"],
            device_free_bytes=d["device_free_bytes"],
            device_used_bytes=d["device_used_bytes"],
            device_total_bytes=d["device_total_bytes"],
        )


@dataclass
class NvmlMemory:
    """NVML's memory info of the whole device (`idle.before_context`)."""

    total_bytes: int
    reserved_bytes: Optional[int]
    used_bytes: int
    free_bytes: int

    @classmethod
    def from_json(cls, d):
        if d is None:
            return None
        return cls(
            total_bytes=d["total_bytes"],
            reserved_bytes=d.get("reserved_bytes"),
            used_bytes=d["used_bytes"],
            free_bytes=d["free_bytes"],
        )


@dataclass
class Idle:
    """`idle`: the readings before anything ran (NVML before headroom's context, the device
    after it)."""

    before_context: Optional[NvmlMemory]
    after_context: Optional[IdleReading]
    context_overhead_bytes: Optional[int]

    @classmethod
    def from_json(cls, d):
        return cls(
            before_context=NvmlMemory.from_json(d.get("before_context")),
            after_context=IdleReading.from_json(d.get("after_context")),
            context_overhead_bytes=d.get("context_overhead_bytes"),
        )


@dataclass
class Device:
    """`device`: which GPU (or simulated profile) it ran on."""

    backend: str
    name: str
    index: int
    total_bytes: Optional[int]
    profile: Optional[str]
    uuid: Optional[str]
    driver_version: str

    @classmethod
    def from_json(cls, d):
        return cls(
            backend=d["backend"],
            name=d["name"],
            index=d["index"],
            total_bytes=d.get("total_bytes"),
            profile=d.get("profile"),
            uuid=d.get("uuid"),
            driver_version=d.get("driver_version", ""),
        )


@dataclass
class PhaseSummary:
    """One phase (a workload's, or one marked with `headroom.mark`) and its true peaks."""

    name: str
    status: str
    start_ns: Optional[int]
    end_ns: Optional[int]
    peaks: Dict[str, Peak]

    @classmethod
    def from_json(cls, d):
        return cls(
            name=d["name"],
            status=d["status"],
            start_ns=d.get("start_ns"),
            end_ns=d.get("end_ns"),
            peaks={k: Peak.from_json(v) for k, v in d.get("peaks", {}).items()},
        )


@dataclass
class Summary:
    """`summary.json` of a result folder; `dir` is the folder."""

    format_version: int
    headroom_version: str
    status: str
    exit_code: Optional[int]
    device: Device
    idle: Idle
    peaks: Peaks
    phases: List[PhaseSummary]
    dir: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d, dir=None):
        return cls(
            format_version=d["format_version"],
            headroom_version=d["headroom_version"],
            status=d["status"],
            exit_code=d.get("exit_code"),
            device=Device.from_json(d["device"]),
            idle=Idle.from_json(d["idle"]),
            peaks=Peaks.from_json(d["peaks"]),
            phases=[PhaseSummary.from_json(p) for p in d.get("phases", [])],
            dir=dir,
            raw=d,
        )

    def peak_bytes(self, view="device_used_bytes"):
        """The true peak of `view` over the whole run, in bytes (None if not read)."""
        p = self.peaks.run.get(view)
        return None if p is None else p.bytes

    def phase(self, name):
        """The phase named `name` (KeyError if none)."""
        for p in self.phases:
            if p.name == name:
                return p
        raise KeyError(name)


#: Each dataclass and the JSON Schema definition whose names it uses (checked by the tests).
SCHEMA_DEFS = {
    Peak: "Peak",
    PolledPeaks: "PolledPeaks",
    Peaks: "Peaks",
    IdleReading: "IdleReading",
    NvmlMemory: "NvmlMemory",
    Idle: "Idle",
    PhaseSummary: "PhaseSummary",
    Summary: None,  # the document itself
    Device: "device",  # inline under the document's `device` property
}
