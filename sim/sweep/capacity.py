"""``find_capacity``: the largest load that meets every SLO, with a confidence interval.

    from sim.sweep import find_capacity, parse_slo
    res = find_capacity("workloads/coding_agents_capacity.yaml", [parse_slo("ttft_p99_s=2")])
    res.capacity["value"], res.capacity["ci95_low"], res.analytic_estimate["value"]

The load is ``workload.arrival.concurrency`` (``search="concurrency"``, a closed loop; the
trajectory count is scaled with it, ``round(N0 x c / c0)`` and at least c, so each agent
runs as many trajectories as in the scenario) or ``workload.arrival.rate_per_s``
(``arrival_rate``, an open loop; the count scales with the rate, so the arrivals span the
same time). ``nodes`` turns the other way: the load stays the scenario's and the node
count of its cluster (``cluster.nodes.0.count``; a scenario without ``cluster:`` is one
node of its hardware; a cluster of several node groups is refused) is searched for the
*smallest* count that meets the SLOs.

Search: replication i runs with seed ``s + i`` (``s`` the scenario's seed) at every load
and in every configuration, so configurations are compared seed by seed. Each
replication has its own search: bracketing from the analytic estimate (x1.5 up while it
passes, /1.5 down while it fails), then bisection between the largest passing and the
smallest failing load, down to 1 (concurrency) or 2 % (rate), at most ``max_points``
runs. A replication's capacity is its largest passing load (``nodes``: the smallest
passing count, over the integers up to ``MAX_NODES``, starting from F37's node estimate;
None when no count up to it passes); the answer is their mean with Student's t 95 %
interval. Each replication's search is a chain of probes on the executor
(``Executor.run_chains``): its next probe is submitted as soon as its last one is judged,
so a worker never waits for another replication (``--vary``: the configurations' chains
run at once too); a replication's probes depend on its own earlier probes only, so the
answer does not depend on the order in which probes finish.

What qualifies the number (``sim.sweep.answer``): ``at_capacity`` puts each SLO's value
over the window beside the whole run's at every replication's answer, ``notes`` say when
an SLO is met inside the window only, when the interval was clipped at 0 or is missing
(too few replications), and when no load met the SLOs (then ``capacity.value`` is None
and ``capacity.met`` false); ``cost`` is the cost per token at the answer, each run
priced over its measurement window. On a cluster, F37 is the sum over the node groups
that hold the agents' KV (``cluster_estimate``) and the search starts there.

Invariant: a load is judged by ``sim.sweep.slo`` (window, warm-up, failures); the result's
``points`` lists every run made, its ``warnings`` every way their measurement windows fall
short (too little of the run, too few requests); every option and, with ``--vary``,
every configuration is checked before any run; without ``out`` nothing is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sim.errors import KvsimError
from sim.sweep import answer
from sim.sweep.executor import Executor, make_executor
from sim.sweep.slo import DEFAULT_WARMUP_FRACTION, SLO, parse_slo, window_warnings
from sim.sweep.stats import mean, paired_difference
from sim.sweep.task import run_probe, warm_up

SEARCHES = ("concurrency", "arrival_rate", "nodes")
#: the key ``--search nodes`` sets in a cluster scenario of one node group
NODES_KEY = "cluster.nodes.0.count"
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
    #: value, ci95_low, ci95_high (clipped at 0: ci95_clipped), per_replication,
    #: converged, met (False: no load met the SLOs, value None), unit, achieved (the
    #: trajectories in flight at the answer: ``sim.sweep.answer.achieved``; None: nodes)
    capacity: dict[str, Any]
    analytic_estimate: dict[str, Any]  # value, peak_value, inputs
    gap: dict[str, Any]
    points: list[dict[str, Any]] = field(default_factory=list)
    #: what makes the answer less than it looks (``sim.sweep.slo.window_warnings``)
    warnings: list[str] = field(default_factory=list)
    #: per replication, its run at the answer: SLO values in the window and whole run
    at_capacity: list[dict[str, Any]] = field(default_factory=list)
    #: what qualifies the number (window-only SLOs, a clipped or missing interval, no pass)
    notes: list[str] = field(default_factory=list)
    #: cost per token at the answer (``sim.sweep.answer.cost_at_capacity``; None: no run)
    cost: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def points_frame(self):
        """Every run as a DataFrame (one row per load and replication)."""
        import pandas as pd

        rows = []
        for p in self.points:
            skip = ("slo_values", "slo_values_whole_run", "memory", "window_s", "cost")
            row = {k: v for k, v in p.items() if k not in skip}
            row.update(p.get("slo_values") or {})
            row.update({f"{k}.whole_run": v for k, v in (p.get("slo_values_whole_run") or {}).items()})
            row.update({f"cost.{k}": v for k, v in (p.get("cost") or {}).items()})
            row["reasons"] = "; ".join(p.get("reasons") or [])
            rows.append(row)
        return pd.DataFrame(rows)


@dataclass
class _Search:
    """One replication's bracket."""

    integer: bool
    #: search the smallest passing load (``nodes``: more of them, less load on each);
    #: ``lo`` and ``hi`` then hold the largest failing and the smallest passing load
    fewest: bool = False
    lo: float | None = None  # the largest load that passed (fewest: failed)
    hi: float | None = None  # the smallest load that failed (fewest: passed)
    next: float | None = None
    probes: int = 0
    converged: bool = False
    limit: int = MAX_CONCURRENCY  # the largest integer load tried

    @property
    def done(self) -> bool:
        return self.next is None

    def record(self, load: float, passed: bool, max_points: int) -> None:
        self.probes += 1
        if passed != self.fewest:  # the side the bracket grows from
            self.lo = load if self.lo is None else max(self.lo, load)
        else:
            self.hi = load if self.hi is None else min(self.hi, load)
        self.next = self._step(max_points)

    def _step(self, max_points: int) -> float | None:
        lo, hi = self.lo, self.hi
        nxt = None
        if hi is None:  # still passing (fewest: failing): grow
            nxt = max(lo + 1, math.ceil(lo * BRACKET_FACTOR)) if self.integer else lo * BRACKET_FACTOR
            if self.integer and lo >= self.limit:
                nxt = None
            elif self.integer:
                nxt = min(nxt, self.limit)
        elif lo is None:  # still failing (fewest: passing): shrink
            if self.integer:
                nxt = None if hi <= 1 else max(1, min(hi - 1, math.floor(hi / BRACKET_FACTOR)))
            else:
                nxt = hi / BRACKET_FACTOR
        elif self.integer:
            nxt = None if hi - lo <= 1 else (lo + hi) // 2
        else:
            nxt = None if hi - lo <= RATE_TOLERANCE * hi else (lo + hi) / 2
        if nxt is None:
            self.converged = not (self.fewest and hi is None)  # fewest: none passed
        elif self.probes >= max_points:
            nxt = None
        return nxt

    @property
    def capacity(self) -> float | None:
        if self.fewest:
            return self.hi  # None: no load up to the limit passed
        return self.lo if self.lo is not None else 0

    @property
    def at(self) -> float | None:
        """The load of the answer (the run at capacity)."""
        return self.hi if self.fewest else self.lo

    @property
    def beyond(self) -> float | None:
        """The load tried just past the answer, on the failing side."""
        return self.lo if self.fewest else self.hi


# ----------------------------------------------------------------------- the load
def load_key(search: str) -> str:
    """The scenario key a search sets (``nodes``: the one group's count; a scenario
    without ``cluster:`` gets ``cluster.nodes: [{count: n}]``)."""
    keys = {
        "concurrency": "workload.arrival.concurrency",
        "arrival_rate": "workload.arrival.rate_per_s",
        "nodes": NODES_KEY,
    }
    if search not in keys:
        raise KvsimError(f"--search {search!r}: valid: {', '.join(SEARCHES)}")
    return keys[search]


def load_label(search: str, load: float) -> str:
    """A probe's load in words: ``load 12``; ``nodes``: ``1 node``, ``2 nodes``."""
    if search == "nodes":
        return f"{load:g} node{'' if load == 1 else 's'}"
    return f"load {load:g}"


def window_fix(loaded, search: str, loads: Sequence[float] = ()) -> str:
    """How to widen a search's measurement windows (for ``window_warnings``): the count
    to ``--set``, the scenario's own numbers, and, where the search scales the count
    with the load (``concurrency``, ``arrival_rate``), those of the runs at ``loads``
    (the loads searched: the scenario's count is not what they ran)."""
    wl = loaded.scenario.workload
    arrival = getattr(wl, "arrival", None)
    n = getattr(wl, "num_requests", None) or getattr(wl, "num_trajectories", None)
    tail = ("(capacity has no window option: the window ends at the last trajectory's start; "
            "--warmup-fraction only moves its start)")  # fmt: skip
    if arrival is not None and arrival.kind == "closed_loop" and n is not None:
        c = arrival.concurrency
        more = 3 * c if n < 3 * c else 2 * n  # at 3 x already: more of them still
        now = f"now {n} for concurrency {c}"
        if search == "concurrency":
            now += "; the search keeps the ratio" + _searched(loaded, search, loads, "concurrency {}")
        return (
            f"give more trajectories than agents, num_trajectories >= ~3 x concurrency: "
            f"--set {_count_key(wl)}={more} ({now}) {tail}"
        )
    if n is not None:
        now = f"now {n}"
        if search == "arrival_rate":
            now += "; the search keeps the ratio" + _searched(loaded, search, loads, "{}/s")
        return f"give more arrivals, so they outlast the drain: --set {_count_key(wl)}={2 * n} ({now}) {tail}"
    return f"give the workload more trajectories than run at once {tail}"


def _searched(loaded, search: str, loads: Sequence[float], load_fmt: str) -> str:
    """``: its runs had 80 - 120 trajectories for concurrency 53 - 80``: the counts the search ran
    (``load_overrides``) at the lowest and the highest of ``loads``; empty without any."""
    if not loads:
        return ""
    base = base_load(loaded, search)
    lo, hi = min(loads), max(loads)
    n_lo, n_hi = (load_overrides(search, x, base)[base[2]] for x in (lo, hi))
    what = "requests" if base[2] == "workload.num_requests" else "trajectories"
    if lo == hi:
        return f": its runs had {n_lo} {what} for {load_fmt.format(f'{lo:g}')}"
    return f": its runs had {n_lo} - {n_hi} {what} for {load_fmt.format(f'{lo:g} - {hi:g}')}"


def _count_key(workload) -> str:
    return "workload.num_requests" if hasattr(workload, "num_requests") else "workload.num_trajectories"


def base_load(loaded, search: str) -> tuple[float, int, str]:
    """(the scenario's load, its trajectory or request count, the count's key); refuses a
    scenario the search cannot turn. ``nodes``: (the node count, the same, the key that
    sets it)."""
    if search == "nodes":
        return _base_nodes(loaded)
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


def _base_nodes(loaded) -> tuple[float, int, str]:
    cluster = loaded.scenario.cluster
    if cluster is None:  # one node of the scenario's hardware
        return 1.0, 1, "cluster.nodes"
    groups = cluster.nodes
    if len(groups) > 1:
        counts = " + ".join(str(g.count) for g in groups)
        raise KvsimError(
            f"--search nodes scales one node group; the scenario's cluster.nodes has "
            f"{len(groups)} groups ({counts} nodes): keep one group, or compare clusters "
            "with --vary cluster.nodes.I.count"
        )
    return float(groups[0].count), int(groups[0].count), NODES_KEY


def load_overrides(search: str, load: float, base: tuple[float, int, str]) -> dict[str, Any]:
    """The overrides that set a load: the load itself and the scaled count (``nodes``:
    the node count alone; the workload stays the scenario's)."""
    load0, count0, count_key = base
    if search == "nodes":
        n = int(load)
        return {count_key: n} if count_key == NODES_KEY else {count_key: [{"count": n}]}
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
    _check(replications, max_points, warmup_fraction)  # before the executor sizes itself
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

    def run_chains(self, fn, tasks, follow):
        return self.inner.run_chains(fn, tasks, follow)

    def warm(self, fn, arg):
        self.inner.warm(fn, arg)


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


def _load(scenario, search: str, sets: dict[str, Any]):
    """(loaded scenario, the overrides every run gets, the base load) of one
    configuration; a configuration that cannot run stops here, in one line."""
    from sim.scenario import load_scenario

    run_sets = one_node(scenario, sets) if search == "nodes" else sets
    loaded = load_scenario(str(scenario), run_sets)
    base = base_load(loaded, search)
    _preflight(loaded)
    return loaded, run_sets, base


def _find(scenario, slos, search, sets, replications, out, ex, max_points, warmup, progress):
    plan = _Plan(scenario, slos, search, sets, replications, out, max_points, warmup, ex)
    return _run_plans(ex, [plan], progress)[0]


class _Plan:
    """One configuration's search: its replications' brackets, the probe that each one
    runs next, and, once every bracket is done, the answer. A replication's probes depend
    only on its own earlier probes (``_Search.record``), so the replications (and the
    configurations of ``--vary``) run as independent chains on the executor: the answer
    does not depend on which chain's probe finishes first."""

    def __init__(self, scenario, slos, search, sets, replications, out, max_points, warmup,
                 ex: Executor | None = None):  # fmt: skip
        _check(replications, max_points, warmup)
        self.scenario, self.slos, self.search, self.sets = scenario, slos, search, sets
        self.max_points, self.warmup = max_points, warmup
        self.key = load_key(search)
        self.loaded, self.run_sets, self.base = _load(scenario, search, sets)
        if ex is not None:  # the scenario checks out: the workers import while F37 runs
            ex.warm(warm_up, None)
        self.seed0 = self.loaded.scenario.seed
        try:
            self.estimate = _estimate(self.loaded, search, self.seed0)
        except KvsimError as exc:  # a workload F37 cannot describe (chat, a mix): search anyway
            self.estimate = {"value": None, "peak_value": None, "inputs": {}, "unavailable": str(exc)}
        start = _start(self.estimate["value"], self.base[0], search)
        self.integer = search in ("concurrency", "nodes")
        self.searches = [_new_search(search, start) for _ in range(replications)]
        self.out_dir = None if out is None else str(Path(out).resolve())
        self.points: list[dict] = []

    def task(self, i: int, tag: int) -> dict | None:
        """Replication ``i``'s next probe (None: its bracket is done); ``tag`` names the
        plan among those run together."""
        s = self.searches[i]
        if s.done:
            return None
        load = int(s.next) if self.integer else float(s.next)
        overrides = {**self.run_sets, **load_overrides(self.search, load, self.base)}
        return {
            "scenario": str(self.scenario), "overrides": overrides, "seed": self.seed0 + i,
            "load": load, "replication": i, "slos": self.slos, "warmup_fraction": self.warmup,
            "out_dir": self.out_dir, "config": self.sets, "plan": tag,
        }  # fmt: skip

    def record(self, probe: dict) -> None:
        self.points.append(probe)
        self.searches[probe["replication"]].record(probe["load"], probe["passed"], self.max_points)

    def result(self) -> CapacityResult:
        points = sorted(self.points, key=lambda p: (p["replication"], p["load"]))
        return _result(self.scenario, self.loaded, self.search, self.key, self.slos, self.sets,
                       self.searches, self.seed0, self.estimate, points)  # fmt: skip


def _run_plans(ex: Executor, plans: list[_Plan], progress: Progress | None) -> list[CapacityResult]:
    """Every plan's replications as chains on ``ex`` at once; the answers in plan order."""
    first = [t for k, plan in enumerate(plans) for i in range(len(plan.searches))
             if (t := plan.task(i, k)) is not None]  # fmt: skip

    def follow(task: dict, probe: dict) -> dict | None:
        plan = plans[task["plan"]]
        plan.record(probe)
        return plan.task(task["replication"], task["plan"])

    for _, probe in ex.run_chains(run_probe, first, follow):
        if progress is not None:
            progress(probe)
    return [plan.result() for plan in plans]


def _new_search(search: str, start: float) -> _Search:
    if search == "nodes":
        from sim.cluster.config import MAX_NODES

        return _Search(True, fewest=True, next=start, limit=MAX_NODES)
    return _Search(search == "concurrency", next=start)


def one_node(scenario, sets: dict[str, Any]) -> dict[str, Any]:
    """``sets`` with, for a scenario without ``cluster:``, the one-node cluster it is
    (so ``--set cluster.router.kind=...`` applies to the nodes the search adds)."""
    from sim.scenario import load_scenario

    if any(k == "cluster" or k.startswith("cluster.nodes") for k in sets):
        return sets
    if load_scenario(str(scenario)).scenario.cluster is not None:
        return sets
    return {"cluster.nodes": [{"count": 1}], **sets}


def _preflight(loaded) -> None:
    if loaded.scenario.cluster is not None:
        from sim.run.checks import preflight_cluster

        preflight_cluster(loaded)
    else:
        from sim.scenario import resolve

        resolve(loaded)


def _estimate(loaded, search: str, seed: int) -> dict[str, Any]:
    """F37's answer: the load the scenario's nodes serve (``cluster_estimate``: one node's
    figure times the node count, group by group); ``nodes``: the scenario's load over
    what one node (of its one group) serves, rounded up."""
    from sim.scenario import resolve
    from sim.sweep.analytic import analytic_estimate

    if search != "nodes":
        if loaded.scenario.cluster is not None:
            return cluster_estimate(loaded, search, seed)
        return analytic_estimate(resolve(loaded), search, seed)
    wl = loaded.scenario.workload
    arrival = getattr(wl, "arrival", None)
    closed = arrival is not None and arrival.kind == "closed_loop"
    if arrival is None or not (closed or getattr(arrival, "rate_per_s", None)):
        raise KvsimError("F37 estimates nodes for a closed loop or an arrival rate only")
    node = loaded
    if loaded.scenario.cluster is not None:
        from sim.run.checks import node_scenarios

        node = node_scenarios(loaded)[0]
    per_node = analytic_estimate(resolve(node), "concurrency" if closed else "arrival_rate", seed)
    load = float(arrival.concurrency if closed else arrival.rate_per_s)

    def nodes(x: float | None) -> int | None:
        return max(1, math.ceil(load / x)) if x else None

    return {
        "value": nodes(per_node["value"]),
        "peak_value": nodes(per_node["peak_value"]),
        "inputs": {**per_node["inputs"], "load_per_node": per_node["value"], "load": load},
    }


def cluster_estimate(loaded, search: str, seed: int) -> dict[str, Any]:
    """F37 for a cluster: each node holds its own agents' KV in its own pool (and its own
    copy of the shared prefix), so the cluster's estimate is the sum over the node groups
    that hold the agents' KV of count x one node's estimate (``analytic_estimate`` of the
    group's node scenario). Those groups are every group of an aggregated cluster (data-
    parallel ranks included) and the ``decode`` groups of a disaggregated one: a prefill
    instance holds a prompt's KV only until it is shipped; the sequence, and with it the
    KV a paused agent keeps between turns, lives on its decode instance. ``inputs`` are
    the first such group's (the workload averages are the same in every group), with
    ``nodes_counted`` and ``per_node`` (each group's count and one node's figures)."""
    from sim.run.checks import node_scenarios
    from sim.scenario import resolve
    from sim.sweep.analytic import analytic_estimate

    groups = loaded.scenario.cluster.nodes
    nodes = node_scenarios(loaded)
    value: float | None = 0
    peak: float | None = 0
    first: dict[str, Any] | None = None
    per_node = []
    for i, (group, node) in enumerate(zip(groups, nodes, strict=True)):
        if group.role == "prefill":
            continue
        one = analytic_estimate(resolve(node), search, seed)
        first = first or one
        per_node.append({"group": i, "role": group.role, "count": group.count,
                         "value": one["value"], "peak_value": one["peak_value"]})  # fmt: skip
        value = None if value is None or one["value"] is None else value + group.count * one["value"]
        peak = None if peak is None or one["peak_value"] is None else peak + group.count * one["peak_value"]
    assert first is not None  # a cluster has a group of role both or decode (ClusterSection)
    counted = sum(p["count"] for p in per_node)
    return {
        "value": value,
        "peak_value": peak,
        "inputs": {**first["inputs"], "nodes_counted": counted, "per_node": per_node},
    }


def _start(estimate: float | None, load0: float, search: str) -> float:
    """The first load probed: the analytic estimate, else the scenario's own load."""
    x = estimate if estimate and estimate > 0 else load0
    if search == "concurrency":
        return float(min(MAX_CONCURRENCY, max(1, round(x))))
    if search == "nodes":
        from sim.cluster.config import MAX_NODES

        return float(min(MAX_NODES, max(1, round(x))))
    return float(x)


def _at_label(search: str, load: float) -> str:
    return f"with {load_label(search, load)}" if search == "nodes" else f"at {load_label(search, load)}"


_UNITS = {"concurrency": "concurrent trajectories", "arrival_rate": "arrivals per second",
          "nodes": "nodes"}  # fmt: skip


def _result(scenario, loaded, search, key, slos, sets, searches, seed0, estimate, points):
    caps = [s.capacity for s in searches]
    met = any(p["passed"] for p in points)
    found = met and all(c is not None for c in caps)  # nodes: None when no count passed
    value = mean(caps) if found else None
    low, high, notes = answer.interval(caps) if found else (None, None, [])
    capacity = {
        "value": value,
        "ci95_low": low,
        "ci95_high": high,
        "ci95_clipped": bool(notes) and low is not None,
        "per_replication": caps,
        "converged": all(s.converged for s in searches),
        "met": met,
        "unit": _UNITS[search],
    }
    from sim.sweep.gap import explain_gap

    gap = explain_gap(value, estimate, searches, points)
    label = partial(_at_label, search)
    loads = [p["load"] for p in points if not p.get("error")]
    warnings = window_warnings(points, window_fix(loaded, search, loads), label)
    rows = answer.at_capacity(searches, points) if met else []
    if not met:
        notes = [answer.no_pass_note(search, points)]
    got = answer.achieved(searches, points, search == "concurrency") if met and search != "nodes" else None
    capacity["achieved"] = got  # the trajectories in flight at the answer (None: nodes)
    if search == "concurrency":
        base = base_load(loaded, search)
        warnings += answer.unbound_warning(
            got, loaded.scenario.workload.arrival.stagger_s,
            lambda x: load_overrides(search, x, base)[base[2]], base[2], (base[0], base[1]),
        )  # fmt: skip
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
        warnings=warnings,
        at_capacity=rows,
        notes=answer.window_only_notes(rows, slos) + notes,
        cost=answer.cost_at_capacity(searches, points) if met else None,
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
    _check(replications, options.get("max_points", DEFAULT_MAX_POINTS),
           options.get("warmup_fraction", DEFAULT_WARMUP_FRACTION))  # fmt: skip
    unknown = set(options) - {"search", "max_points", "warmup_fraction", "progress"}
    if unknown:
        raise TypeError(f"find_capacities: unexpected option(s) {sorted(unknown)}")
    search = options.get("search", "concurrency")
    load_key(search)
    checked = _slos(slos)
    with _executor(executor, workers, scheduler_address, replications) as ex:
        plans = []
        for i, value in enumerate(values):  # every configuration checked before any search
            try:
                plans.append(_Plan(
                    scenario, checked, search, {**(sets or {}), key: value}, replications,
                    None if out is None else Path(out) / f"config-{i}",
                    options.get("max_points", DEFAULT_MAX_POINTS),
                    options.get("warmup_fraction", DEFAULT_WARMUP_FRACTION), ex))  # fmt: skip
            except KvsimError as exc:
                text = str(exc).removeprefix(f"--set {key}: ")
                raise KvsimError(f"--vary {key}={value}: {text}") from None
        results = _run_plans(ex, plans, options.get("progress"))  # every configuration's chains at once
    first = results[0].capacity["per_replication"]
    comparisons = []
    for value, r in zip(values[1:], results[1:], strict=True):
        diff = paired_difference(first, r.capacity["per_replication"])
        comparisons.append({"value": value, "against": values[0], **diff})
    return CapacityComparison(key, list(values), results, comparisons)
