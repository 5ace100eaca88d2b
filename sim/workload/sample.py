"""``kvsim workload sample``: the calls a workload would submit, without the engine.

Responsibility: run a workload's own driver (the same plan samplers, the same trajectory
processes, the same harness and context limit) against a *dry node* that serves every
request the moment it arrives, and list each trajectory's calls in submission order:
``{prompt_tokens, completion_tokens, tool, tool_category, tool_s, branch_id,
parent_branch_id, user_turn, pause_kind}``. ``prompt_tokens`` is the whole prompt of the call as a
provider counts it (history included); ``tool_s`` the tool (or user) time after the call
(null when a fork, a subagent spawn or the end follows); ``pause_kind`` that pause's kind:
``human`` (a user message follows: category ``human`` or ``user``), ``tool`` or null.

The dry node applies the model's window as the server does (a prompt that leaves no room
for one output token is refused, an output is cut at the window) and otherwise generates
each request's whole target. What differs from a run is only timing: LLM calls take no
time, so a ``prune`` race is won by the branch with the least tool time.

Invariant: the same config, seed and window give the same sample; plans come from the
same named streams as in a run, so a trajectory's plan is the one the engine would run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import simpy

from sim.sched.request import FINISHED, REJECTED, Request
from sim.workload.context import WorkloadContext
from sim.workload.rng import Streams


class DryNode:
    """A node that serves each request at once (the workload API of ``sim.engine.Node``)."""

    def __init__(self, env: simpy.Environment, context_window: int | None) -> None:
        self.env = env
        self.window = context_window
        self.finished = False

    def submit(self, req: Request) -> None:
        if self.window is not None and req.prompt_tokens >= self.window:
            req.end(REJECTED, "rejected_too_long")  # vLLM refuses it (as the scheduler does)
        else:
            req.cap_output(self.window)
            req.num_output = req.output_limit
            req.finish()
            req.finish_s = self.env.now
        if req.on_done is not None:
            req.on_done(req)

    def fork(self, parent, child) -> None:
        return None

    def release(self, seq) -> None:
        return None

    def cancel(self, req, seq) -> None:
        return None

    def call_at_boundary(self, fn) -> None:
        fn()

    def workload_finished(self) -> None:
        self.finished = True


class _NoRecorder:
    def trajectory(self, row, label="") -> None:
        return None


@dataclass
class _Call:
    req: Request
    tool: str | None
    user_turn: int


class SampleContext(WorkloadContext):
    """A workload context that records every call (see ``WorkloadContext.call_submitted``)."""

    def __init__(self, env, node, streams, base_dir: Path, total: int, window: int | None):
        super().__init__(env, node, streams, _NoRecorder(), base_dir, total, window)
        self.calls: list[_Call] = []

    def call_submitted(self, req: Request, tool: str | None, user_turn: int) -> None:
        self.calls.append(_Call(req, tool, user_turn))


def sample_workload(
    kind_name: str, cfg, seed: int, base_dir: Path, context_window: int | None = None
) -> dict:
    """Run ``cfg``'s driver dry and return ``{"kind", "seed", "trajectories"}``."""
    from sim.workload import workload_kind

    kind = workload_kind(kind_name)
    env = simpy.Environment()
    node = DryNode(env, context_window)
    ctx = SampleContext(env, node, Streams(seed), base_dir, kind.count(cfg), context_window)
    gen = kind.driver(cfg, ctx)
    env.process(gen)
    env.run()
    return {"kind": kind_name, "seed": seed, "trajectories": _listing(ctx.calls)}


def _listing(calls: list[_Call]) -> list[dict]:
    by_traj: dict[int, list[dict]] = {}
    for c in sorted(calls, key=lambda c: c.req.req_id):
        r = c.req
        done = r.status == FINISHED
        by_traj.setdefault(r.traj_id, []).append(
            {
                "prompt_tokens": r.prompt_tokens,
                "completion_tokens": r.num_output if done else 0,
                "tool": c.tool,
                "tool_category": r.tool_name if c.tool is not None else None,
                "tool_s": r.next_pause_s if c.tool is not None else None,
                "branch_id": r.branch_id,
                "parent_branch_id": r.parent_branch_id,
                "user_turn": c.user_turn,
                "pause_kind": _pause_kind(c.tool, r.tool_name),
            }
        )
    return [{"id": t, "turns": by_traj[t]} for t in sorted(by_traj)]


def _pause_kind(tool: str | None, category: str) -> str | None:
    """``human`` for a wait on a person (category ``human`` or ``user``), ``tool`` for any
    other wait, None when no pause follows (the end, a fork or a subagent spawn)."""
    if tool is None:
        return None
    return "human" if category in ("human", "user") else "tool"
