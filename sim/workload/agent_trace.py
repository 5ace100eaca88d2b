"""``agent_trace``: replay of recorded agent trajectories through the engine.

Responsibility: turn a ``turns.jsonl`` file (``sim.workload.turns_file``; default the
shipped sample of eight SWE-agent trajectories, ``fitted/swe_agent_deepseek_sample.jsonl``,
MIT) into plans: trajectory ``i`` replays recorded trajectory ``i`` (``order:
sequential``, wrapping around), a shuffled one or one drawn at random. Each call's prompt
and completion tokens are the recorded ones and the tool time after it is the recorded
``tool_s`` (times ``tool_time_scale``). The first prompt is ``system_prompt_tokens``
shared tokens and the task; a later prompt extends the previous one by what it adds
beyond the previous prompt and reply; a prompt that is shorter than that (the harness
rewrote its history) is replayed as a rebuilt prompt of the recorded length.

Invariant: replayed prompts equal the recorded ones (as long as the first prompt is
longer than ``system_prompt_tokens``); the file is read once per path; ``order`` draws
come from the ``trace`` stream.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

from sim.workload.agent import Harness, TurnSpec, trajectory_driver
from sim.workload.context import WorkloadContext
from sim.workload.hints import refuse_tool_times
from sim.workload.turns_file import Call, growth, read_turns

#: the shared prefix of the shipped sample (mini-swe-agent's system prompt as DeepSeek's
#: cache reports it on first calls)
SAMPLE_SYSTEM_TOKENS = 320


def sample_path() -> Path:
    """The shipped sample trace (package data)."""
    files = resources.files("sim.workload").joinpath("fitted", "swe_agent_deepseek_sample.jsonl")
    return Path(str(files))


@functools.lru_cache(maxsize=8)
def _trajectories(path: str, mtime_ns: int) -> tuple[tuple[Call, ...], ...]:
    return tuple(tuple(calls) for calls in read_turns(path).values())


def recorded(cfg, ctx: WorkloadContext | None) -> tuple[tuple[Call, ...], ...]:
    """The recorded trajectories of a config's trace."""
    if cfg.path is None:
        p = sample_path()
    else:
        p = ctx.resolve(cfg.path) if ctx is not None else Path(cfg.path)
    from sim.errors import ConfigError

    try:
        mtime = p.stat().st_mtime_ns
    except OSError:
        raise ConfigError("no such file (a turns.jsonl trace)", location=str(p)) from None
    return _trajectories(str(p), mtime)


def system_tokens(cfg) -> int:
    if cfg.system_prompt_tokens is not None:
        return cfg.system_prompt_tokens
    return SAMPLE_SYSTEM_TOKENS if cfg.path is None else 0


def replay_steps(calls: tuple[Call, ...], shared: int, scale: float) -> tuple:
    """The steps that replay ``calls``."""
    steps = [TurnSpec(0.0, max(1, calls[0].prompt_tokens - shared), calls[0].completion_tokens)]
    for t in range(1, len(calls)):
        prev, call = calls[t - 1], calls[t]
        g = growth(calls, t - 1)
        pause = max(0.0, prev.tool_s or 0.0) * scale
        if g is not None and g >= 1:
            spec = TurnSpec(pause, g, call.completion_tokens, prev.tool, prev.category)
        else:  # the harness rewrote the history: a rebuilt prompt of the recorded length
            rebuilt = max(1, call.prompt_tokens - shared)
            spec = TurnSpec(
                pause, rebuilt, call.completion_tokens, prev.tool, prev.category, rebuild=True
            )
        steps.append(spec)
    return tuple(steps)


class _Order:
    """Which recorded trajectory each started trajectory replays."""

    def __init__(self, cfg, ctx: WorkloadContext, count: int) -> None:
        self.count, self.next = count, 0
        rng = ctx.streams("trace")
        self.order = cfg.order
        self.perm = rng.permutation(count).tolist() if cfg.order == "shuffle" else None
        self.rng = rng

    def pick(self) -> int:
        i, self.next = self.next, self.next + 1
        if self.order == "sample":
            return int(self.rng.integers(self.count))
        if self.perm is not None:
            return self.perm[i % self.count]
        return i % self.count


def agent_trace_driver(cfg, ctx: WorkloadContext):
    trajs = recorded(cfg, ctx)  # read before the simulation runs
    order = _Order(cfg, ctx, len(trajs))
    shared = system_tokens(cfg)

    def steps(cfg, ctx) -> tuple:
        return replay_steps(trajs[order.pick()], shared, cfg.tool_time_scale)

    def harness(cfg, ctx) -> Harness:
        return Harness(cfg.context_limit, (("agent_trace:system", shared),))

    return trajectory_driver("agent_trace", steps, harness)(cfg, ctx)


refuse_tool_times("agent_trace", "replays recorded tool times (no pause distribution)")
