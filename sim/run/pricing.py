"""What a run cost: summary.json's ``usd_*`` figures from a price per GPU-hour.

Responsibility: the price (the scenario's ``pricing.usd_per_gpu_hour``, else the
accelerator profile's example ``usd_per_gpu_hour``; documented examples, not quotes) and
the figures it gives: ``usd_total`` (price x GPUs x simulated hours),
``usd_per_million_output_tokens``, ``usd_per_trajectory`` (per completed trajectory) and
``paused_hbm_usd``, the share of that cost that paid for HBM holding paused trajectories'
KV: ``paused_hbm_gb_s`` x the price of one GB of HBM for one second (the GPU-second price
over the GPU's memory in GB), F29's hold cost in dollars. It is the logical figure: each
pause's own tokens, so a block shared by several paused sequences is paid once per pause
(the physical paused bytes are not computed yet; docs/capacity_planning.md says so too).

``token_costs`` splits ``usd_total`` (or, with ``window_s``, the share of it a span of the
run paid: the capacity answer's ``cost``, over each run's measurement window,
docs/capacity_planning.md) between the tokens the GPUs worked on, node by node (a
cluster's nodes each by their own steps, so a prefill instance's dollars go to the input
tokens): each engine step's time goes to its prefill
and decode tokens by their share of the step's priced time (the steps table's
``prefill_s``: the engine prices the step's prefill chunks alone and its decodes alone
with the step's own pricer and scales the two to the step's time,
``sim.cost.pricer.prefill_share``), and idle GPU time is spread in the same proportion as
the busy time (the price is paid for every simulated hour). Prefill dollars over the prompt tokens computed
give ``usd_per_million_input_tokens``; decode dollars over the output tokens give
``usd_per_million_output_tokens``; ``usd_per_million_cached_input_tokens`` is the hold
cost (``paused_hbm_usd``) over the prompt tokens not computed (prefix-cache hits and held
KV): the HBM-seconds that kept them, a view of the same dollars, not added to the others.

Invariant: no price -> every ``usd_*`` figure is None (never a made-up price); a figure
whose denominator is 0 (no output, no completed trajectory) is None; the prefill and
decode dollars of ``token_costs`` add up to the dollars priced (``usd_total``; with a
window, each node's ``usd_total`` x the window's share of the run, summed: ``usd``); a
window of the whole run gives the whole run's figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.units import GB


def price(resolved) -> tuple[float | None, str | None]:
    """(USD per GPU-hour, where it comes from) for a resolved scenario."""
    p = resolved.scenario.pricing
    if p.usd_per_gpu_hour is not None:
        return p.usd_per_gpu_hour, p.price_source or "scenario pricing.usd_per_gpu_hour"
    acc = resolved.accelerator
    if acc.usd_per_gpu_hour is None:
        return None, None
    date = f" ({acc.price_date})" if acc.price_date else ""
    return acc.usd_per_gpu_hour, f"{acc.name} profile: {acc.price_source or 'example'}{date}"


def cost_summary(resolved, summary: dict[str, Any]) -> dict[str, Any]:
    """The ``usd_*`` keys of summary.json for a finished run's summary."""
    usd_h, source = price(resolved)
    out: dict[str, Any] = {
        "usd_per_gpu_hour": usd_h,
        "price_source": source,
        "usd_total": None,
        "usd_per_million_output_tokens": None,
        "usd_per_trajectory": None,
        "paused_hbm_usd": None,
    }
    if usd_h is None:
        return out
    total = usd_h * resolved.num_gpus * summary["sim_time_s"] / 3600.0
    out["usd_total"] = total
    if summary.get("output_tokens"):
        out["usd_per_million_output_tokens"] = total / summary["output_tokens"] * 1e6
    if summary.get("trajectories_completed"):
        out["usd_per_trajectory"] = total / summary["trajectories_completed"]
    gb_s = summary.get("paused_hbm_gb_s")
    if gb_s is not None:
        usd_per_gb_s = usd_h / 3600.0 / (resolved.accelerator.memory_bytes / GB)
        out["paused_hbm_usd"] = gb_s * usd_per_gb_s
    return out


def step_time_split(steps) -> tuple[float, float]:
    """(prefill seconds, decode seconds) of a steps table: the sums of its ``prefill_s``
    and of the rest of each row's ``duration_s`` (the engine's split by priced time)."""
    if steps is None or not len(steps):
        return 0.0, 0.0
    prefill = float(steps.prefill_s.to_numpy(dtype=np.float64).sum())
    return prefill, float(steps.duration_s.to_numpy(dtype=np.float64).sum()) - prefill


def token_costs(
    summary: dict[str, Any],
    steps,
    requests,
    *,
    window_s: tuple[float, float | None] | None = None,
    trajectories=None,
    pauses=None,
) -> dict[str, Any]:
    """USD per million input, cached input and output tokens, and per trajectory, with
    the GPU time attributed by ``step_time_split`` node by node (the module docstring).

    ``window_s = (start, end)`` (simulated seconds; end None: the run's end) prices that
    span alone, as a capacity answer's measurement window (``sim.sweep.slo.window``):
    each node's ``usd_total`` x (end - start) / ``sim_time_s``, the steps clipped to it
    (a step across an edge counts its overlapping share of its seconds and its prompt
    tokens), the output tokens emitted in it (``emitted_tokens``), the prompt tokens of
    the requests admitted in it for the cached input, the pauses' held GB-seconds clipped
    to it, and per trajectory the share of each completed trajectory's life that lies in
    it (``trajectories``, ``pauses``: the run's tables; needed with a window only)."""
    out: dict[str, Any] = {
        "usd_per_million_input_tokens": None,
        "usd_per_million_cached_input_tokens": None,
        "usd_per_million_output_tokens": None,
        "usd_per_trajectory": summary.get("usd_per_trajectory"),
        "prefill_time_share": None,
        "usd_per_gpu_hour": summary.get("usd_per_gpu_hour"),
        "price_source": summary.get("price_source"),
        "window_s": None,  # {"start", "end"}: the span priced (None: the whole run)
        "usd": summary.get("usd_total"),  # the dollars split (the window's, with one)
    }
    if window_s is None:
        span = _Span(1.0, steps, summary.get("prefill_tokens"), summary.get("output_tokens"),
                     summary.get("paused_hbm_usd"), _reused(requests, None, None), None)  # fmt: skip
    else:
        found = _window_span(summary, steps, requests, window_s, trajectories, pauses)
        out["usd"] = out["usd_per_trajectory"] = None
        if found is None:
            return out  # an empty window prices nothing
        span = found
        out["window_s"] = {"start": span.lo, "end": span.hi}
    parts = _node_parts(summary, span.steps)
    shares = _prefill_shares(parts)
    if shares is None:
        return out
    out["prefill_time_share"] = shares[0]
    dollars = [u for u, _, _ in parts if u is not None]
    if summary.get("usd_total") is None or len(dollars) < len(parts):
        return out
    total: float
    if window_s is None and len(parts) == 1:  # one node, whole run: its total x its share
        total = summary["usd_total"]
        usd_prefill = total * shares[0]
    else:
        total = float(sum(u * span.scale for u in dollars))
        usd_prefill = float(sum(u * span.scale * sh for u, sh in zip(dollars, shares[1], strict=True)))
    out["usd"] = total
    if span.prefill_tokens:
        out["usd_per_million_input_tokens"] = usd_prefill / span.prefill_tokens * 1e6
    if span.output_tokens:
        out["usd_per_million_output_tokens"] = (total - usd_prefill) / span.output_tokens * 1e6
    if span.hold_usd is not None and span.reused_tokens > 0:
        out["usd_per_million_cached_input_tokens"] = span.hold_usd / span.reused_tokens * 1e6
    if span.trajectories:
        out["usd_per_trajectory"] = total / span.trajectories
    return out


@dataclass(frozen=True)
class _Span:
    """What a span of the run priced holds: its share of the run (``scale``), its steps
    (clipped to it), prompt tokens computed, output tokens emitted, the hold cost, prompt
    tokens reused, completed trajectories' worth of work (None: the summary's figure)."""

    scale: float
    steps: Any
    prefill_tokens: float | None
    output_tokens: float | None
    hold_usd: float | None
    reused_tokens: float
    trajectories: float | None
    lo: float = 0.0
    hi: float = 0.0


def _window_span(summary, steps, requests, window_s, trajectories, pauses) -> _Span | None:
    """The ``_Span`` of [start, end] (end None or infinite: the run's end); None when
    it is empty."""
    sim_time = float(summary.get("sim_time_s") or 0.0)
    lo, end = float(window_s[0]), window_s[1]
    hi = sim_time if end is None or not math.isfinite(end) else min(float(end), sim_time)
    if not (hi > lo and sim_time > 0):
        return None
    clipped = _clipped(steps, lo, hi)
    return _Span(
        (hi - lo) / sim_time, clipped, _window_prefill_tokens(summary, steps, clipped),
        emitted_tokens(requests, lo, hi), _hold_usd(summary, pauses, lo, hi),
        _reused(requests, lo, hi), _trajectories_served(trajectories, lo, hi), lo, hi,
    )  # fmt: skip


def _clipped(steps, lo: float, hi: float):
    """The steps of [lo, hi], each scaled to its share inside it: ``duration_s``,
    ``prefill_s`` and ``prefill_tokens`` times the overlap over the row's span (a row
    of several steps, ``n_steps``, spans them all; a zero-length row counts whole when it
    lies inside)."""
    if steps is None or not len(steps):
        return steps
    start = steps.start_s.to_numpy(dtype=np.float64)
    end = steps.end_s.to_numpy(dtype=np.float64)
    span = end - start
    overlap = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0.0, None)
    inside = ((start >= lo) & (start <= hi)).astype(np.float64)
    f = np.divide(overlap, span, out=inside, where=span > 0)
    keep = f > 0
    cols = {c: steps[c].to_numpy(dtype=np.float64)[keep] * f[keep]
            for c in ("duration_s", "prefill_s", "prefill_tokens")}  # fmt: skip
    if "node" in steps:
        cols["node"] = steps.node.to_numpy()[keep]
    import pandas as pd

    return pd.DataFrame(cols)


def _window_prefill_tokens(summary: dict[str, Any], steps, clipped) -> float:
    """Prompt tokens computed in the window: the clipped steps' ``prefill_tokens``, scaled
    to the run's ``prefill_tokens`` (a row of several steps, ``n_steps`` > 1, carries its
    first step's prompt tokens only; the run's count has them all)."""
    if clipped is None or not len(clipped):
        return 0.0
    inside = float(clipped.prefill_tokens.to_numpy(dtype=np.float64).sum())
    rows = float(steps.prefill_tokens.to_numpy(dtype=np.float64).sum())
    run = summary.get("prefill_tokens")
    return inside * run / rows if run and rows > 0 else inside


def _node_parts(summary: dict[str, Any], steps) -> list[tuple[float | None, float, tuple[float, float]]]:
    """Per node: (its ``usd_total``, its GPUs, (prefill s, decode s) of its steps); a run
    without ``nodes`` is one node with the summary's own."""
    nodes = summary.get("nodes")
    if not nodes:
        return [(summary.get("usd_total"), float(summary.get("num_gpus") or 1), step_time_split(steps))]
    by_node = {} if steps is None or not len(steps) else dict(tuple(steps.groupby("node")))
    return [
        (n.get("usd_total"), float(n.get("num_gpus") or 1), step_time_split(by_node.get(n.get("node_id", j))))
        for j, n in enumerate(nodes)
    ]


def _prefill_shares(parts) -> tuple[float, list[float]] | None:
    """(the GPU-time-weighted prefill share, each node's share): a node's share is its
    prefill seconds over its busy seconds (its idle time follows its busy time); a node
    never busy takes the cluster's pooled share; None when no node was busy."""
    busy = [p + d for _, _, (p, d) in parts]
    if sum(busy) <= 0:
        return None
    if len(parts) == 1:
        (p, d), = (split for _, _, split in parts)
        return p / (p + d), [p / (p + d)]
    pooled = sum(p for _, _, (p, _d) in parts) / sum(busy)
    each = [p / b if b > 0 else pooled for (_, _, (p, _d)), b in zip(parts, busy, strict=True)]
    gpus = [g for _, g, _ in parts]
    return sum(g * s for g, s in zip(gpus, each, strict=True)) / sum(gpus), each


def emitted_tokens(requests, lo: float, hi: float) -> float:
    """Output tokens emitted in [lo, hi]: each request's first token at its
    ``first_token_s``, the rest spread evenly over (``first_token_s``, ``finish_s``]
    (a request not finished: up to ``hi``)."""
    if requests is None or not len(requests):
        return 0.0
    first = requests.first_token_s.to_numpy(dtype=np.float64)
    ok = np.isfinite(first)
    first = first[ok]
    n = requests.output_tokens.to_numpy(dtype=np.float64)[ok]
    finish = requests.finish_s.to_numpy(dtype=np.float64)[ok]
    finish = np.where(np.isfinite(finish), finish, np.maximum(first, hi))
    head = ((first >= lo) & (first <= hi) & (n > 0)).astype(np.float64)
    rest = np.maximum(n - 1.0, 0.0)
    span = finish - first
    overlap = np.clip(np.minimum(finish, hi) - np.maximum(first, lo), 0.0, None)
    # a zero span: every token at the first token's time
    f = np.divide(overlap, span, out=head.copy(), where=span > 0)
    return float((head + rest * f).sum())


def _reused(requests, lo: float | None, hi: float | None) -> float:
    """Prompt tokens not computed (prefix hits and held KV) of the requests admitted
    (in [lo, hi] when given)."""
    if requests is None or not len(requests):
        return 0.0
    t = requests.admitted_s
    admitted = requests[t.notna()] if lo is None else requests[(t >= lo) & (t <= hi)]
    return float((admitted.hit_tokens + admitted.held_tokens).sum()) if len(admitted) else 0.0


def _hold_usd(summary: dict[str, Any], pauses, lo: float, hi: float) -> float | None:
    """The hold cost of [lo, hi]: each pause's ``paused_hbm_gb_s`` times its share of
    [``start_s``, ``ended_s``] inside the window (a held pause's bytes are constant over
    it), at the run's price per GB-second (``paused_hbm_usd`` / ``paused_hbm_gb_s``)."""
    usd, gb_s = summary.get("paused_hbm_usd"), summary.get("paused_hbm_gb_s")
    if usd is None or pauses is None:
        return None
    if not len(pauses) or not gb_s:
        return 0.0
    start = pauses.start_s.to_numpy(dtype=np.float64)
    end = pauses.ended_s.to_numpy(dtype=np.float64)
    end = np.where(np.isfinite(end), end, hi)
    span = end - start
    overlap = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0.0, None)
    f = np.divide(overlap, span, out=np.zeros_like(span), where=span > 0)
    return float((pauses.paused_hbm_gb_s.to_numpy(dtype=np.float64) * f).sum()) * usd / gb_s


def _trajectories_served(trajectories, lo: float, hi: float) -> float:
    """Completed trajectories' worth of work in [lo, hi]: each one's share of its life
    (``start_s`` to ``end_s``) inside the window, summed."""
    if trajectories is None or not len(trajectories):
        return 0.0
    done = trajectories[trajectories.status == "completed"]
    start = done.start_s.to_numpy(dtype=np.float64)
    end = done.end_s.to_numpy(dtype=np.float64)
    span = end - start
    overlap = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0.0, None)
    inside = ((start >= lo) & (start <= hi)).astype(np.float64)
    return float(np.divide(overlap, span, out=inside, where=span > 0).sum())
