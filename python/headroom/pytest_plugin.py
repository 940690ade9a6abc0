"""pytest plugin: each test's true GPU memory peak, budgets, a leak check, JUnit properties.

    pytest --headroom                          # measure every test
    @pytest.mark.gpu_memory(max="2GiB")        # a budget (and measure this test)
    @pytest.mark.gpu_memory(leak=True)         # fail unless the device is back at its idle reading

Each measured test body runs under `headroom watch --pid` on the pytest process: the true peak
of the device (`device_used_bytes`, every process) and of the test's own process tree
(`job_used_bytes`: its CUDA context, NCCL and cuBLAS buffers included), the idle reading before
the test and the reading after it. A budget fails the test with the view and the bytes; a leak
(after − before, of the test's own memory where NVML lists it, else the device's) fails it with
the bytes. Results go into pytest's JUnit XML as properties of each test case and a table at the
end of the run.

Options: --headroom, --headroom-wait-free=60s (wait for other processes to leave the GPU
first), --headroom-leak-check (every measured test), --headroom-leak-tolerance=SIZE,
--headroom-without-gpu=skip|sim (no NVIDIA driver: skip measured tests with the reason, or
watch the simulated device, which sees what a marker's `sim_usage` says), --headroom-interval.
"""

import gc
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

from ._binary import binary
from ._watch import HeadroomError, peak
from .sizes import format_bytes, parse_bytes, parse_duration_s

MARKER = "gpu_memory"
VIEWS = ("device_used_bytes", "job_used_bytes")
#: The view a budget applies to unless the marker names one: the test process's own memory.
DEFAULT_VIEW = "job_used_bytes"


def pytest_addoption(parser):
    g = parser.getgroup("headroom", "GPU memory: true peaks, budgets and leaks (headroom)")
    g.addoption("--headroom", action="store_true", help="measure every test's true GPU peak")
    g.addoption(
        "--headroom-wait-free", metavar="DURATION", default=None,
        help="before each measured test, wait up to DURATION (60s) until no other process "
        "uses the GPU; fail the test if one still does",
    )
    g.addoption(
        "--headroom-leak-check", action="store_true",
        help="fail a measured test whose memory is not back at the idle reading after it",
    )
    g.addoption(
        "--headroom-leak-tolerance", metavar="SIZE", default="0B",
        help="bytes a test may leave behind before it counts as a leak (default 0B)",
    )
    g.addoption(
        "--headroom-without-gpu", choices=("skip", "sim"), default="skip",
        help="with no NVIDIA driver: skip measured tests with the reason (default), or watch "
        "the simulated device",
    )
    g.addoption(
        "--headroom-interval", metavar="DURATION", default="1ms",
        help="how often device used is read (headroom watch --interval)",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        f"{MARKER}(max=None, view='{DEFAULT_VIEW}', leak=None, leak_tolerance=None, "
        "sim_usage=None): measure this test's true GPU memory peak; fail it above `max` "
        "(e.g. '2GiB') in `view` (job_used_bytes or device_used_bytes), or when it leaks",
    )
    config._headroom = _Session(config)


class _Session:
    """What the plugin knows for the whole run: the device, and every test's result."""

    def __init__(self, config):
        self.config = config
        self.enabled = config.getoption("--headroom")
        self.results = []  # (nodeid, dict)
        self._backend = None

    def backend(self):
        """("cuda"|"sim", reason): asked of `headroom devices --json` once."""
        if self._backend is None:
            try:
                out = subprocess.run(
                    [binary(), "devices", "--json"], capture_output=True, text=True, timeout=120
                )
                d = json.loads(out.stdout)
                self._backend = (d.get("backend"), d.get("reason") or "")
            except (OSError, ValueError, subprocess.TimeoutExpired) as e:
                self._backend = ("error", f"headroom devices --json failed: {e}")
        return self._backend


def _marker(item):
    return item.get_closest_marker(MARKER)


def _measured(item):
    return item.config._headroom.enabled or _marker(item) is not None


def pytest_runtest_setup(item):
    if not _measured(item):
        return
    s = item.config._headroom
    backend, reason = s.backend()
    if backend == "error":
        pytest.fail(f"headroom: {reason}", pytrace=False)
    if backend == "sim" and item.config.getoption("--headroom-without-gpu") == "skip":
        pytest.skip(f"headroom: no GPU to measure ({reason}); --headroom-without-gpu=sim "
                    "watches the simulated device instead")


def _settings(item):
    cfg = item.config
    m = _marker(item)
    kw = dict(m.kwargs) if m else {}
    unknown = set(kw) - {"max", "view", "leak", "leak_tolerance", "sim_usage"}
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: {MARKER}() has no argument {sorted(unknown)}")
    view = kw.get("view", DEFAULT_VIEW)
    if view not in VIEWS:
        raise pytest.UsageError(
            f"{item.nodeid}: {MARKER}(view={view!r}): one of {', '.join(VIEWS)}"
        )
    try:
        budget = parse_bytes(kw["max"]) if kw.get("max") is not None else None
        tol = kw.get("leak_tolerance")
        tolerance = parse_bytes(cfg.getoption("--headroom-leak-tolerance") if tol is None else tol)
    except ValueError as e:
        raise pytest.UsageError(f"{item.nodeid}: {MARKER}(): {e}")
    leak = kw.get("leak")
    if leak is None:
        leak = cfg.getoption("--headroom-leak-check")
    return budget, view, bool(leak), tolerance, kw.get("sim_usage")


def _sim_script(usage, folder):
    """A usage script for the simulated device: [(at, job_used), …] as headroom writes them."""
    rows = usage or [("0ms", "0B")]
    text = "usage = [\n" + "".join(
        f'  {{ at = "{at}", job_used = "{size}" }},\n' for at, size in rows
    ) + "]\n"
    path = os.path.join(folder, "sim-usage.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def _wait_free(limit_s):
    """Waits until no process but this one's tree uses the GPU; the last one seen if not."""
    deadline = time.monotonic() + limit_s
    ours = {os.getpid()}
    while True:
        p = subprocess.Popen([binary(), "devices", "--json"], stdout=subprocess.PIPE, text=True)
        out, _ = p.communicate(timeout=120)
        try:
            gpus = json.loads(out).get("gpus", [])
        except ValueError:
            gpus = []
        others = [
            (q.get("pid"), q.get("used_bytes"))
            for g in gpus for q in (g.get("processes") or [])
            if q.get("pid") not in ours | {p.pid}
        ]
        if not others or time.monotonic() >= deadline:
            return others
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def _release_framework_caches():
    """What a framework keeps cached is not a leak of the test: collected and emptied first."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        except Exception:  # a broken CUDA state is the test's own failure to report
            pass


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not _measured(item):
        return (yield)
    budget, view, leak, tolerance, sim_usage = _settings(item)
    cfg = item.config
    wait = cfg.getoption("--headroom-wait-free")
    if wait:
        others = _wait_free(parse_duration_s(wait))
        if others:
            pytest.fail(
                f"headroom: the GPU is still used by other processes after {wait}: "
                + ", ".join(f"pid {pid} ({format_bytes(b)})" for pid, b in others),
                pytrace=False,
            )
    folder = _folder(item)
    args = {"interval": cfg.getoption("--headroom-interval"), "out": os.path.join(folder, "watch")}
    if cfg._headroom.backend()[0] == "sim":
        args["sim_script"] = _sim_script(sim_usage, folder)
    watcher = peak(**args)
    m = watcher.__enter__()
    failed = None
    try:
        result = yield
    except BaseException as e:
        failed = e
    _release_framework_caches()
    try:
        watcher.__exit__(None, None, None)
    except HeadroomError as e:
        if failed is None:
            pytest.fail(f"headroom: {e}", pytrace=False)
        raise failed
    record = _record(item, m, budget, view)
    problems = []
    peak_bytes = m.peak_bytes(view)
    if budget is not None and peak_bytes is not None and peak_bytes > budget:
        problems.append(
            f"{view} true peak {peak_bytes} bytes ({format_bytes(peak_bytes)}) is over the "
            f"budget of {budget} bytes ({format_bytes(budget)}) by {peak_bytes - budget} bytes"
        )
        record["result"] = "over budget"
    leaked, leak_view = _leaked(m)
    if leaked is not None:
        item.user_properties.append(("headroom_leaked_bytes", leaked))
        record["leaked"] = leaked
    if leak and leaked is not None and leaked > tolerance:
        problems.append(
            f"leaked {leaked} bytes ({format_bytes(leaked)}) of {leak_view}: "
            f"{_before_after(m, leak_view)} (tolerance {tolerance} bytes)"
        )
        record["result"] = "leak" if "result" not in record else record["result"] + ", leak"
    cfg._headroom.results.append((item.nodeid, record))
    if failed is not None:
        raise failed
    if problems:
        pytest.fail("headroom: " + "; ".join(problems) + f" (folder {m.dir})", pytrace=False)
    return result


def _folder(item):
    """A folder for the test's watch: under pytest's own temporary folder (it keeps the last
    three runs' folders), else a new temporary one."""
    factory = getattr(item.config, "_tmp_path_factory", None)
    if factory is not None:
        name = "headroom-" + "".join(c if c.isalnum() else "-" for c in item.name)[:40]
        return os.fspath(factory.mktemp(name))
    return tempfile.mkdtemp(prefix="headroom-pytest-")


def _before_after(m, view):
    if view == "job_used_bytes":
        return f"{m.idle_job_used_bytes} bytes before the test, {m.final_job_used_bytes} after"
    return f"{m.idle_device_used_bytes} bytes before the test, {m.final_device_used_bytes} after"


def _leaked(m):
    """After − before, of the test's own memory where it was read, else of the device."""
    if m.final_job_used_bytes is not None and m.idle_job_used_bytes is not None:
        return m.final_job_used_bytes - m.idle_job_used_bytes, "job_used_bytes"
    if m.final_device_used_bytes is not None and m.idle_device_used_bytes is not None:
        return m.final_device_used_bytes - m.idle_device_used_bytes, "device_used_bytes"
    return None, None


def _record(item, m, budget, view):
    """The test's JUnit properties (raw bytes) and its row of the table."""
    props = {
        "headroom_device_used_peak_bytes": m.device_used_bytes,
        "headroom_job_used_peak_bytes": m.job_used_bytes,
        "headroom_idle_device_used_bytes": m.idle_device_used_bytes,
        "headroom_final_device_used_bytes": m.final_device_used_bytes,
        "headroom_idle_job_used_bytes": m.idle_job_used_bytes,
        "headroom_final_job_used_bytes": m.final_job_used_bytes,
        "headroom_device": m.summary.device.name,
        "headroom_dir": m.dir,
    }
    if budget is not None:
        props["headroom_budget_bytes"] = budget
        props["headroom_budget_view"] = view
    for k, v in props.items():
        if v is not None:
            item.user_properties.append((k, v))
    return {
        "device": m.device_used_bytes,
        "job": m.job_used_bytes,
        "idle": m.idle_device_used_bytes,
        "after": m.final_device_used_bytes,
        "budget": budget,
        "view": view,
    }


def pytest_terminal_summary(terminalreporter):
    s = getattr(terminalreporter.config, "_headroom", None)
    if not s or not s.results:
        return
    tr = terminalreporter
    tr.section("headroom: true GPU memory peaks")
    name_w = max(len(n) for n, _ in s.results)
    head = ("test", "device peak", "job peak", "idle", "after", "budget", "result")
    tr.write_line(f"{head[0]:<{name_w}}  " + "  ".join(f"{h:>12}" for h in head[1:6]) +
                  f"  {head[6]}")
    for nodeid, r in s.results:
        cells = [format_bytes(r["device"]), format_bytes(r["job"]), format_bytes(r["idle"]),
                 format_bytes(r["after"]), format_bytes(r["budget"])]
        tr.write_line(f"{nodeid:<{name_w}}  " + "  ".join(f"{c:>12}" for c in cells) +
                      f"  {r.get('result', 'ok')}")
