"""vLLM's async scheduling through the engine: an exact timeline from a hand-made cost, the
exact and fast modes agreeing with it on, and no change where the host overhead is 0."""

from __future__ import annotations

import pytest
from engine_helpers import assert_same_frame, assert_same_summary, run

#: every step is 60 GB of weights at 3.0 TB/s = 20 ms of GPU (no FLOPs, no KV read), plus
#: 5 ms of host work per step; one request: a 16-token prefill step and 9 decode steps
ONE_REQUEST = {
    "workload.requests": [{"count": 1, "at_s": 0.0, "prompt_tokens": 16, "output_tokens": 10}],
    "cost.weights_bytes": 60e9,
    "cost.gemm_flops": False,
    "cost.step_overhead_s": 0.005,
}


@pytest.mark.parametrize(("setting", "step_s"), [(False, 0.025), (True, 0.020), ("auto", 0.020)])
def test_host_work_overlaps_the_gpu_step_with_async_scheduling(setting, step_s):
    r = run("seed_chunked_prefill.yaml", **ONE_REQUEST, **{"scheduler.async_scheduling": setting,
                                                          "engine.exact": True})  # fmt: skip
    assert r.summary["steps"] == 10
    assert list(r.steps.duration_s) == pytest.approx([step_s] * 10, rel=1e-12)
    assert list(r.steps.overhead_s) == pytest.approx([0.005] * 10, rel=1e-12)
    req = r.requests.iloc[0]
    assert req.ttft_s == pytest.approx(step_s, rel=1e-12)
    assert req.e2e_s == pytest.approx(10 * step_s, rel=1e-12)


CASES = {
    "pressure": ("seed_chunked_prefill.yaml", {"hardware.kv_pool_bytes_per_gpu": 2e9,
                                               "cost.step_overhead_s": 0.05}),  # fmt: skip
    # host 3 ms against steps of a few ms: some steps are host-bound, some GPU-bound
    "chat": ("chat_azure.yaml", {"workload.num_requests": 80, "hardware.kv_pool_bytes_per_gpu": 3e9,
                                 "cost.step_overhead_s": 0.003}),  # fmt: skip
}


@pytest.mark.parametrize("case", list(CASES))
def test_exact_and_fast_modes_agree_with_async_scheduling(case):
    name, overrides = CASES[case]
    on = {"scheduler.async_scheduling": True}
    fast = run(name, **overrides, **on, **{"engine.exact": False})
    exact = run(name, **overrides, **on, **{"engine.exact": True})
    assert_same_summary(fast.summary, exact.summary)
    assert_same_frame(fast.requests, exact.requests)
    assert fast.summary["engine_decisions"] < exact.summary["engine_decisions"]
    sync = run(name, **overrides, **{"scheduler.async_scheduling": False})
    assert fast.summary["sim_time_s"] < sync.summary["sim_time_s"]  # the overlap saved time


def test_without_host_overhead_the_setting_changes_nothing():
    name, overrides = CASES["chat"]
    zero = {**overrides, "cost.step_overhead_s": 0.0}
    a = run(name, **zero, **{"scheduler.async_scheduling": True})
    b = run(name, **zero, **{"scheduler.async_scheduling": False})
    assert_same_summary(a.summary, b.summary, rel=0.0)
    assert_same_frame(a.requests, b.requests, rel=0.0)
