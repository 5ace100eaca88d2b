"""The scheduler contract is complete: a scheduler written only to ``sim.sched.Scheduler``
(no fast-path abilities, no knowledge of the vLLM scheduler) runs a whole scenario, also
under memory pressure (held KV must be dropped for the next request to fit) on an
allocator that copies and calls cudaMalloc, whose work the steps price: both are the base
class's duties (``Scheduler.complete_plan``), not the scheduler's."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict

from sim.run import run_scenario
from sim.sched import (
    CANCELLED,
    REJECTED,
    RUNNING,
    WAITING,
    BatchPlan,
    CommitResult,
    Request,
    Scheduler,
    register_scheduler,
)
from sim.sched.base import _REGISTRY


class FcfsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["fcfs"] = "fcfs"


class Fcfs(Scheduler):
    """One request at a time, first come first served: its whole prompt in one step, then
    one token per step until it finishes."""

    name = "fcfs"
    Config = FcfsConfig

    def add(self, req: Request) -> bool:
        if not self.kv.can_ever_fit(req.prompt_tokens + req.output_limit - 1):
            req.end(REJECTED, "rejected_never_fits")
            return False
        req.status = WAITING
        self.waiting.append(req)
        return True

    def cancel(self, req: Request) -> bool:
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        else:
            return False
        req.end(CANCELLED, "cancelled")
        return True

    def schedule(self) -> BatchPlan:
        plan = BatchPlan()
        if not self.running and self.waiting:
            head = self.waiting[0]
            if not self.kv.admit(head):
                return plan  # relieving the pressure is the base class's duty
            self.waiting.popleft()
            head.status = RUNNING
            self.running.append(head)
            plan.admitted.append(head)
        if self.running:
            req = self.running[0]
            n = req.num_tokens - req.num_computed
            if not self.kv.grow(req, n):  # held KV of others fills the pool: step back
                self.running.remove(req)
                self.kv.preempt(req)
                req.status = WAITING
                req.preemptions += 1
                self.waiting.appendleft(req)
                plan.preempted.append(req)
                return plan  # nothing runs now: the base class relieves the pressure
            if req.is_decode:
                plan.n_decode, plan.decode_history_tokens = 1, req.num_computed
                plan.decodes.append(req)
            else:
                plan.prefill_chunks.append((n, req.num_computed))
            plan.scheduled.append((req, n))
        return plan  # the allocator's activity is put on it by the base class

    def commit(self, plan, steps=1) -> CommitResult:
        assert steps == 1  # no runs: supports_runs is False
        out = CommitResult()
        for req, n in plan.scheduled:
            if req.status != RUNNING:
                continue
            req.num_computed += n
            req.num_output += 1
            out.emitted.append(req)
            if req.num_output >= req.output_limit:
                req.finish()
                out.finished.append(req)
                self.running.remove(req)
        return out

    def prefill_chunks(self, cached_tokens: int, new_tokens: int) -> list[int]:
        return [new_tokens] if new_tokens else []


@pytest.fixture
def fcfs():
    register_scheduler(Fcfs)
    yield
    del _REGISTRY["fcfs"]


SCENARIO = {
    "schema_version": 1,
    "model": "llama-3.1-8b",
    "hardware": {"accelerator": "h100-sxm-80gb"},
    "scheduler": {"kind": "fcfs"},
    "engine": {"check_invariants": True},
    "workload": {
        "kind": "requests",
        "requests": [{"count": 3, "at_s": 0.0, "prompt_tokens": 64, "output_tokens": 4}],
    },
}


def test_a_minimal_fcfs_scheduler_runs_a_scenario(fcfs):
    res = run_scenario(SCENARIO)
    req = res.requests
    assert req.finish_reason.tolist() == ["stop"] * 3
    assert req.output_tokens.tolist() == [4, 4, 4]
    # one at a time: each request is admitted when the previous one finished
    assert (req.admitted_s.to_numpy()[1:] == req.finish_s.to_numpy()[:-1]).all()
    steps = res.steps[res.steps.n_steps > 0]
    assert (steps.n_steps == 1).all() and len(steps) == 3 * 4  # no fast runs: 4 steps each
    assert steps.batch_tokens.tolist() == [64, 1, 1, 1] * 3


def test_an_agent_scenario_with_pauses_runs_on_it(fcfs):
    agent = {
        **SCENARIO,
        "pause_policy": {"kind": "recompute"},
        "workload": {
            "kind": "agent",
            "num_trajectories": 2,
            "arrival": {"kind": "fixed"},
            "turns": 3,
            "system_prompt_tokens": 32,
            "tool_tokens": 32,
            "task_tokens": 16,
            "output_tokens": 4,
            "observation_tokens": 16,
            "pause_s": 0.5,
        },
    }
    res = run_scenario(agent)
    assert res.summary["trajectories_completed"] == 2
    assert res.summary["pause_decisions"] == {"recompute": 4}


#: llama-3.1-8b's KV per token (32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes)
KV_BYTES_PER_TOKEN = 131_072
ALLOC_LATENCY_S = 1e-3


def _pressure_scenario(policy: str = "hold") -> dict:
    """Two agents on a pool of 300 tokens with a contiguous allocator that doubles its
    buffers (copying, a cudaMalloc per buffer; a growth holds old + new, 3x the prompt at
    most: a request alone always fits): the first agent's turn holds its 160-token buffer
    over the tool pause, so the second's request is admitted (80 tokens) but cannot grow
    (160 + 80 + 160 > 300) until the held KV is dropped."""
    return {
        **SCENARIO,
        "hardware": {"accelerator": "h100-sxm-80gb",
                     "kv_pool_bytes_per_gpu": 300 * KV_BYTES_PER_TOKEN},
        "allocator": {"kind": "contiguous", "growth": "double"},
        "cost": {"alloc_latency_s": ALLOC_LATENCY_S},
        "pause_policy": {"kind": policy},
        "workload": {
            "kind": "agent",
            "num_trajectories": 2,
            "arrival": {"kind": "fixed"},
            "turns": 2,
            "system_prompt_tokens": 32,
            "tool_tokens": 32,
            "task_tokens": 16,
            "output_tokens": 4,
            "observation_tokens": 16,
            "pause_s": 0.5,
        },
    }  # fmt: skip


def test_under_memory_pressure_the_minimal_scheduler_completes_and_its_allocator_is_priced(
    fcfs,
):
    from sim.run import build

    sim = build(_pressure_scenario())
    res = sim.run()
    assert res.summary["trajectories_completed"] == 2
    assert res.requests.finish_reason.tolist() == ["stop"] * 4
    steps = res.steps
    # the pressure was relieved by the base class: held KV dropped in zero-time decisions
    assert steps.held_drops.sum() >= 1
    assert (steps[steps.held_drops > 0].n_steps == 0).all()
    # the allocator's work reached the steps and was priced there
    copied = sim.kv.alloc.metrics().bytes_copied
    assert copied > 0 and steps.copy_bytes.sum() == copied
    priced = steps.n_steps > 0
    # a zero-time decision (a preemption, a drop) prices nothing: its cudaFree calls wait
    # for the next step
    assert (steps[~priced].alloc_calls == 0).all() and (steps[~priced].copy_bytes == 0).all()
    assert steps.alloc_calls.sum() >= 8  # a buffer per request, a new one per growth, frees
    assert np.allclose(steps.alloc_s, steps.alloc_calls * ALLOC_LATENCY_S, rtol=1e-12, atol=0)
    assert ((steps.copy_s > 0) == (steps.copy_bytes > 0)).all() and (steps.copy_s > 0).any()


def test_a_scheduler_that_relieves_and_collects_itself_gives_the_same_run(fcfs):
    """The base class's duties are idempotent: a scheduler may relieve and collect the
    activity of a plan that runs a step itself (as vllm_v1 relieves), and a subclass
    calling ``super().schedule()`` has its plan completed once."""

    class Careful(Fcfs):
        name = "fcfs"

        def schedule(self) -> BatchPlan:
            plan = super().schedule()
            if plan.empty and not self.running and self.waiting:
                self.relieve(plan, self.waiting[0])
            if not plan.empty:
                copied, calls = self.kv.take_step_activity()
                plan.copy_bytes += copied
                plan.alloc_calls += calls
            return plan

    base = run_scenario(_pressure_scenario())
    _REGISTRY["fcfs"] = Careful
    again = run_scenario(_pressure_scenario())
    # relieving in the preemption's decision saves a zero-time row, nothing else
    assert again.steps.held_drops.sum() == base.steps.held_drops.sum() >= 1
    a, b = again.steps[again.steps.n_steps > 0], base.steps[base.steps.n_steps > 0]
    for col in ("end_s", "copy_bytes", "alloc_calls", "duration_s"):
        assert a[col].tolist() == b[col].tolist(), col
    assert again.requests.finish_s.tolist() == base.requests.finish_s.tolist()
