"""The pytest plugin without an NVIDIA driver: skipped with the reason by default; with
--headroom-without-gpu=sim each test is watched on the simulated device, which holds what its
marker's `sim_usage` says."""

import time

import pytest


@pytest.mark.gpu_memory(max="1GiB", sim_usage=[("0ms", "0B"), ("20ms", "1536MiB"), ("80ms", "0B")])
def test_over_budget_on_the_simulator():
    time.sleep(0.2)


@pytest.mark.gpu_memory(max="1GiB")
def test_holds_nothing():
    pass
