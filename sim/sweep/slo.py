"""Service-level objectives: parsing ``METRIC=VALUE``, measuring a run against them.

An SLO is named ``<metric>_<stat>_s`` and maps to the summary's ``<metric>_s.<stat>``
(``ttft_p99_s`` -> ``ttft_s.p99``) for ``ttft``, ``itl``, ``e2e``, ``queue`` and
``resume_latency`` (a paused trajectory's tool return to its next first token), with
``stat`` one of ``mean``, ``p50``, ``p90``, ``p95``, ``p99`` (the keys of every latency
summary, ``sim.metrics.stats.SUMMARY_KEYS``). A run meets an SLO when the metric,
measured over the *measurement window*, is at most the value.

The window: from the end of the warm-up to the start of the run's last trajectory (after
it the load only drains: a closed loop runs out of trajectories, an open loop of
arrivals). The warm-up is ``warmup_fraction`` (default 0.2) of that span: it holds the
start-up burst (every closed-loop agent's first prompt at once, an empty cache). A run
whose window is empty (one trajectory) is measured whole. Inside the window:

- ``ttft``, ``queue``: requests that arrived in it; ``e2e``: those of them that finished;
- ``itl``: engine steps that ended in it, each gap weighted by its decoding sequences
  (gaps that span a stall or preemption are counted in the whole-run ``itl_s`` only);
- ``resume_latency``: pauses whose tool returned in it.

A run fails whatever its latencies when it rejected a request, a trajectory failed, or
work was unfinished when it stopped (``duration_s`` reached with requests queued or
running, or trajectories not yet ended): a capacity search must never count a point that
sheds or leaves load as meeting the SLOs.

A window can describe almost nothing: when every agent of a closed loop starts at once
(``num_trajectories == concurrency``, perhaps staggered by ``stagger_s``) the last start
comes seconds into a run of minutes, and when they all start at t = 0 the whole run,
start-up burst included, is measured. ``window_warnings`` says so, in one line per
problem, over a search's probes: a window under ``MIN_WINDOW_SHARE`` of the simulated
time, fewer than ``MIN_WINDOW_REQUESTS`` requests in it, or a whole-run window (one
``WARNING`` line naming each shortfall and the fix).

Invariant: the measured values equal the summary's percentiles of the same rows (same
``sim.metrics.stats`` functions); a metric with no sample in the window fails its SLO.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.errors import KvsimError
from sim.metrics.stats import SUMMARY_KEYS, describe, describe_weighted

#: SLO metrics and the summary key each measures
METRICS = {
    "ttft": "ttft_s",
    "itl": "itl_s",
    "e2e": "e2e_s",
    "queue": "queue_s",
    "resume_latency": "resume_latency_s",
}
STATS = SUMMARY_KEYS  # mean, p50, p90, p95, p99: an SLO names any statistic a summary has
DEFAULT_WARMUP_FRACTION = 0.2
#: a window shorter than this share of the simulated time is warned about
MIN_WINDOW_SHARE = 0.10
#: a window holding fewer requests than this is warned about (a p99 of fewer is about
#: their maximum)
MIN_WINDOW_REQUESTS = 100
_NAME = re.compile(rf"^(?P<metric>[a-z0-9_]+?)_(?P<stat>{'|'.join(STATS)})_s$")


@dataclass(frozen=True)
class SLO:
    """``metric``'s ``stat`` at most ``limit_s`` seconds."""

    name: str  # as written: ttft_p99_s
    metric: str  # ttft
    stat: str  # p99
    limit_s: float

    @property
    def summary_key(self) -> str:
        """The summary's dotted key (``ttft_s.p99``)."""
        return f"{METRICS[self.metric]}.{self.stat}"


def parse_slo(text: str) -> SLO:
    """``ttft_p99_s=2`` -> SLO; a one-line error naming the valid names."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    m = _NAME.match(name)
    valid = ", ".join(f"{k}_<{'|'.join(STATS)}>_s" for k in METRICS)
    if not sep or m is None or m["metric"] not in METRICS:
        raise KvsimError(f"--slo {text!r}: expected METRIC=SECONDS with METRIC one of {valid}")
    try:
        limit = float(raw)
    except ValueError:
        raise KvsimError(f"--slo {text!r}: {raw!r} is not a number of seconds") from None
    if not math.isfinite(limit) or limit <= 0:
        raise KvsimError(f"--slo {text!r}: the limit must be a positive, finite number of seconds")
    return SLO(name, m["metric"], m["stat"], limit)


def window(requests, trajectories, warmup_fraction: float) -> tuple[float, float]:
    """(start, end) of the measurement window in simulated seconds (see the docstring)."""
    starts = trajectories.start_s.to_numpy() if len(trajectories) else np.empty(0)
    end = float(starts.max()) if starts.size else 0.0
    if end <= 0.0:  # one trajectory, or every one at t = 0: the whole run
        return 0.0, math.inf
    return warmup_fraction * end, end


def measure(result, warmup_fraction: float = DEFAULT_WARMUP_FRACTION) -> dict[str, dict]:
    """Every SLO metric of a ``RunResult`` over its window: ``{summary key: {stat: s}}``."""
    req, traj = result.requests, result.trajectories
    lo, hi = window(req, traj, warmup_fraction)
    inside = req[(req.arrival_s >= lo) & (req.arrival_s <= hi)]
    out = {
        "ttft_s": describe(inside.ttft_s.to_numpy()),
        "queue_s": describe(inside.queue_s.to_numpy()),
        "e2e_s": describe(inside[inside.status == "finished"].e2e_s.to_numpy()),
        "itl_s": _itl(result.steps, lo, hi),
        "resume_latency_s": _resume(result.pauses, lo, hi),
    }
    out["window_s"] = {"start": lo, "end": None if math.isinf(hi) else hi}
    out["window_requests"] = len(inside)
    return out


def _itl(steps, lo: float, hi: float) -> dict:
    if steps is None or not len(steps):
        return describe(np.empty(0))
    s = steps[(steps.end_s >= lo) & (steps.end_s <= hi) & (steps.n_decode > 0)]
    n = np.maximum(s.n_steps.to_numpy(), 1)
    return describe_weighted(s.duration_s.to_numpy() / n, s.n_decode.to_numpy() * n)


def _resume(pauses, lo: float, hi: float) -> dict:
    if pauses is None or not len(pauses):
        return describe(np.empty(0))
    p = pauses[(pauses.tool_return_s >= lo) & (pauses.tool_return_s <= hi)]
    return describe(p.resume_latency_s.to_numpy())


def window_warnings(points: list[dict], fix: str, label: Callable[[float], str]) -> list[str]:
    """``["WARNING: ..."]`` when the probes' windows fall short (see the docstring), one
    line naming each shortfall, its worst run (``label`` names a load: ``at load 12``,
    ``with 2 nodes``) and ``fix`` (how to widen the window); empty when none does."""
    runs = [p for p in points if not p.get("error") and p.get("window_s")]
    of = f"of {len(runs)} run{'s' if len(runs) != 1 else ''}"
    found = []
    short = [p for p in runs if _share(p) is not None and _share(p) < MIN_WINDOW_SHARE]
    if short:
        p = min(short, key=_share)
        w = p["window_s"]
        found.append(
            f"the SLO window covers under {MIN_WINDOW_SHARE:.0%} of the simulated time in "
            f"{len(short)} {of} (narrowest: {w['start']:,.2f} - {w['end']:,.2f} s of "
            f"{p['memory']['sim_time_s']:,.0f} s, {_share(p):.1%}, {label(p['load'])})"
        )
    whole = [p for p in runs if p["window_s"]["end"] is None]
    if whole:
        found.append(
            f"every trajectory starts at t = 0 in {len(whole)} {of}, so each is measured "
            "whole, start-up burst and drain included (no warm-up left out)"
        )
    few = [p for p in runs if p.get("window_requests", MIN_WINDOW_REQUESTS) < MIN_WINDOW_REQUESTS]
    if few:
        p = min(few, key=lambda q: q["window_requests"])
        found.append(
            f"fewer than {MIN_WINDOW_REQUESTS} requests arrived in the SLO window in {len(few)} "
            f"{of} (fewest: {p['window_requests']}, {label(p['load'])})"
        )
    if not found:
        return []
    return [
        "WARNING: " + "; ".join(found) + ": the SLO verdicts and the gap describe little of "
        f"the runs. Fix: {fix}"
    ]


def _share(p: dict) -> float | None:
    """The share of a probe's simulated time its window spans (None: unknown, or whole)."""
    w, sim_s = p["window_s"], (p.get("memory") or {}).get("sim_time_s")
    if w["end"] is None or not sim_s:
        return None
    return (w["end"] - w["start"]) / sim_s


def failures(summary: dict) -> list[str]:
    """Why a run fails every SLO whatever its latencies (empty when it does not)."""
    out = []
    if summary.get("rejected"):
        out.append(f"{summary['rejected']} requests rejected")
    failed = (summary.get("trajectories_by_status") or {}).get("failed", 0)
    if failed:
        out.append(f"{failed} trajectories failed")
    if summary.get("unfinished"):
        out.append(f"{summary['unfinished']} requests unfinished when the run stopped")
    total, ended = summary.get("trajectories_total"), summary.get("trajectories_ended")
    if total is not None and ended is not None and ended < total:
        out.append(f"{total - ended} of {total} trajectories unfinished when the run stopped")
    return out


def verdict(summary: dict, measured: dict, slos: list[SLO]) -> tuple[bool, list[str]]:
    """(meets every SLO, the reasons it does not)."""
    reasons = failures(summary)
    for slo in slos:
        value = measured[METRICS[slo.metric]][slo.stat]
        if value is None:
            reasons.append(f"{slo.name}: no sample in the measurement window")
        elif value > slo.limit_s:
            reasons.append(f"{slo.name} = {value:.4g} s > {slo.limit_s:g} s")
    return not reasons, reasons


def slo_values(measured: dict, slos: list[SLO]) -> dict[str, Any]:
    """``{slo name: measured seconds}``."""
    return {s.name: measured[METRICS[s.metric]][s.stat] for s in slos}


def whole_run_values(summary: dict, slos: list[SLO]) -> dict[str, Any]:
    """``{slo name: the summary's whole-run seconds}`` (start-up and drain included), to
    show beside the window's (None where the summary has no value)."""
    out: dict[str, Any] = {}
    for s in slos:
        stats = summary.get(METRICS[s.metric])
        out[s.name] = stats.get(s.stat) if isinstance(stats, dict) else None
    return out
