"""``mooncake``: a Mooncake block-hash trace replayed through the engine.

Responsibility: read a Mooncake trace (``sim.prefix.trace_replay.load_mooncake``: one JSON
object per line, ``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids``)
and submit each request as an independent one-turn trajectory (``chat.one_turn``) whose
prompt is its hash ids as content spans of 512 tokens each, the last one partial
(``input_length - 512 x (len(hash_ids) - 1)`` tokens). Equal ids are equal content, and the
ids are chained in the trace (an id fixes its whole prefix), so the engine's prefix cache
sees exactly the reuse the trace records. Arrivals default to the trace's timestamps
(seconds from its first replayed request, times ``time_scale`` or rescaled to
``rate_per_s``); any other arrival process may replace them.

Invariant: requests are replayed in file order from ``start_row``; an ``output_length`` of
0 is generated as 1 token (the engine samples at least one); the trace is read once,
before the simulation runs.
"""

from __future__ import annotations

import numpy as np

from sim.prefix.trace_replay import MOONCAKE_BLOCK_TOKENS, TraceRequest
from sim.workload.arrivals import arrival_strategy, arrive_at, trace_times
from sim.workload.chat import one_turn
from sim.workload.context import WorkloadContext
from sim.workload.mooncake_trace import replayed as replayed  # the names they had here
from sim.workload.mooncake_trace import timestamp_values
from sim.workload.mooncake_trace import trace_path as trace_path


def prompt_spans(ctx: WorkloadContext, req: TraceRequest) -> list[tuple]:
    """The prompt as spans: one per hash id, 512 tokens each but the last."""
    b = MOONCAKE_BLOCK_TOKENS
    ids = req.hash_ids
    last = req.input_length - b * (len(ids) - 1)
    spans = [(ctx.shared_id(h), b) for h in ids[:-1]]
    spans.append((ctx.shared_id(ids[-1]), last))
    return spans


def timestamps_s(rows: list[TraceRequest], where: str, first_row: int = 0) -> np.ndarray:
    """The rows' arrival times in seconds from the first (checked to be in time order;
    ``sim.workload.mooncake_trace.timestamp_values`` as an array)."""
    return np.array(timestamp_values(rows, where, first_row), dtype=np.float64)


def mooncake_count(cfg) -> int:
    """The trajectory count known from the config (0 = the whole trace: the driver sets it)."""
    return cfg.num_requests or 0


def mooncake_driver(cfg, ctx: WorkloadContext):
    """The replay's arrival generator (the trace is read and the times computed now)."""
    rows = replayed(cfg, ctx)
    ctx.set_total(len(rows))

    def start(i: int, on_end) -> None:
        ctx.trajectory_started()
        r = rows[i]
        out = max(1, r.output_length)
        one_turn(ctx, "mooncake", r.input_length, out, prompt_spans(ctx, r), i, on_end)

    arrival = cfg.arrival
    if arrival.kind == "trace" and arrival.path is None:
        where = str(trace_path(cfg, ctx))
        t = timestamps_s(rows, where, cfg.start_row)
        times = trace_times(t, len(rows), arrival.time_scale, arrival.rate_per_s, where)
        return arrive_at(ctx.env, times.tolist(), start)
    return arrival_strategy(arrival.kind).run(arrival, ctx, len(rows), start)
