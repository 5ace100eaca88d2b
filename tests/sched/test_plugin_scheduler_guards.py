"""A plug-in scheduler that breaks the engine's contract stops the run in one line naming
it, in bounded time and memory: a ``commit`` that advances nothing
(``sim.engine.node.MAX_STALLED_STEPS`` steps without progress), a ``RunLimit`` whose
``max_steps`` is not a whole number >= 1 or not a ``RunLimit`` at all; a ``max_steps``
far beyond what the batch can repeat is capped (``sim.sched.plan.run_steps_bound``), so
the run's plan stays small and its results right."""

from __future__ import annotations

import resource
import tracemalloc
from contextlib import contextmanager
from typing import Literal

import numpy as np
import pytest
from test_protocol import Fcfs, FcfsConfig

import sim.engine.node as engine_node
from sim.engine.node import EngineStuckError
from sim.errors import KvsimError
from sim.run import run_scenario
from sim.sched import CommitResult, RunLimit, register_scheduler
from sim.sched.base import _REGISTRY
from sim.sched.request import WAITING
from sim.sched.vllm_v1 import VllmV1Config, VllmV1Scheduler

SCENARIO = {
    "schema_version": 1,
    "model": "llama-3.1-8b",
    "hardware": {"accelerator": "h100-sxm-80gb"},
    "workload": {
        "kind": "requests",
        "requests": [{"count": 2, "at_s": 0.0, "prompt_tokens": 64, "output_tokens": 40}],
    },
}


@contextmanager
def address_space(extra_bytes: int):
    """At most ``extra_bytes`` more of address space for the body (the soft limit, put
    back after): a regression that plans 10**8 steps fails with a MemoryError instead of
    taking the machine's memory."""
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size + extra_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# ------------------------------------------------------------------ no progress
class StallConfig(FcfsConfig):
    kind: Literal["stall"] = "stall"  # type: ignore[assignment]


class Stall(Fcfs):
    """Schedules as ``fcfs`` does, but its ``commit`` advances nothing."""

    name = "stall"
    Config = StallConfig

    def commit(self, plan, steps=1) -> CommitResult:
        return CommitResult()


@pytest.fixture
def stall():
    register_scheduler(Stall)
    yield
    del _REGISTRY["stall"]


def test_steps_that_compute_a_prompt_without_sampling_are_progress(monkeypatch):
    """A long prompt prefilled in small chunks samples nothing for many steps: each step
    computes tokens, so even a bound of 1 stalled step never trips (the shipped
    scheduler never has one: the suite and ``kvsim regress`` pass with a bound of 1)."""
    monkeypatch.setattr(engine_node, "MAX_STALLED_STEPS", 1)
    sc = {
        **SCENARIO,
        "scheduler": {"kind": "vllm_v1", "long_prefill_token_threshold": 16},
        "workload": {"kind": "requests", "requests": [
            {"count": 2, "at_s": 0.0, "prompt_tokens": 4000, "output_tokens": 3}]},
    }  # fmt: skip
    r = run_scenario(sc)
    assert r.summary["requests_completed"] == 2
    assert r.steps.n_steps.sum() > 200  # hundreds of steps without a token


class ChurnConfig(FcfsConfig):
    kind: Literal["churn"] = "churn"  # type: ignore[assignment]


class Churn(Stall):
    """Preempts its running request and readmits it at every step; its ``commit``
    advances nothing (each step admits and preempts, but no token is ever computed)."""

    name = "churn"
    Config = ChurnConfig

    def schedule(self):
        preempted = []
        for req in list(self.running):
            self.running.remove(req)
            self.kv.preempt(req)
            req.status = WAITING
            req.preemptions += 1
            self.waiting.appendleft(req)
            preempted.append(req)
        plan = super().schedule()
        plan.preempted.extend(preempted)
        return plan


@pytest.fixture
def churn():
    register_scheduler(Churn)
    yield
    del _REGISTRY["churn"]


@pytest.mark.parametrize("kind, cls", [("stall", "Stall"), ("churn", "Churn")])
def test_a_scheduler_whose_commit_advances_nothing_stops_in_one_line(deadline, request, kind, cls):
    """``stall`` used to step until the 30-day guard, ~400 B a decision; ``churn``, which
    preempts and readmits its request at every step, too (admissions and preemptions
    counted as progress). Now both stop after ``MAX_STALLED_STEPS`` steps (10,000: a
    couple of seconds) naming the scheduler: only what moves the run toward its end
    counts."""
    request.getfixturevalue(kind)  # registers the plug-in scheduler for this test
    with deadline(120), pytest.raises(EngineStuckError) as exc:
        run_scenario({**SCENARIO, "scheduler": {"kind": kind}})
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("engine stuck at t=")
    assert (
        f"s: scheduler '{kind}' (test_plugin_scheduler_guards.{cls}) made no progress in "
        "10000 consecutive steps (no token computed or sampled, no finish, rejection, drop "
        "or cancellation; admissions and preemptions alone are not progress): its commit "
        "advances nothing (docs/engine.md, the scheduler contract); free "
    ) in msg
    assert msg.endswith(
        "stuck: Request(#0 seq=0 running computed=0/64 out=0/40), "
        "Request(#1 seq=1 waiting computed=0/64 out=0/40)"
    )


def test_vllm_v1_under_heavy_memory_pressure_never_trips_the_guard(monkeypatch):
    """A pool of 4,400 tokens for 8 prompts of 2,000 (2,400 tokens each at the end): the
    shipped scheduler preempts and readmits again and again, and every step still
    computes a token (a bound of 1)."""
    monkeypatch.setattr(engine_node, "MAX_STALLED_STEPS", 1)
    sc = {
        **SCENARIO,
        "hardware": {"accelerator": "h100-sxm-80gb", "kv_pool_bytes_per_gpu": 4400 * 131072},
        "workload": {"kind": "requests", "requests": [
            {"count": 8, "at_s": 0.0, "prompt_tokens": 2000, "output_tokens": 400}]},
    }  # fmt: skip
    r = run_scenario(sc)
    assert r.summary["requests_completed"] == 8
    assert r.summary["preemptions"] == r.requests.preemptions.sum() == 7


# ------------------------------------------------------------------ RunLimit
class RunsConfig(VllmV1Config):
    kind: Literal["runs"] = "runs"  # type: ignore[assignment]


class Runs(VllmV1Scheduler):
    """``vllm_v1`` whose runs say ``MAX_STEPS`` (a class attribute the tests set)."""

    name = "runs"
    Config = RunsConfig
    MAX_STEPS: object = 1

    def run_limit(self, plan):
        lim = super().run_limit(plan)
        if lim is None:
            return None
        if self.MAX_STEPS == "not a RunLimit":
            return 12
        return RunLimit(self.MAX_STEPS, lim.chunks, lim.late)  # type: ignore[arg-type]


@pytest.fixture
def runs():
    register_scheduler(Runs)
    yield Runs
    del _REGISTRY["runs"]
    Runs.MAX_STEPS = 1


@pytest.mark.parametrize(
    ("max_steps", "shown"),
    [(3.5, "float 3.5"), (0, "int 0"), (-4, "int -4"), (True, "bool True"), ("7", "str '7'")],
)
def test_a_bad_max_steps_is_one_line_naming_the_scheduler(runs, max_steps, shown):
    """3.5 used to be a TypeError deep in the memory plan (``[x] * 3.5``)."""
    runs.MAX_STEPS = max_steps
    with pytest.raises(KvsimError) as exc:
        run_scenario({**SCENARIO, "scheduler": {"kind": "runs"}})
    assert str(exc.value) == (
        f"scheduler 'runs' (test_plugin_scheduler_guards.Runs): RunLimit.max_steps is "
        f"{shown}; it must be a whole number >= 1 (an int, not a bool; docs/engine.md, "
        "the scheduler contract)"
    )


def test_a_plan_run_that_is_not_a_run_limit_is_one_line(runs):
    runs.MAX_STEPS = "not a RunLimit"
    with pytest.raises(KvsimError) as exc:
        run_scenario({**SCENARIO, "scheduler": {"kind": "runs"}})
    assert str(exc.value) == (
        "scheduler 'runs' (test_plugin_scheduler_guards.Runs): plan.run is int 12; it must "
        "be a sim.sched.RunLimit or None (docs/engine.md, the scheduler contract)"
    )


@pytest.mark.parametrize("max_steps", [10**8, np.int64(10**8), 10**30])
def test_a_huge_max_steps_is_capped_to_what_the_batch_can_repeat(deadline, runs, max_steps):
    """10**8 used to build per-step lists of 10**8 entries (memory ran out); a run longer
    than the first finish also sampled past the requests' output (10**5: 200,002 output
    tokens for 80). Capped at the first finish, the run is ``vllm_v1``'s, in little
    memory."""
    runs.MAX_STEPS = max_steps
    tracemalloc.start()
    try:
        with deadline(120), address_space(2 << 30):
            r = run_scenario({**SCENARIO, "scheduler": {"kind": "runs"}})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    same = run_scenario(SCENARIO)
    assert peak < 200e6
    assert r.requests.output_tokens.tolist() == [40, 40]
    assert r.steps.end_s.tolist() == same.steps.end_s.tolist()
    assert r.summary["sim_time_s"] == same.summary["sim_time_s"]
