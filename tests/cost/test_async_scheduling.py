"""vLLM's async scheduling in the cost model: a step costs max(host, GPU) instead of
host + GPU, the fast decode path still equals stepping bit for bit, and with no host
overhead nothing changes at all."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost import CostConfig, CostModel, StepWork
from sim.profiles import load_accelerator, load_model
from sim.sched import VllmV1Config

H100 = load_accelerator("h100-sxm-80gb")
L70 = load_model("llama-3-70b")
MODES = [
    {},
    {"step_pricing": "per_group"},
    {"calibration": "h100-sxm-80gb-vidur"},  # no fitted overhead: the scenario's applies
]
WORKS = [
    StepWork(n_decode=1, decode_history_tokens=100),
    StepWork(n_decode=64, decode_history_tokens=64 * 3000),
    StepWork(n_decode=8, decode_history_tokens=8 * 500, prefill_chunks=((512, 0),)),
    StepWork(prefill_chunks=((2048, 4096),), copy_bytes=1e8, alloc_calls=3),
]


def cost(overhead_s: float, async_on: bool, tp: int = 1, **cfg) -> CostModel:
    m = CostModel(L70, H100, tp, 1, CostConfig(step_overhead_s=overhead_s, alloc_latency_s=1e-4, **cfg))
    m.async_scheduling = async_on
    return m


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize("work", WORKS, ids=range(len(WORKS)))
def test_a_step_costs_max_of_host_and_gpu_with_async_and_their_sum_without(mode, work):
    for host in (0.5e-3, 0.2):  # below and above the GPU's part
        sync = cost(host, False, **mode).iteration_time(work)
        overlapped = cost(host, True, **mode).iteration_time(work)
        gpu = sync.total_s - host
        assert gpu > 0
        assert overlapped.total_s == pytest.approx(max(host, gpu), rel=1e-12)
        assert overlapped.overhead_s == sync.overhead_s == host  # the breakdown keeps the host time


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize("work", WORKS, ids=range(len(WORKS)))
def test_without_host_overhead_async_changes_no_bit(mode, work):
    assert cost(0.0, True, **mode).iteration_time(work) == cost(0.0, False, **mode).iteration_time(work)
    a = cost(0.0, True, **mode).decode_run_times(32, 32 * 1000, 7)
    b = cost(0.0, False, **mode).decode_run_times(32, 32 * 1000, 7)
    assert np.array_equal(a, b)


@settings(max_examples=30, deadline=None)
@given(
    mode=st.sampled_from(MODES),
    n=st.integers(1, 300),
    hist=st.integers(0, 3_000_000),
    steps=st.integers(1, 30),
    tp=st.sampled_from([1, 2, 8]),
    host=st.sampled_from([1e-3, 2e-2, 0.3]),
)
def test_async_decode_runs_equal_step_by_step_exactly(mode, n, hist, steps, tp, host):
    m = cost(host, True, tp, **mode)
    fast = m.decode_run_times(n, hist, steps)
    slow = np.array([m.iteration_time(StepWork(n, hist + i * n)).total_s for i in range(steps)])
    assert np.array_equal(fast, slow)


def test_the_option_defaults_to_vllms_async_scheduling():
    assert VllmV1Config().async_scheduling == "auto"
    assert VllmV1Config().async_scheduling_on is True
    assert VllmV1Config(async_scheduling=False).async_scheduling_on is False
    assert VllmV1Config(async_scheduling=True).async_scheduling_on is True
    with pytest.raises(ValueError, match="async_scheduling"):
        VllmV1Config(async_scheduling="sometimes")


def test_a_cost_model_alone_is_synchronous():
    """Pricing without a scheduler (capacity estimates, tests) keeps host + GPU."""
    assert CostModel(L70, H100).async_scheduling is False
