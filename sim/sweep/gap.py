"""Why the simulated capacity differs from F37's: the gap, in numbers.

Responsibility: from the runs at each replication's capacity (its largest passing load;
``nodes``: its smallest passing count) and just past it (its smallest failing load;
``nodes``: its largest failing count), the figures F37 leaves out or assumes:
trajectories in flight at capacity (mean over the window, peak) against F37's count,
KV per active trajectory as simulated against the per-trajectory bytes F37's estimate
divided by (``analytic_estimate``'s ``inputs.kv_bytes_per_trajectory``: the plan's, a
hybrid model's states included, the shared prefix left out only when it is shared), the
KV held by trajectories in tool pauses, allocator fragmentation (``1 - eta_alloc``), how full the pool ran, preemptions, and prefill queueing (queue p99),
each a mean over the replications; and why the load above failed.

The sentences name the failing side as the search turns: ``at the next load tried`` /
``above`` for a load, ``with fewer nodes`` / ``below`` for ``nodes``; a figure with no failing
run behind it prints ``n/a (no larger load failed)`` / ``n/a (no smaller count failed)``
(the answer is the bottom of the range, or the budget ended the search first).

Invariant: every figure is computed from the probes' own measurements (the measurement
window of ``sim.sweep.slo``); a figure with no run behind it is None, never a guess.
"""

from __future__ import annotations

from typing import Any

from sim.sweep.stats import mean


def _probe(points: list[dict], replication: int, load: float | None) -> dict | None:
    if load is None:
        return None
    for p in points:
        if p["replication"] == replication and p["load"] == load:
            return p
    return None


def _figures(p: dict) -> dict[str, Any]:
    m = p.get("memory") or {}
    alloc, active = m.get("allocated_bytes_mean"), m.get("trajectories_active_mean")
    paused, pool = m.get("paused_kv_bytes_mean"), m.get("kv_pool_bytes")
    eta, peak = m.get("eta_alloc_mean"), m.get("peak_allocated_bytes")
    return {
        "kv_bytes_per_active_trajectory": alloc / active if alloc and active else None,
        "trajectories_active_mean": active,
        "trajectories_active_peak": m.get("trajectories_active_peak"),
        "allocated_share_of_pool": alloc / pool if alloc is not None and pool else None,
        "paused_share_of_allocated": paused / alloc if paused is not None and alloc else None,
        "fragmentation_share": 1.0 - eta if eta is not None else None,
        "peak_allocated_share_of_pool": peak / pool if peak is not None and pool else None,
        "preemptions": m.get("preemptions"),
        "queue_p99_s": m.get("queue_p99_s"),
        "prefix_hit_rate": m.get("prefix_hit_rate"),
        "prompt_reuse_rate": m.get("prompt_reuse_rate"),
    }


def _mean_figures(probes: list[dict]) -> dict[str, Any]:
    rows = [_figures(p) for p in probes if p is not None and not p.get("error")]
    if not rows:
        return {}
    return {k: mean(r[k] for r in rows) for k in rows[0]}


def explain_gap(value: float | None, estimate: dict, searches: list, points: list[dict]) -> dict:
    """The ``gap`` object of a capacity answer (see the module docstring)."""
    at = [_probe(points, i, s.at) for i, s in enumerate(searches)]
    above = [_probe(points, i, s.beyond) for i, s in enumerate(searches)]
    inputs = estimate["inputs"]
    # what F37 divided by (``sim.sweep.analytic._plan``): none without an estimate
    f37_bytes = inputs.get("kv_bytes_per_trajectory") if inputs else None
    est = estimate["value"]
    at_cap = _mean_figures(at)
    at_cap["kv_bytes_per_trajectory_f37"] = f37_bytes
    at_cap["shared_prefix_bytes_f37"] = inputs.get("shared_prefix_bytes") if inputs else None
    above_cap = _mean_figures(above)
    reasons = next((p["reasons"] for p in above if p is not None and p.get("reasons")), [])
    gap = {
        "simulated": value,
        "analytic": est,
        "analytic_peak_context": estimate["peak_value"],
        "difference": None if value is None or est is None else est - value,
        "ratio": None if not est or value is None else value / est,
        "at_capacity": at_cap,
        "above_capacity": {**above_cap, "first_failure": reasons},
    }
    fewest = bool(searches) and searches[0].fewest
    concurrency = bool(searches) and searches[0].integer and not fewest
    gap["explanation"] = _sentences(gap, at_cap, above_cap, reasons, _SIDES[fewest], concurrency)
    return gap


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:,.2f} GB"


#: the failing side's words: (the run, its short form, the sentence head, no such run)
_SIDES = {
    False: ("at the next load tried", "above", "above capacity", "n/a (no larger load failed)"),
    True: ("with fewer nodes", "below", "with fewer nodes", "n/a (no smaller count failed)"),
}


def _sentences(gap: dict, at: dict, above: dict, reasons: list[str], side: tuple,
               concurrency: bool = False) -> list[str]:  # fmt: skip
    run, short, head, none = side
    out = []
    if gap["ratio"] is not None:
        out.append(
            f"simulated capacity {gap['simulated']:.4g} is {gap['ratio']:.2f}x F37's "
            f"time-averaged estimate {gap['analytic']:.4g} (peak-context estimate "
            f"{gap['analytic_peak_context']})"
        )
    active, peak = at.get("trajectories_active_mean"), at.get("trajectories_active_peak")
    if concurrency and active is not None and gap["analytic"]:
        out.append(
            f"trajectories in flight at capacity: mean {active:,.4g} over the window, peak "
            f"{'-' if peak is None else format(peak, ',.4g')}; {active / gap['analytic']:.2f}x "
            f"F37's {gap['analytic']:.4g} "
            "(F37 counts trajectories in flight; the load is the agents set)"
        )
    sim_b, f37_b = at.get("kv_bytes_per_active_trajectory"), at.get("kv_bytes_per_trajectory_f37")
    if sim_b is not None and f37_b:
        shared = at.get("shared_prefix_bytes_f37")
        what = ("its own KV beyond the shared prefix, which F37 stores once: "
                f"{_gb(shared)}" if shared else "the whole trajectory, nothing shared")  # fmt: skip
        out.append(
            f"KV per active trajectory: {_gb(sim_b)} simulated vs {_gb(f37_b)} in F37 "
            f"(what its estimate divides by: {what}), {sim_b / f37_b:.2f}x"
        )
    if at.get("paused_share_of_allocated") is not None:
        out.append(
            f"KV held through tool pauses: {_pct(at['paused_share_of_allocated'])} of the "
            "allocated KV at capacity"
        )
    if at.get("fragmentation_share") is not None:
        out.append(f"fragmentation (1 - eta_alloc): {_pct(at['fragmentation_share'])}")
    if at.get("peak_allocated_share_of_pool") is not None:
        out.append(
            f"pool use at capacity: mean {_pct(at.get('allocated_share_of_pool'))}, peak "
            f"{_pct(at['peak_allocated_share_of_pool'])} (F37 keeps 10 % headroom)"
        )
    pre_at, pre_above = at.get("preemptions"), above.get("preemptions")
    if pre_at is not None or pre_above is not None:
        out.append(  # a mean over replications: print it as a number, not 0.6666666666666666
            f"preemptions: {'n/a' if pre_at is None else _count(pre_at)} at capacity, "
            + (none if pre_above is None else f"{_count(pre_above)} {run}")
        )
    if at.get("queue_p99_s") is not None:
        q = above.get("queue_p99_s")
        out.append(
            f"prefill queueing: queue p99 {at['queue_p99_s']:.3g} s at capacity, "
            + (none if q is None else f"{round(q, 3)} s {short}")
        )
    if reasons:
        out.append(f"{head}: " + "; ".join(reasons))
    return out


def _count(x) -> str:
    """A (mean) count for the printout: 3 stays 3, 0.6666666666666666 becomes 0.67."""
    if x is None:
        return "None"
    return f"{x:.3g}" if isinstance(x, float) and not float(x).is_integer() else f"{x:g}"
