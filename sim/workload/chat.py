"""Chat and explicit-request workloads: one-turn trajectories.

Responsibility: turn a ``chat`` config (arrival process + lengths from distributions or a
trace: a CSV path, or a shipped Azure trace by name) or a ``requests`` list into submitted
requests. A one-turn request needs no SimPy process of its own: it is submitted when it
arrives and its trajectory row is written from its completion callback (``one_turn``,
which ``sim.workload.mooncake`` reuses with its own spans).

Invariant: lengths are drawn once, up front, from the ``lengths`` stream (or read from the
trace), so they do not depend on the order in which requests finish; each request's
prompt is ``system_prompt_tokens`` shared tokens followed by private ones.
"""

from __future__ import annotations

import numpy as np

from sim.sched.request import FINISHED
from sim.workload.arrivals import arrival_strategy
from sim.workload.chat_trace import chat_arrival, trace_length_values
from sim.workload.chat_trace import lengths_path as lengths_path  # the name it had here
from sim.workload.context import WorkloadContext, trajectory_row


def chat_lengths(cfg, ctx: WorkloadContext, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, output tokens) for ``n`` requests."""
    prompt, output = _lengths(cfg.lengths, ctx, n)
    scale = cfg.lengths.output_scale
    if scale != 1.0:
        output = np.maximum(1, np.rint(output * scale)).astype(np.int64)
    return prompt, output


def _lengths(lengths, ctx: WorkloadContext, n: int) -> tuple[np.ndarray, np.ndarray]:
    if lengths.kind == "parametric":
        rng = ctx.streams("lengths")
        return lengths.prompt_tokens.sample_tokens(rng, n), lengths.output_tokens.sample_tokens(
            rng, n
        )
    prompt, output = trace_lengths(lengths, ctx)
    rows = len(prompt)
    if lengths.order == "sample":
        idx = ctx.streams("lengths").integers(0, rows, n)
    else:
        base = np.arange(rows)
        if lengths.order == "shuffle":
            base = ctx.streams("lengths").permutation(rows)
        idx = base[(lengths.start_row + np.arange(n)) % rows]
    return prompt[idx], output[idx]


def trace_lengths(lengths, ctx: WorkloadContext) -> tuple[np.ndarray, np.ndarray]:
    """Every row's (prompt tokens, output tokens) of a ``trace`` lengths config's CSV file
    as int64 arrays (``sim.workload.chat_trace.trace_length_values``, which ``kvsim
    validate`` calls)."""
    prompt, output = trace_length_values(lengths, ctx)
    return np.array(prompt, dtype=np.int64), np.array(output, dtype=np.int64)


def _one_turn(
    ctx: WorkloadContext, kind: str, prompt: int, output: int, shared: int, i: int, on_end
) -> None:
    """Submit one request of ``shared`` shared and ``prompt - shared`` private tokens."""
    shared = min(shared, prompt)
    spans = [(ctx.shared_id("sys"), shared)] if shared else []
    if prompt > shared:
        spans.append((ctx.new_content("prompt"), prompt - shared))
    one_turn(ctx, kind, prompt, output, spans, i, on_end)


def one_turn(ctx: WorkloadContext, kind: str, prompt: int, output: int, spans, i: int, on_end):
    """Submit one request whose prompt is ``spans`` (``prompt`` tokens) as trajectory ``i``;
    its row is written, and ``on_end()`` called, when it ends."""
    seq = ctx.new_seq()
    start = ctx.now

    def done(req) -> None:
        ok = req.status == FINISHED
        end = req.finish_s if req.finish_s is not None else ctx.now
        ctx.trajectory_ended(
            trajectory_row(i, kind, start, end, "completed" if ok else "failed", 1, [req], 0, 0.0),
            ok,
        )
        on_end()

    req = ctx.request(seq, prompt, output, _content(spans), traj_id=i, on_done=done)
    ctx.node.submit(req)


def _content(spans):
    from sim.prefix.spans import segments

    return segments(spans)


def chat_driver(cfg, ctx: WorkloadContext):
    """The chat workload's arrival generator (lengths and times are drawn or read now)."""
    n = cfg.num_requests
    prompts, outputs = chat_lengths(cfg, ctx, n)
    prompts, outputs = prompts.tolist(), outputs.tolist()
    shared = cfg.system_prompt_tokens

    def start(i: int, on_end) -> None:
        ctx.trajectory_started()
        _one_turn(ctx, "chat", prompts[i], outputs[i], shared, i, on_end)

    arrival = chat_arrival(cfg, ctx)
    return arrival_strategy(arrival.kind).run(arrival, ctx, n, start)


def requests_count(cfg) -> int:
    return sum(g.count for g in cfg.requests)


def requests_driver(cfg, ctx: WorkloadContext):
    """The explicit request list's generator, in arrival-time order."""
    items = []
    for g in cfg.requests:
        for j in range(g.count):
            items.append((g.at_s + j * g.interval_s, g))
    items.sort(key=lambda x: x[0])  # stable: list order breaks ties
    return _requests_gen(ctx, items)


def _requests_gen(ctx: WorkloadContext, items):
    env = ctx.env
    for i, (t, g) in enumerate(items):
        if t > env.now:
            yield env.timeout(t - env.now)
        ctx.trajectory_started()
        _one_turn(
            ctx,
            "request",
            g.prompt_tokens,
            g.output_tokens,
            g.shared_prefix_tokens,
            i,
            lambda: None,
        )
