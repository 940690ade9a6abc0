"""`watch` (a command under `headroom watch`) and `peak` (the true peak of a block of this
process's code, read by `headroom watch --pid` on this process): both run the headroom program
and read the result folder it writes, so the numbers are the command line's own."""

import csv
import json
import os
import signal
import subprocess
import tempfile
import time

from ._binary import binary
from .results import Summary

#: How long the program may take to start watching, or to finish once asked.
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


class HeadroomError(RuntimeError):
    """The headroom program could not watch (its exit code and what it said)."""

    def __init__(self, message, code=None, stderr=""):
        super().__init__(message + (f": {stderr.strip()}" if stderr.strip() else ""))
        self.code = code
        self.stderr = stderr


def _options(interval, sim_script, extra):
    args = []
    if interval is not None:
        args += ["--interval", str(interval)]
    if sim_script is not None:
        args += ["--sim-script", os.fspath(sim_script)]
    args += [str(a) for a in extra]
    return args


def _new_out(out):
    if out is not None:
        return os.fspath(out)
    return os.path.join(tempfile.mkdtemp(prefix="headroom-"), "watch")


def read_summary(folder):
    """The `Summary` of a result folder."""
    with open(os.path.join(folder, "summary.json"), encoding="utf-8") as f:
        return Summary.from_json(json.load(f), dir=os.fspath(folder))


def watch(command, *, interval=None, duration=None, sim_script=None, out=None, args=(), env=None):
    """Runs `command` (a list of words) under `headroom watch` and returns its `Summary`
    (`summary.exit_code` is the job's status). The folder is `out`, or a new temporary one
    (`summary.dir`). Raises HeadroomError when the watch could not run at all."""
    out = _new_out(out)
    extra = list(args) + (["--duration", str(duration)] if duration is not None else [])
    argv = [binary(), "watch", "-q", "--out", out] + _options(interval, sim_script, extra)
    argv += ["--"] + [os.fspath(c) for c in command]
    done = subprocess.run(argv, env=env, stderr=subprocess.PIPE, text=True)
    if not os.path.isfile(os.path.join(out, "summary.json")):
        raise HeadroomError("headroom watch did not run", done.returncode, done.stderr)
    return read_summary(out)


class Measurement:
    """What `peak()` measured: filled in when the block ends.

    `summary` is the watch's `Summary`; `idle_*` the readings when the block began, `final_*`
    those when it ended (None where headroom could not read the view)."""

    def __init__(self, out):
        self.dir = out
        self.summary = None
        self.idle_device_used_bytes = None
        self.idle_job_used_bytes = None
        self.final_device_used_bytes = None
        self.final_job_used_bytes = None

    def peak_bytes(self, view="device_used_bytes"):
        """The true peak of `view` during the block."""
        return self.summary.peak_bytes(view)

    @property
    def device_used_bytes(self):
        return self.peak_bytes("device_used_bytes")

    @property
    def job_used_bytes(self):
        return self.peak_bytes("job_used_bytes")

    def _read_timeline(self):
        """The idle row and the last reading of each view (the `final` row is the last)."""
        with open(os.path.join(self.dir, "timeline.csv"), newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                dev = row.get("device_used_bytes") or None
                job = row.get("job_used_bytes") or None
                if row.get("source") == "idle":
                    self.idle_device_used_bytes = int(dev) if dev else None
                    self.idle_job_used_bytes = int(job) if job else None
                if dev:
                    self.final_device_used_bytes = int(dev)
                if job:
                    self.final_job_used_bytes = int(job)


class peak:
    """`with headroom.peak() as m:` the block's true peak, read by `headroom watch --pid` on
    this process (device and this process's tree, children included); after the block
    `m.device_used_bytes`, `m.job_used_bytes` and `m.summary` hold it. Watching takes no
    device memory. Without a GPU, `sim_script=FILE` watches the simulated device instead."""

    def __init__(self, *, interval="1ms", sim_script=None, out=None, args=()):
        self._argv_tail = _options(interval, sim_script, args)
        self._out = _new_out(out)
        self._proc = None
        self.measurement = Measurement(self._out)

    def __enter__(self):
        argv = [binary(), "watch", "--pid", str(os.getpid()), "-q", "--out", self._out]
        self._proc = subprocess.Popen(
            argv + self._argv_tail, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        started = os.path.join(self._out, "summary.json")
        deadline = time.monotonic() + START_TIMEOUT_S
        # summary.json is written once the idle reading is taken and the watch has begun.
        while not os.path.isfile(started):
            if self._proc.poll() is not None:
                raise HeadroomError(
                    "headroom watch --pid did not start", self._proc.returncode,
                    self._proc.stderr.read(),
                )
            if time.monotonic() > deadline:
                self._stop()
                raise HeadroomError(f"headroom watch --pid did not start in {START_TIMEOUT_S} s")
            time.sleep(0.002)
        return self.measurement

    def _stop(self):
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        return self._proc.stderr.read()

    def __exit__(self, *exc):
        stderr = self._stop()
        try:
            self.measurement.summary = read_summary(self._out)
            self.measurement._read_timeline()
        except (OSError, ValueError, KeyError) as e:
            raise HeadroomError(f"cannot read {self._out}: {e}", self._proc.returncode, stderr)
        return False
