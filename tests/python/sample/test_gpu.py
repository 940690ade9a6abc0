"""A sample suite for the pytest plugin: each test holds a known amount of device memory through
`headroom hold` (on the fake NVIDIA driver in CI), so each true peak is known to the byte: the
bytes held plus the CUDA context of the card (tiny-4g: 256 MiB)."""

import subprocess

import pytest

import headroom


def hold(size, ms):
    subprocess.run(
        [headroom.binary(), "hold", size, "--for", f"{ms}ms", "--backend", "cuda"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


@pytest.fixture
def background():
    """A process of the test's tree that still holds memory when the test body returns."""
    procs = []

    def start(size):
        p = subprocess.Popen(
            [headroom.binary(), "hold", size, "--for", "60s", "--backend", "cuda"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        p.stdout.readline()  # one line once the memory is held
        procs.append(p)

    yield start
    for p in procs:
        p.terminate()
        p.wait()


def test_measured_by_the_option():
    hold("128MiB", 150)


@pytest.mark.gpu_memory(max="1GiB")
def test_within_budget():
    hold("256MiB", 150)


@pytest.mark.gpu_memory(max="512MiB")
def test_over_budget():
    hold("768MiB", 150)


@pytest.mark.gpu_memory(max="2GiB", view="device_used_bytes", leak=True)
def test_leaks(background):
    background("384MiB")


def test_not_gpu():
    assert headroom.parse_bytes("2GiB") == 2 << 30
