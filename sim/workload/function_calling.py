"""``function_calling``: the plan sampler of multi-turn function calling (fitted on BFCL).

A task is ``user_turns`` user turns of ``calls_per_user_turn`` LLM calls each (fitted by
the task's number of user turns: tasks with more user turns have shorter ones): every call
of a turn but the last calls a function (its result is the next call's input, after
``tool_s``), the last one answers the user; the next user turn starts after ``think_s``
with the user's message. The first prompt is ``first_prompt_tokens``: the fleet-shared
function docs (``doc_tokens``) and the task. From one call to the next the prompt grows
by the fitted ``call_growth_tokens`` (within a turn) or ``user_growth_tokens`` (at a new
user turn), drawn with the reply's length through a Gaussian copula: a reasoning model's
reply (``completion_tokens``, reasoning included) is mostly dropped from the history, so
the growth is split into the kept tail of the reply and the new input (at least
``observation_min_tokens`` for a function result, 1 for a user message); a trimmed reply
moves the line to a new KV sequence (``sim.workload.agent``).

Invariant: a plan is a pure function of the config, the fit and the named streams
``turns`` (turn and call counts), ``tokens`` (sizes), ``tools`` (function names) and
``pauses`` (tool and think times).
"""

from __future__ import annotations

import numpy as np

from sim.workload.agent import Harness, TurnSpec, trajectory_driver
from sim.workload.context import WorkloadContext
from sim.workload.empirical import chooser, copula_uniforms
from sim.workload.hints import ToolTimes, register_tool_times
from sim.workload.params import FunctionCallingParams, calls_for, load_params


def fitted(cfg, ctx: WorkloadContext | None = None) -> FunctionCallingParams:
    """The fit a ``function_calling`` config uses (its ``params`` file, or the shipped one)."""
    if cfg.params is None:
        return load_params("function_calling")
    path = ctx.resolve(cfg.params.path) if ctx is not None else cfg.params.path
    return load_params("function_calling", path)


def doc_tokens(cfg, fit: FunctionCallingParams) -> int:
    return fit.doc_tokens if cfg.doc_tokens is None else cfg.doc_tokens


def function_calling_steps(cfg, ctx: WorkloadContext) -> tuple:
    """Draw one task's steps."""
    fit = fitted(cfg, ctx)
    rng_n, tok, pau = ctx.streams("turns"), ctx.streams("tokens"), ctx.streams("pauses")
    users = int((cfg.user_turns or fit.user_turns).sample_tokens(rng_n, 1)[0])
    per_turn = (cfg.calls_per_user_turn or calls_for(fit.calls_per_user_turn, users)).sample_tokens(
        rng_n, users
    )
    n = int(per_turn.sum())
    first = int(fit.first_prompt_tokens.sample_tokens(tok, 1)[0])
    u = copula_uniforms(tok.standard_normal((n, 2)), fit.rank_correlation)
    out = np.clip(np.rint(fit.completion_tokens.ppf(u[:, 0])), 1, None).astype(np.int64)
    call_grow = fit.call_growth_tokens.ppf(u[:, 1])
    user_grow = fit.user_growth_tokens.ppf(u[:, 1])
    names = list(map(chooser(fit.tools), ctx.streams("tools").random(n).tolist()))
    tool_s = cfg.tool_s.sample(pau, n).clip(min=0.0)
    think_s = cfg.think_s.sample(pau, users).clip(min=0.0)
    # the call index each user turn starts at
    starts = set(np.concatenate([[0], np.cumsum(per_turn)[:-1]]).tolist())
    steps: list[TurnSpec] = []
    user, task = 0, max(1, first - doc_tokens(cfg, fit))
    pending = (0.0, task, "user", "user")  # (pause, input, tool, category) before call 0
    for i in range(n):
        if i in starts and i > 0:
            user += 1
        new_turn = i + 1 < n and (i + 1) in starts
        grow = int(max(1, np.rint(user_grow[i] if new_turn else call_grow[i])))
        floor = 1 if new_turn else fit.observation_min_tokens
        new_input = max(floor, grow - int(out[i]))
        kept = max(0, grow - new_input)
        pause, inp, tool, cat = pending
        steps.append(TurnSpec(pause, inp, int(out[i]), tool, cat, user, kept_output_tokens=kept))
        if new_turn:
            pending = (float(think_s[user + 1]), new_input, "user", "user")
        else:
            pending = (float(tool_s[i]), new_input, names[i], "function")
    return tuple(steps)


def function_calling_harness(cfg, ctx: WorkloadContext) -> Harness:
    stable = (("function_calling:docs", doc_tokens(cfg, fitted(cfg, ctx))),)
    return Harness(cfg.context_limit, stable)


function_calling_driver = trajectory_driver(
    "function_calling", function_calling_steps, function_calling_harness
)


register_tool_times(
    "function_calling",
    lambda cfg, ctx: ToolTimes({"function": cfg.tool_s, "user": cfg.think_s}),
)  # the pause before a function's result, and the scripted user's before a user turn
