"""``multi_agent_team``: the plan sampler of a MetaGPT-style team (fitted on Parrot's logs).

An architect call (``task_tokens`` in, ``architect_tokens`` out) designs the files; then
``rounds`` rounds alternate roles, programmer first, then reviewer and reviser in turn.
A round is a fork of ``branches`` parallel calls (one per file) over one shared prompt:
the role's prompt (``system_tokens``, the same content for every round and team of that
role) and the round's context (``context_tokens``: the code base and reviews, new content
each round, rebuilt rather than appended), then each branch's own part (``branch_tokens``)
and its reply (``completion_tokens``). Every round joins before the next. The branches
start on new sequences (the rebuilt prompt is not an extension of anyone's KV): what they
share, they share through the prefix cache, as Parrot's shared-prompt serving does.

Invariant: a plan is a pure function of the config, the fit and the streams ``tokens``
(sizes) and ``pauses`` (round pauses).
"""

from __future__ import annotations

from sim.workload.agent import ForkSpec, Harness, TurnSpec, trajectory_driver
from sim.workload.context import WorkloadContext
from sim.workload.hints import ANY_TOOL, ToolTimes, register_tool_times
from sim.workload.params import MultiAgentTeamParams, load_params


def round_role(r: int) -> str:
    """MetaGPT's alternation after the architect (round 0): write, then review and revise."""
    return "programmer" if r == 1 else "reviewer" if r % 2 == 0 else "reviser"


def fitted(cfg, ctx: WorkloadContext | None = None) -> MultiAgentTeamParams:
    """The fit a ``multi_agent_team`` config uses (its ``params`` file, or the shipped one)."""
    if cfg.params is None:
        return load_params("multi_agent_team")
    path = ctx.resolve(cfg.params.path) if ctx is not None else cfg.params.path
    return load_params("multi_agent_team", path)


def multi_agent_steps(cfg, ctx: WorkloadContext) -> tuple:
    """Draw one team's steps: the architect, then one fork per round."""
    fit = fitted(cfg, ctx)
    tok, pau = ctx.streams("tokens"), ctx.streams("pauses")
    k = fit.branches if cfg.branches is None else cfg.branches
    rounds = fit.rounds if cfg.rounds is None else cfg.rounds
    steps: list = [TurnSpec(0.0, fit.task_tokens, fit.architect_tokens, "architect", "architect")]
    for r in range(1, rounds + 1):
        name = round_role(r)
        role = fit.roles.get(name) or next(iter(fit.roles.values()))
        context = int(role.context_tokens.sample_tokens(tok, 1)[0])
        own = role.branch_tokens.sample_tokens(tok, k).tolist()
        out = role.completion_tokens.sample_tokens(tok, k).tolist()
        pause = float(cfg.round_pause_s.sample(pau, 1)[0])
        branches = tuple(
            (TurnSpec(max(0.0, pause), own[j], out[j], name, name),) for j in range(k)
        )
        prefix = ((f"multi_agent_team:role:{name}", role.system_tokens), (None, context))
        steps.append(ForkSpec(branches, 0, "join", prefix=prefix, rebuild=True))
    return tuple(steps)


def multi_agent_harness(cfg, ctx: WorkloadContext) -> Harness:
    return Harness(cfg.context_limit, ())


multi_agent_driver = trajectory_driver("multi_agent_team", multi_agent_steps, multi_agent_harness)
# the only pause is before each round's calls; it follows a fork, so it carries no hint


register_tool_times("multi_agent_team", lambda cfg, ctx: ToolTimes({ANY_TOOL: cfg.round_pause_s}))
