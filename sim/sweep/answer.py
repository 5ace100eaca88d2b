"""What a capacity answer says beside its number: how far to trust it and what it costs.

Responsibility: from a finished search's probes (``sim.sweep.task.run_probe``), the parts
of ``CapacityResult`` that qualify the capacity:

- ``at_capacity``: for each replication, the run at its answer, with every SLO's value
  over the measurement window (what the verdict judged) and over the whole run (the
  run's ``summary.json``: start-up burst and drain included), side by side;
- ``window_only_notes``: a line for each SLO met inside the window only (the whole run's
  value above the limit at some replication's answer);
- ``interval``: Student's t 95 % interval of the replications' capacities, clipped at 0
  (a load is never negative), with a line when it was clipped or when one replication
  gives none (too few replications);
- ``no_pass_note``: the line when no load tried met the SLOs;
- ``cost_at_capacity``: ``sim.run.pricing.token_costs`` of the runs at the answer over
  their measurement windows (the load the verdict judged, not the start-up burst or the
  drain), the mean over the replications, with each run's window (``windows_s``).

Invariant: pure functions of the probes and searches; nothing here runs a simulation,
and no interval bound returned is below zero.
"""

from __future__ import annotations

from typing import Any

from sim.sweep.stats import ci95, mean

#: the figures of ``cost`` averaged over the replications' runs at capacity
COST_KEYS = (
    "usd_per_million_input_tokens",
    "usd_per_million_cached_input_tokens",
    "usd_per_million_output_tokens",
    "usd_per_trajectory",
    "prefill_time_share",
)


def at_capacity(searches, points: list[dict]) -> list[dict[str, Any]]:
    """One row per replication that has an answer: its run at the answer's load."""
    out = []
    for i, s in enumerate(searches):
        probe = next((p for p in points if p["replication"] == i and p["load"] == s.at), None)
        if probe is None or probe.get("error"):
            continue
        out.append({
            "replication": i, "seed": probe["seed"], "load": probe["load"],
            "window": probe.get("slo_values") or {},
            "whole_run": probe.get("slo_values_whole_run") or {},
        })  # fmt: skip
    return out


def window_only_notes(rows: list[dict], slos) -> list[str]:
    """``NOTE: ...`` for each SLO whose whole-run value exceeds its limit at an answer."""
    notes = []
    for slo in slos:
        over = [r for r in rows if (r["whole_run"].get(slo.name) or 0.0) > slo.limit_s]
        if not over:
            continue
        worst = max(over, key=lambda r: r["whole_run"][slo.name])
        inside = worst["window"].get(slo.name)
        inside_text = "-" if inside is None else f"{inside:.4g} s"
        notes.append(
            f"NOTE: {slo.name}<={slo.limit_s:g} is met inside the measurement window only, in "
            f"{len(over)} of {len(rows)} runs at capacity: over the whole run (start-up burst "
            f"and drain included) {slo.name} = {worst['whole_run'][slo.name]:.4g} s "
            f"(window {inside_text}, seed {worst['seed']}, load {worst['load']:g})"
        )
    return notes


def interval(caps: list[float]) -> tuple[float | None, float | None, list[str]]:
    """(low, high, lines): the t interval clipped at 0, and what to say about it."""
    ci = ci95(caps)
    if ci is None:
        if len(caps) == 1:
            return None, None, ["one replication: no interval (--replications 3 or more)"]
        return None, None, []
    lo, hi = ci
    if lo >= 0:
        return lo, hi, []
    return 0.0, max(hi, 0.0), [
        f"the 95% t interval of {len(caps)} replications reaches {lo:.4g}: clipped at 0 "
        f"(too few replications for a tight interval; try --replications {max(5, 2 * len(caps))})"
    ]


def no_pass_note(search: str, points: list[dict]) -> str:
    """The line for a search in which no load met the SLOs."""
    done = [p for p in points if not p.get("error")] or points
    if search == "nodes":
        most = max(done, key=lambda p: p["load"])
        why = "; ".join(most.get("reasons") or [])
        return f"no node count tried meets the SLOs (the most, {most['load']:g}: {why})"
    least = min(done, key=lambda p: p["load"])
    why = "; ".join(least.get("reasons") or [])
    return f"no load tried meets the SLOs (the smallest, load {least['load']:g}: {why})"


def cost_at_capacity(searches, points: list[dict]) -> dict[str, Any] | None:
    """The mean of ``token_costs`` (each over its run's measurement window) over the
    replications' runs at their answer (None when no replication has one)."""
    runs = []
    for i, s in enumerate(searches):
        probe = next((p for p in points if p["replication"] == i and p["load"] == s.at), None)
        if probe is not None and probe.get("cost"):
            runs.append(probe["cost"])
    if not runs:
        return None
    out: dict[str, Any] = {k: mean(r.get(k) for r in runs) for k in COST_KEYS}
    out["usd_per_gpu_hour"] = runs[0].get("usd_per_gpu_hour")
    out["price_source"] = runs[0].get("price_source")
    out["runs"] = len(runs)
    out["windows_s"] = [r.get("window_s") for r in runs]  # the span each run's cost prices
    return out
