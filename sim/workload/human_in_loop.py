"""``human_in_loop``: the plan sampler of an agent serving a human (fitted on tau-bench).

A conversation is ``user_turns`` user messages (``user_message_tokens``), each answered by
LLM calls (``first_turn_calls`` for the first message, which is a greeting answered at
once, ``calls_per_user_turn`` for the others, by the conversation's length: longer
conversations have shorter turns): every call but the last calls a tool
(drawn by the tools' shares; the call's size is the tool's ``call_tokens`` and its result,
the next call's input after ``tool_s``, the tool's ``result_tokens``), the last replies
to the user (``reply_tokens``). The harness stops a conversation at ``max_calls`` calls
(tau-bench's step limit, seen in the data as a pile-up at 30). The next user message
comes after the user's think time ``think_s``: the data has no timings, so it is an
assumption (lognormal, median one minute; docs/workloads.md). Every prompt starts with the
fleet-shared policy prompt (``policy_prompt_tokens``) and tool schemas (``tool_tokens``).
A pause before a user message has category ``user``, one before a tool result ``tool``
(the request's ``tool_name``), so per-tool pause statistics keep minutes and seconds apart.

Invariant: a plan is a pure function of the config, the fit and the named streams
``turns`` (counts), ``tokens`` (sizes), ``tools`` (tool names) and ``pauses``.
"""

from __future__ import annotations

from sim.workload.agent import Harness, TurnSpec, trajectory_driver
from sim.workload.context import WorkloadContext
from sim.workload.empirical import chooser, copula_uniforms
from sim.workload.hints import ToolTimes, register_tool_times
from sim.workload.params import HumanInLoopParams, calls_for, load_params


def fitted(cfg, ctx: WorkloadContext | None = None) -> HumanInLoopParams:
    """The fit a ``human_in_loop`` config uses (its ``params`` file, or the shipped one)."""
    if cfg.params is None:
        return load_params("human_in_loop")
    path = ctx.resolve(cfg.params.path) if ctx is not None else cfg.params.path
    return load_params("human_in_loop", path)


def human_in_loop_steps(cfg, ctx: WorkloadContext) -> tuple:
    """Draw one conversation's steps."""
    fit = fitted(cfg, ctx)
    rng_n, tok, pau = ctx.streams("turns"), ctx.streams("tokens"), ctx.streams("pauses")
    users = int((cfg.user_turns or fit.user_turns).sample_tokens(rng_n, 1)[0])
    first = fit.first_turn_calls.sample_tokens(rng_n, 1)
    later = (cfg.calls_per_user_turn or calls_for(fit.calls_per_user_turn, users)).sample_tokens(rng_n, users - 1)
    per_turn = [int(first[0]), *later.tolist()]
    n = sum(per_turn)
    user_msgs, replies = _messages(fit, tok, users)
    shares = {name: t.share for name, t in fit.tools.items()}
    names = list(map(chooser(shares), ctx.streams("tools").random(n).tolist()))
    u_call, u_result = tok.random(n), tok.random(n)
    think = cfg.think_s.sample(pau, users).clip(min=0.0).tolist()
    tool_s = cfg.tool_s.sample(pau, n).clip(min=0.0).tolist()
    steps: list[TurnSpec] = []
    i = 0
    for user, k in enumerate(per_turn):
        pending = (0.0 if user == 0 else think[user], user_msgs[user], "user", "user")
        for j in range(k):
            tool = fit.tools[names[i]]
            if j == k - 1:
                out = replies[user]
            else:
                out = _tokens(tool.call_tokens, u_call[i])
            p, inp, name, cat = pending
            steps.append(TurnSpec(p, inp, out, name, cat, user))
            pending = (tool_s[i], _tokens(tool.result_tokens, u_result[i]), names[i], "tool")
            i += 1
    if fit.max_calls is not None:  # the harness stops the conversation at its step limit
        steps = steps[: fit.max_calls]
    return tuple(steps)


def _messages(fit: HumanInLoopParams, tok, users: int) -> tuple[list[int], list[int]]:
    """(each user message's tokens, each turn's reply tokens). A reply and the user message
    answering it are drawn through a Gaussian copula with the fitted rank correlation (a
    long answer draws a long question back: tau-bench's Spearman 0.29; drawn apart, the
    prompt growth at a user turn has a thin tail, p90 ~170 against the data's 179); the
    first message (the greeting) takes the last pair's spare uniform. An older fit
    without the correlation draws both independently, as it always did."""
    rho = fit.reply_user_rank_correlation
    if rho == 0.0:
        return (fit.user_message_tokens.sample_tokens(tok, users).tolist(),
                fit.reply_tokens.sample_tokens(tok, users).tolist())  # fmt: skip
    u = copula_uniforms(tok.standard_normal((users, 2)), rho)
    replies = [_tokens(fit.reply_tokens, x) for x in u[:, 0].tolist()]
    asks = [u[-1, 1], *u[:-1, 1].tolist()]  # message t + 1 answers reply t
    return [_tokens(fit.user_message_tokens, x) for x in asks], replies


def _tokens(dist, u: float) -> int:
    """A token count at probability ``u`` of a quantile table."""
    return max(1, int(round(float(dist.ppf(u)))))


def human_in_loop_harness(cfg, ctx: WorkloadContext) -> Harness:
    fit = fitted(cfg, ctx)
    policy = fit.policy_prompt_tokens if cfg.policy_prompt_tokens is None else cfg.policy_prompt_tokens
    stable = (("human_in_loop:policy", policy), ("human_in_loop:tools", cfg.tool_tokens))
    return Harness(cfg.context_limit, stable)


human_in_loop_driver = trajectory_driver("human_in_loop", human_in_loop_steps, human_in_loop_harness)


register_tool_times(
    "human_in_loop", lambda cfg, ctx: ToolTimes({"tool": cfg.tool_s, "user": cfg.think_s})
)  # a tool result's pause, and the human user's think time before a user message
