"""``coding_agent``: the plan sampler of a coding agent fitted on real trajectories.

A trajectory is ``turns`` LLM calls. Its first prompt is ``first_prompt_tokens`` (the
fleet-shared ``system_prompt_tokens`` plus the task). Every call but the last issues one
tool action whose category follows a first-order chain (``start``, ``next``); the call's
reply has the category's ``completion_tokens``; the tool runs for the category's
``tool_s`` (or, with the category's ``timeout_share``, is killed at ``timeout_s`` plus a
fitted overhead; a body draw past the timeout is killed too) and the next prompt grows by
the category's ``growth_tokens``, drawn jointly with the tool time through a Gaussian
copula of the fitted rank correlation. The last call (the submission) has
``final_completion_tokens`` and no tool after it. The tool category is the request's
``tool_name`` (per-tool pause statistics).

Invariant: a plan is a pure function of the config, the fit and the named streams
``turns``, ``tokens`` (prompt and reply sizes), ``tools`` (categories and names) and
``pauses`` (tool times and the growth drawn with them).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim.workload.agent import Harness, TurnSpec, trajectory_driver
from sim.workload.context import WorkloadContext
from sim.workload.empirical import chooser, copula_uniforms, markov_walk
from sim.workload.hints import register_tool_times
from sim.workload.params import CodingAgentParams, load_params


def fitted(cfg, ctx: WorkloadContext | None = None) -> CodingAgentParams:
    """The fit a ``coding_agent`` config uses (its ``params`` file, or the shipped one)."""
    if cfg.params is None:
        return load_params("coding_agent")
    path = ctx.resolve(cfg.params.path) if ctx is not None else cfg.params.path
    return load_params("coding_agent", path)


def system_tokens(cfg, fit: CodingAgentParams) -> int:
    return fit.system_prompt_tokens if cfg.system_prompt_tokens is None else cfg.system_prompt_tokens


def coding_agent_steps(cfg, ctx: WorkloadContext) -> tuple:
    """Draw one trajectory's steps."""
    fit = fitted(cfg, ctx)
    tok, pau, tools = ctx.streams("tokens"), ctx.streams("pauses"), ctx.streams("tools")
    n = int((cfg.turns or fit.turns).sample_tokens(ctx.streams("turns"), 1)[0])
    first = int((cfg.first_prompt_tokens or fit.first_prompt_tokens).sample_tokens(tok, 1)[0])
    cats = markov_walk(tools, fit.start_shares(), {k: c.next for k, c in fit.categories.items()}, n - 1)
    names = _tool_names(fit, cats, tools)
    completions = np.empty(n, dtype=np.int64)
    tool_s = np.zeros(max(0, n - 1))
    grow = np.ones(max(0, n - 1), dtype=np.int64)
    u_comp = tok.random(n)
    pairs = pau.standard_normal((max(0, n - 1), 2))  # drawn first, so n fixes every stream
    u_timeout, u_over = pau.random(max(0, n - 1)), pau.random(max(0, n - 1))
    timeout = fit.timeout_s if cfg.timeout_s is None else cfg.timeout_s
    cat_arr = np.asarray(cats, dtype=object)
    for name, c in fit.categories.items():
        idx = np.nonzero(cat_arr == name)[0]
        if idx.size == 0:
            continue
        completions[idx] = _tokens(c.completion_tokens, u_comp[idx])
        u = copula_uniforms(pairs[idx], c.rank_correlation)
        t = c.tool_s.ppf(u[:, 0]) * cfg.tool_time_scale
        # the harness kills a call at its timeout: the fitted share, and any longer draw
        killed = (u_timeout[idx] < c.timeout_share) | (t > timeout)
        tool_s[idx] = np.where(killed, timeout + fit.timeout_overhead_s.ppf(u_over[idx]), t)
        grow[idx] = _tokens(c.growth_tokens, u[:, 1])
    completions[n - 1] = _tokens(fit.final_completion_tokens, u_comp[n - 1 :])[0]
    task = max(1, first - system_tokens(cfg, fit))
    steps = [TurnSpec(0.0, task, int(completions[0]))]
    for t in range(1, n):
        c = cats[t - 1]
        steps.append(
            TurnSpec(float(tool_s[t - 1]), int(grow[t - 1]), int(completions[t]), names[t - 1], c)
        )
    return tuple(steps)


def _tokens(dist, u: np.ndarray) -> np.ndarray:
    """Token counts at probabilities ``u`` of a quantile table (or its clipped draw)."""
    # np.clip(x, 1, None), NaN included, without np.clip's call overhead
    return np.maximum(np.rint(dist.ppf(u)), 1.0).astype(np.int64)




def _tool_names(fit: CodingAgentParams, cats: list[str], rng) -> list[str]:
    """A tool name per call, from its category's shares (one uniform per call)."""
    u = rng.random(len(cats)).tolist()
    picks: dict[str, Callable[[float], str]] = {}  # each category's table, made once
    out = []
    for c, x in zip(cats, u, strict=True):
        pick = picks.get(c)
        if pick is None:
            pick = picks[c] = chooser(fit.categories[c].tools)
        out.append(pick(x))
    return out


def coding_agent_harness(cfg, ctx: WorkloadContext) -> Harness:
    fit = fitted(cfg, ctx)
    return Harness(cfg.context_limit, (("coding_agent:system", system_tokens(cfg, fit)),))


coding_agent_driver = trajectory_driver("coding_agent", coding_agent_steps, coding_agent_harness)


def _tool_times(cfg, ctx: WorkloadContext) -> tuple[dict, float]:
    """Each category's fitted tool time (timeouts excluded), scaled as the plan scales it."""
    return {k: c.tool_s for k, c in fitted(cfg, ctx).categories.items()}, cfg.tool_time_scale


register_tool_times("coding_agent", _tool_times)
