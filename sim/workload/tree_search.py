"""``tree_search``: the plan sampler of a tree search over agent continuations (manual).

No public trace records one, so every parameter is set by hand (docs/workloads.md). The
main line runs ``pre_turns`` turns (the first carries the task), then searches: it forks
``fan_out`` branches; each branch runs ``level_turns`` turns and is judged. A losing branch
is rejected by the verifier with ``prune_probability`` (its KV freed at once, its subtree
never grown); one that survives forks again until ``depth`` levels are reached. One branch
per fork is the winner (never rejected); after each fork joins, its parent continues from
the winner, so the main line continues from the best leaf and runs ``post_turns`` more
turns. Branches share their parent's KV by copy-on-write (``sim.workload.agent``); with
``mode: prune`` a fork is a race (the first branch to finish wins, the rest are cancelled).

Invariant: a plan is a pure function of the config and the streams ``turns`` (turn
counts), ``tokens`` (sizes), ``pauses`` (tool times) and ``forks`` (winners, verdicts).
"""

from __future__ import annotations

from sim.workload.agent import ForkSpec, Harness, TurnSpec, trajectory_driver
from sim.workload.context import WorkloadContext
from sim.workload.hints import ANY_TOOL, ToolTimes, register_tool_times


def _turns(cfg, ctx: WorkloadContext, n: int) -> list[TurnSpec]:
    tok, pau = ctx.streams("tokens"), ctx.streams("pauses")
    outs = cfg.output_tokens.sample_tokens(tok, n).tolist()
    obs = cfg.observation_tokens.sample_tokens(tok, n).tolist()
    pauses = cfg.pause_s.sample(pau, n).clip(min=0.0).tolist()
    return [TurnSpec(p, i, o) for p, i, o in zip(pauses, obs, outs, strict=True)]


def _fork(cfg, ctx: WorkloadContext, level: int) -> ForkSpec:
    """The fork at ``level`` (1 = the first), its subtrees drawn depth first."""
    frk = ctx.streams("forks")
    k = cfg.fan_out
    winner = int(frk.integers(k))
    verdicts = (frk.random(k) < cfg.prune_probability).tolist()
    pruned = tuple(bool(v) and j != winner for j, v in enumerate(verdicts))
    lengths = cfg.level_turns.sample_tokens(ctx.streams("turns"), k).tolist()
    branches = []
    for j in range(k):
        steps: list = _turns(cfg, ctx, int(lengths[j]))
        if level < cfg.depth and not pruned[j]:
            steps.append(_fork(cfg, ctx, level + 1))
        branches.append(tuple(steps))
    return ForkSpec(tuple(branches), winner, cfg.mode, pruned=pruned)


def tree_search_steps(cfg, ctx: WorkloadContext) -> tuple:
    """Draw one search's steps."""
    task = int(cfg.task_tokens.sample_tokens(ctx.streams("tokens"), 1)[0])
    pre = _turns(cfg, ctx, cfg.pre_turns)
    pre[0] = TurnSpec(0.0, task, pre[0].output_tokens)
    post = _turns(cfg, ctx, cfg.post_turns)
    return (*pre, _fork(cfg, ctx, 1), *post)


def tree_search_harness(cfg, ctx: WorkloadContext) -> Harness:
    stable = (
        ("tree_search:system", cfg.system_prompt_tokens),
        ("tree_search:tools", cfg.tool_tokens),
    )
    return Harness(cfg.context_limit, stable)


tree_search_driver = trajectory_driver("tree_search", tree_search_steps, tree_search_harness)


register_tool_times("tree_search", lambda cfg, ctx: ToolTimes({ANY_TOOL: cfg.pause_s}))
