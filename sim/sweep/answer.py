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
- ``achieved``: the trajectories in flight in the runs at the answer (the mean over the
  measurement window and the peak over the run): the concurrency the runs sustained,
  which a closed loop's load setting (the agents) bounds but need not reach;
  ``unbound_warning``: the line when that mean falls well short of the setting (below
  ``ACHIEVED_MIN_SHARE`` of it), with how much and why;
- ``cost_at_capacity``: ``sim.run.pricing.token_costs`` of the runs at the answer over
  their measurement windows (the load the verdict judged, not the start-up burst or the
  drain), the mean over the replications, with each run's window (``windows_s``).

Invariant: pure functions of the probes and searches; nothing here runs a simulation,
and no interval bound returned is below zero.
"""

from __future__ import annotations

import math
from typing import Any

from sim.sweep.stats import ci95, mean

#: a closed loop's answer is flagged when the runs at it keep fewer trajectories in flight
#: (mean over the window) than this share of the agents set
ACHIEVED_MIN_SHARE = 0.9

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


def _at(searches, points: list[dict]):
    """Each replication's run at its answer: (replication, probe), runs that failed left out."""
    for i, s in enumerate(searches):
        probe = next((p for p in points if p["replication"] == i and p["load"] == s.at), None)
        if probe is not None and not probe.get("error"):
            yield i, probe


def achieved(searches, points: list[dict], of_load: bool = True) -> dict[str, Any] | None:
    """The trajectories in flight in the runs at the answer: ``mean`` (over each run's
    measurement window) and ``peak`` (the most at once in the run), each the mean over the
    replications; ``share_of_load`` the mean of each run's mean over its load;
    ``per_replication`` each run's figures and its trajectories' mean length (``of_load``
    False, a load that is not a count of agents: ``share_of_load`` None). None when no run
    at an answer measured them."""
    rows = []
    for i, probe in _at(searches, points):
        m = probe.get("memory") or {}
        if m.get("trajectories_active_mean") is None:
            continue
        rows.append({
            "replication": i, "seed": probe["seed"], "load": probe["load"],
            "mean": m["trajectories_active_mean"], "peak": m.get("trajectories_active_peak"),
            # the simulated mean of the trajectories that finished (the estimate's
            # ``inputs.trajectory_s_mean`` is the workload's sampled one)
            "trajectory_s_mean_finished": m.get("trajectory_s_mean_finished"),
            "window_s": probe.get("window_s"),
        })  # fmt: skip
    if not rows:
        return None
    return {
        "mean": mean(r["mean"] for r in rows),
        "peak": mean(r["peak"] for r in rows),
        "share_of_load": mean(r["mean"] / r["load"] for r in rows) if of_load else None,
        "per_replication": rows,
    }


def unbound_warning(got: dict[str, Any] | None, stagger_s: float, counts, count_key: str,
                    scenario_load: tuple[float, int]) -> list[str]:  # fmt: skip
    """``["WARNING: the load setting did not bind ..."]`` when a run at the answer kept
    fewer trajectories in flight (mean over its window) than ``ACHIEVED_MIN_SHARE`` of its
    agents: how much, and why (``counts(load)``: the trajectories a run at ``load`` had;
    ``scenario_load``: the scenario's agents and trajectories)."""
    if got is None:
        return []
    short = [r for r in got["per_replication"] if r["mean"] < ACHIEVED_MIN_SHARE * r["load"]]
    if not short:
        return []
    worst = min(short, key=lambda r: r["mean"] / r["load"])
    load, n = worst["load"], counts(worst["load"])
    peak = _num(worst["peak"])
    length = worst["trajectory_s_mean_finished"]
    ramp = (load - 1) * stagger_s
    per = n / load
    outlasts = bool(stagger_s) and length is not None and ramp > length
    window = worst.get("window_s") or {}
    why, fix = [], []
    if outlasts:
        last = window.get("end")  # the last trajectory's start (sim.sweep.slo.window)
        head = (f"the agents start {stagger_s:g} s apart (workload.arrival.stagger_s), so the "
                f"last of {load:g} would start {ramp:,.4g} s in, later than a trajectory lasts "
                f"({length:,.4g} s mean)")  # fmt: skip
        if last is not None and last < ramp:  # the trajectories ran out before the ramp ended
            started = math.floor(last / stagger_s + 1e-9) + 1  # agents 0, 1, ... by then
            head += (f": the first agents finish and take the next trajectories, and all "
                     f"{n:,} had started by {last:,.4g} s, when {started:,} agents had "
                     f"({load - started:,.0f} never ran)")  # fmt: skip
        elif per < 2:
            head += f": with {n:,} trajectories for {load:g} agents ({per:.2g} each) the first have ended"
        why.append(head)
        fix.append(f"--set workload.arrival.stagger_s={length / load:.3g} (the ramp-up within "
                   "one trajectory's length)")  # fmt: skip
    elif stagger_s and window.get("start") is not None and window["start"] < ramp:
        why.append(
            f"the measurement window ({window['start']:,.4g} - {_num(window.get('end'))} s) lies "
            f"in the agents' ramp-up (one starts every {stagger_s:g} s, the last {ramp:,.4g} s in)"
        )
        if per >= 3:
            fix.append(f"a larger --warmup-fraction (a window that starts after {ramp:,.4g} s)")
    else:
        why.append("the agents spend part of the window without a trajectory (between "
                   "trajectories, e.g. workload.arrival.think_s, or after their last one): "
                   "neither the ramp-up nor the trajectory count explains it")  # fmt: skip
    c0, n0 = scenario_load
    if per < 3:
        fix.append(f"--set {count_key}={max(3 * round(c0), 2 * n0)} (now {n0} for concurrency "
                   f"{c0:g}; the search keeps the ratio)")  # fmt: skip
    return [
        f"WARNING: the load setting did not bind: at capacity the runs kept "
        f"{worst['mean']:,.4g} trajectories in flight on average over the measurement window, "
        f"{worst['mean'] / load:.0%} of the {load:g} agents set (peak {peak} at once; seed "
        f"{worst['seed']}; {len(short)} of {len(got['per_replication'])} runs at capacity under "
        f"{ACHIEVED_MIN_SHARE:.0%}): {'; '.join(why)}. The concurrency the runs sustained is "
        f"the achieved figure (mean {got['mean']:,.4g}, peak {_num(got['peak'])}), not the "
        f"setting. Fix: {' or '.join(fix) if fix else 'none for the setting; read the achieved figure'}"
    ]


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.4g}"
