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

``token_costs`` splits ``usd_total`` between the tokens the GPUs worked on (the capacity
answer's ``cost``, docs/capacity_planning.md): each engine step's time goes to its prefill
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
decode dollars of ``token_costs`` add up to ``usd_total``.
"""

from __future__ import annotations

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


def token_costs(summary: dict[str, Any], steps, requests) -> dict[str, Any]:
    """USD per million input, cached input and output tokens, and per trajectory, with
    the GPU time attributed by ``step_time_split`` (the module docstring)."""
    out: dict[str, Any] = {
        "usd_per_million_input_tokens": None,
        "usd_per_million_cached_input_tokens": None,
        "usd_per_million_output_tokens": None,
        "usd_per_trajectory": summary.get("usd_per_trajectory"),
        "prefill_time_share": None,
        "usd_per_gpu_hour": summary.get("usd_per_gpu_hour"),
        "price_source": summary.get("price_source"),
    }
    prefill_s, decode_s = step_time_split(steps)
    if prefill_s + decode_s > 0:
        out["prefill_time_share"] = prefill_s / (prefill_s + decode_s)
    total = summary.get("usd_total")
    if total is None or out["prefill_time_share"] is None:
        return out
    usd_prefill = total * out["prefill_time_share"]
    if summary.get("prefill_tokens"):
        out["usd_per_million_input_tokens"] = usd_prefill / summary["prefill_tokens"] * 1e6
    if summary.get("output_tokens"):
        out["usd_per_million_output_tokens"] = (total - usd_prefill) / summary["output_tokens"] * 1e6
    admitted = requests[requests.admitted_s.notna()] if len(requests) else requests
    reused = float((admitted.hit_tokens + admitted.held_tokens).sum()) if len(admitted) else 0.0
    hold = summary.get("paused_hbm_usd")
    if hold is not None and reused > 0:
        out["usd_per_million_cached_input_tokens"] = hold / reused * 1e6
    return out
