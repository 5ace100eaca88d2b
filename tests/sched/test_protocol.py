"""The scheduler contract is complete: a scheduler written only to ``sim.sched.Scheduler``
(no fast-path abilities, no knowledge of the vLLM scheduler) runs a whole scenario."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict

from sim.run import run_scenario
from sim.scenario.schema import scenario_model
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
                return plan  # the engine drops idle held KV for us only in vllm_v1
            self.waiting.popleft()
            head.status = RUNNING
            self.running.append(head)
            plan.admitted.append(head)
        if self.running:
            req = self.running[0]
            n = req.num_tokens - req.num_computed
            if not self.kv.grow(req, n):
                raise AssertionError("a lone request always fits (add checked it)")
            if req.is_decode:
                plan.n_decode, plan.decode_history_tokens = 1, req.num_computed
                plan.decodes.append(req)
            else:
                plan.prefill_chunks.append((n, req.num_computed))
            plan.scheduled.append((req, n))
        plan.copy_bytes, plan.alloc_calls = self.kv.take_step_activity()
        return plan

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
    scenario_model.cache_clear()
    yield
    del _REGISTRY["fcfs"]
    scenario_model.cache_clear()


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
