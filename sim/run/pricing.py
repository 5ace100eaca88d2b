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

Invariant: no price -> every ``usd_*`` figure is None (never a made-up price); a figure
whose denominator is 0 (no output, no completed trajectory) is None.
"""

from __future__ import annotations

from typing import Any

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
