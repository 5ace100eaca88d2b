"""``find_capacity``: the largest load that meets every SLO, with a confidence interval.

    from sim.sweep import find_capacity, parse_slo
    res = find_capacity("workloads/coding_agents_capacity.yaml", [parse_slo("ttft_p99_s=2")])
    res.capacity["value"], res.capacity["ci95_low"], res.analytic_estimate["value"]

The load is ``workload.arrival.concurrency`` (``search="concurrency"``, a closed loop; the
trajectory count is scaled with it, ``round(N0 x c / c0)`` and at least c, so each agent
runs as many trajectories as in the scenario) or ``workload.arrival.rate_per_s``
(``arrival_rate``, an open loop; the count scales with the rate, so the arrivals span the
same time). ``nodes`` needs a cluster scenario, which kvsim does not have yet (refused).

Search: replication i runs with seed ``s + i`` (``s`` the scenario's seed) at every load
and in every configuration, so configurations are compared seed by seed. Each
replication has its own search: bracketing from the analytic estimate (x1.5 up while it
passes, /1.5 down while it fails), then bisection between the largest passing and the
smallest failing load, down to 1 (concurrency) or 2 % (rate), at most ``max_points``
runs. A replication's capacity is its largest passing load; the answer is their mean
with Student's t 95 % interval. The replications of a round run in parallel on the
executor.

Invariant: a load is judged by ``sim.sweep.slo`` (window, warm-up, failures); the result's
``points`` lists every run made; without ``out`` nothing is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sim.errors import KvsimError
from sim.sweep.executor import Executor, make_executor
from sim.sweep.slo import DEFAULT_WARMUP_FRACTION, SLO, parse_slo
from sim.sweep.stats import ci95, mean, paired_difference
from sim.sweep.task import run_probe

SEARCHES = ("concurrency", "arrival_rate", "nodes")
#: a search grows by this factor while it passes (and shrinks while it fails)
BRACKET_FACTOR = 1.5
#: bisection on a rate stops when the bracket is this narrow (relative)
RATE_TOLERANCE = 0.02
MAX_CONCURRENCY = 1_000_000
DEFAULT_MAX_POINTS = 10

Progress = Callable[[dict], None]  # called with each finished probe


@dataclass
class CapacityResult:
    """One configuration's answer (``to_dict`` is the ``--json`` object)."""

    scenario: str
    search: str
    load_key: str
    slos: list[str]
    config: dict[str, Any]  # the --set / --vary overrides of this configuration
    seeds: list[int]
    capacity: dict[str, Any]  # value, ci95_low, ci95_high, per_replication, converged
    analytic_estimate: dict[str, Any]  # value, peak_value, inputs
    gap: dict[str, Any]
    points: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def points_frame(self):
        """Every run as a DataFrame (one row per load and replication)."""
        import pandas as pd

        rows = []
        for p in self.points:
            row = {k: v for k, v in p.items() if k not in ("slo_values", "memory", "window_s")}
            row.update(p.get("slo_values") or {})
            row["reasons"] = "; ".join(p.get("reasons") or [])
            rows.append(row)
        return pd.DataFrame(rows)


@dataclass
class _Search:
    """One replication's bracket."""

    integer: bool
    lo: float | None = None  # the largest load that passed
    hi: float | None = None  # the smallest load that failed
    next: float | None = None
    probes: int = 0
    converged: bool = False

    @property
    def done(self) -> bool:
        return self.next is None

    def record(self, load: float, passed: bool, max_points: int) -> None:
        self.probes += 1
        if passed:
            self.lo = load if self.lo is None else max(self.lo, load)
        else:
            self.hi = load if self.hi is None else min(self.hi, load)
        self.next = self._step(max_points)

    def _step(self, max_points: int) -> float | None:
        lo, hi = self.lo, self.hi
        nxt = None
        if hi is None:  # still passing: grow
            nxt = max(lo + 1, math.ceil(lo * BRACKET_FACTOR)) if self.integer else lo * BRACKET_FACTOR
            if self.integer and lo >= MAX_CONCURRENCY:
                nxt = None
            elif self.integer:
                nxt = min(nxt, MAX_CONCURRENCY)
        elif lo is None:  # still failing: shrink
            if self.integer:
                nxt = None if hi <= 1 else max(1, min(hi - 1, math.floor(hi / BRACKET_FACTOR)))
            else:
                nxt = hi / BRACKET_FACTOR
        elif self.integer:
            nxt = None if hi - lo <= 1 else (lo + hi) // 2
        else:
            nxt = None if hi - lo <= RATE_TOLERANCE * hi else (lo + hi) / 2
        if nxt is None:
            self.converged = True
        elif self.probes >= max_points:
            nxt = None
        return nxt

    @property
    def capacity(self) -> float:
        return self.lo if self.lo is not None else 0


# ----------------------------------------------------------------------- the load
def load_key(search: str) -> str:
    """The scenario key a search sets."""
    if search == "nodes":
        raise KvsimError(
            "--search nodes needs a cluster scenario (several nodes behind a router), which "
            "kvsim does not have yet; search concurrency or arrival_rate"
        )
    keys = {"concurrency": "workload.arrival.concurrency", "arrival_rate": "workload.arrival.rate_per_s"}
    if search not in keys:
        raise KvsimError(f"--search {search!r}: valid: {', '.join(SEARCHES)}")
    return keys[search]


def _count_key(workload) -> str:
    return "workload.num_requests" if hasattr(workload, "num_requests") else "workload.num_trajectories"


def base_load(loaded, search: str) -> tuple[float, int, str]:
    """(the scenario's load, its trajectory or request count, the count's key); refuses a
    scenario the search cannot turn."""
    wl = loaded.scenario.workload
    arrival = getattr(wl, "arrival", None)
    if arrival is None:
        raise KvsimError(
            f"--search {search} turns workload.arrival; a {wl.kind!r} workload has none "
            "(a mix: search one component's scenario)"
        )
    count = getattr(wl, "num_requests", None) or getattr(wl, "num_trajectories", None)
    if search == "concurrency":
        if arrival.kind != "closed_loop":
            raise KvsimError(
                f"--search concurrency needs workload.arrival.kind closed_loop (the scenario's is "
                f"{arrival.kind}); use --search arrival_rate"
            )
        return float(arrival.concurrency), int(count), _count_key(wl)
    rate = getattr(arrival, "rate_per_s", None)
    if rate is None:
        raise KvsimError(
            f"--search arrival_rate needs workload.arrival.rate_per_s (an open loop with a "
            f"rate; the scenario's arrival is {arrival.kind} without one)"
        )
    return float(rate), int(count), _count_key(wl)


def load_overrides(search: str, load: float, base: tuple[float, int, str]) -> dict[str, Any]:
    """The overrides that set a load: the load itself and the scaled count."""
    load0, count0, count_key = base
    if search == "concurrency":
        c = int(load)
        return {load_key(search): c, count_key: max(c, round(count0 * c / load0))}
    return {load_key(search): float(load), count_key: max(1, round(count0 * load / load0))}


# ----------------------------------------------------------------------- the search
def find_capacity(
    scenario: str | Path,
    slos: list[SLO | str],
    *,
    search: str = "concurrency",
    sets: dict[str, Any] | None = None,
    replications: int = 3,
    out: str | Path | None = None,
    executor: str | Executor = "local",
    workers: int | None = None,
    scheduler_address: str | None = None,
    max_points: int = DEFAULT_MAX_POINTS,
    warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
    progress: Progress | None = None,
) -> CapacityResult:
    """Search one configuration (see the module docstring)."""
    with _executor(executor, workers, scheduler_address, replications) as ex:
        return _find(scenario, _slos(slos), search, dict(sets or {}), replications, out, ex,
                     max_points, warmup_fraction, progress)  # fmt: skip


def _executor(executor, workers, address, replications) -> Executor:
    if isinstance(executor, Executor):
        return _Borrowed(executor)
    if executor == "local" and workers is None:
        from sim.sweep.executor import default_workers

        workers = min(replications, default_workers())
    return make_executor(executor, workers, address)


class _Borrowed(Executor):
    """A caller's executor: used, not closed."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner

    def run(self, fn, tasks):
        return self.inner.run(fn, tasks)


def _slos(slos: list[SLO | str]) -> list[SLO]:
    out = [s if isinstance(s, SLO) else parse_slo(s) for s in slos]
    if not out:
        raise KvsimError("--slo: give at least one SLO, e.g. --slo ttft_p99_s=2")
    return out


def _check(replications: int, max_points: int, warmup_fraction: float) -> None:
    if not 1 <= replications <= 1000:
        raise KvsimError(f"--replications must be in [1, 1000], got {replications}")
    if not 2 <= max_points <= 1000:
        raise KvsimError(f"--max-points must be in [2, 1000], got {max_points}")
    if not 0 <= warmup_fraction < 1:
        raise KvsimError(f"--warmup-fraction must be in [0, 1), got {warmup_fraction}")


def _find(scenario, slos, search, sets, replications, out, ex, max_points, warmup, progress):
    from sim.scenario import load_scenario, resolve
    from sim.sweep.analytic import analytic_estimate

    _check(replications, max_points, warmup)
    key = load_key(search)
    loaded = load_scenario(str(scenario), sets)
    base = base_load(loaded, search)
    resolved = resolve(loaded)
    seed0 = loaded.scenario.seed
    try:
        estimate = analytic_estimate(resolved, search, seed0)
    except KvsimError as exc:  # a workload F37 cannot describe (chat, a mix): search anyway
        estimate = {"value": None, "peak_value": None, "inputs": {}, "unavailable": str(exc)}
    start = _start(estimate["value"], base[0], search)
    integer = search == "concurrency"
    searches = [_Search(integer, next=start) for _ in range(replications)]
    out_dir = None if out is None else str(Path(out).resolve())
    points: list[dict] = []
    while not all(s.done for s in searches):
        tasks = []
        for i, s in enumerate(searches):
            if not s.done:
                load = int(s.next) if integer else float(s.next)
                overrides = {**sets, **load_overrides(search, load, base)}
                tasks.append({
                    "scenario": str(scenario), "overrides": overrides, "seed": seed0 + i,
                    "load": load, "replication": i, "slos": slos,
                    "warmup_fraction": warmup, "out_dir": out_dir, "config": sets,
                })  # fmt: skip
        for _, probe in ex.run(run_probe, tasks):
            points.append(probe)
            searches[probe["replication"]].record(probe["load"], probe["passed"], max_points)
            if progress is not None:
                progress(probe)
    points.sort(key=lambda p: (p["replication"], p["load"]))
    return _result(scenario, loaded, search, key, slos, sets, searches, seed0, estimate, points)


def _start(estimate: float | None, load0: float, search: str) -> float:
    """The first load probed: the analytic estimate, else the scenario's own load."""
    x = estimate if estimate and estimate > 0 else load0
    if search == "concurrency":
        return float(min(MAX_CONCURRENCY, max(1, round(x))))
    return float(x)


def _result(scenario, loaded, search, key, slos, sets, searches, seed0, estimate, points):
    caps = [s.capacity for s in searches]
    interval = ci95(caps)
    value = mean(caps)
    capacity = {
        "value": value,
        "ci95_low": interval[0] if interval else None,
        "ci95_high": interval[1] if interval else None,
        "per_replication": caps,
        "converged": all(s.converged for s in searches),
        "unit": "concurrent trajectories" if search == "concurrency" else "arrivals per second",
    }
    from sim.sweep.gap import explain_gap

    gap = explain_gap(value, estimate, searches, points)
    return CapacityResult(
        scenario=str(scenario),
        search=search,
        load_key=key,
        slos=[f"{s.name}<={s.limit_s:g}" for s in slos],
        config=dict(sets),
        seeds=[seed0 + i for i in range(len(searches))],
        capacity=capacity,
        analytic_estimate=estimate,
        gap=gap,
        points=points,
    )


# ------------------------------------------------------------------- several configs
@dataclass
class CapacityComparison:
    """``--vary KEY=V1,V2``: one result per value, and each against the first, seed by seed."""

    key: str
    values: list[Any]
    results: list[CapacityResult]
    comparisons: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "vary": self.key,
            "values": self.values,
            "configurations": [r.to_dict() for r in self.results],
            "comparisons": self.comparisons,
        }

    def table(self):
        """One row per configuration: capacity, interval, analytic estimates."""
        import pandas as pd

        rows = []
        for value, r, c in zip(self.values, self.results, [None, *self.comparisons], strict=True):
            rows.append({
                self.key: value,
                "capacity": r.capacity["value"],
                "ci95_low": r.capacity["ci95_low"],
                "ci95_high": r.capacity["ci95_high"],
                "analytic": r.analytic_estimate["value"],
                "analytic_peak_context": r.analytic_estimate["peak_value"],
                "vs_first": None if c is None else c["mean"],
                "distinguishable": None if c is None else c["distinguishable"],
            })  # fmt: skip
        return pd.DataFrame(rows)


def find_capacities(
    scenario: str | Path,
    slos: list[SLO | str],
    vary: tuple[str, list[Any]],
    *,
    sets: dict[str, Any] | None = None,
    replications: int = 3,
    out: str | Path | None = None,
    executor: str | Executor = "local",
    workers: int | None = None,
    scheduler_address: str | None = None,
    **options: Any,
) -> CapacityComparison:
    """``find_capacity`` for each value of ``vary = (key, values)`` on one executor, with
    paired comparisons against the first value (``out``: one sub-folder per value)."""
    key, values = vary
    if len(values) < 1:
        raise KvsimError(f"--vary {key}: give at least one value")
    results = []
    with _executor(executor, workers, scheduler_address, replications) as ex:
        for i, value in enumerate(values):
            sub = None if out is None else Path(out) / f"config-{i}"
            results.append(
                find_capacity(scenario, slos, sets={**(sets or {}), key: value},
                              replications=replications, out=sub, executor=ex, **options)
            )  # fmt: skip
    first = results[0].capacity["per_replication"]
    comparisons = []
    for value, r in zip(values[1:], results[1:], strict=True):
        diff = paired_difference(first, r.capacity["per_replication"])
        comparisons.append({"value": value, "against": values[0], **diff})
    return CapacityComparison(key, list(values), results, comparisons)
