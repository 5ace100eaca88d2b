"""``find_pd_ratio``: how many of a disaggregated cluster's instances should prefill and
how many decode to meet SLOs, with aggregated serving of the same GPUs beside it.

    from sim.sweep.pd_ratio import find_pd_ratio
    res = find_pd_ratio("workloads/pd_coding_agents.yaml", [parse_slo("ttft_p99_s=0.5")])
    res.best, res.rows

The scenario is a cluster of two node groups, ``prefill`` then ``decode`` (group sections
as the scenario gives them); its N instances are split every way, p prefill and N - p
decode for p = 1 .. N - 1, and served aggregated: N instances of the decode group's
sections, each prefilling and decoding, behind ``session_affinity`` (an agent's calls stay
where its KV is, as the disaggregated front keeps them on their decode instance). Each
configuration runs at the scenario's own load, replication i with seed ``s + i`` in every
configuration (compared seed by seed), judged as ``kvsim capacity`` judges a load
(``sim.sweep.slo``: window, warm-up, failures).

Invariant: the answer (``best``) is the passing split with the lowest mean of the first
SLO's value (ties: fewer prefill instances), or None when no split passes; every run made
is a row's ``probes``; nothing is written.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sim.errors import KvsimError
from sim.sweep.executor import Executor
from sim.sweep.slo import DEFAULT_WARMUP_FRACTION, SLO
from sim.sweep.stats import mean
from sim.sweep.task import run_probe

#: the configuration name of aggregated serving (its ``prefill`` count is 0)
AGGREGATED = "aggregated"


@dataclass
class PDRatioResult:
    """Every configuration's verdict (``to_dict`` is the ``--json`` object)."""

    scenario: str
    slos: list[str]
    instances: int  # N: prefill + decode instances of the scenario
    gpus_per_instance: list[int]  # [prefill group, decode group]
    seeds: list[int]
    rows: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None  # the chosen split's row (None: none passes)
    aggregated: dict[str, Any] | None = None  # the aggregated row

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _shape(loaded) -> tuple[int, list[int], dict[str, Any]]:
    """(N, GPUs per instance of each group, the decode group's sections) or one line."""
    section = loaded.scenario.cluster
    groups = section.nodes if section is not None else []
    if len(groups) != 2 or [g.role for g in groups] != ["prefill", "decode"]:
        raise KvsimError(
            "--search pd_ratio needs a cluster of two node groups, role: prefill then role: "
            "decode (e.g. workloads/pd_coding_agents.yaml)"
        )
    n = groups[0].count + groups[1].count
    tp_pp = []
    for g in groups:
        hw = {**loaded.scenario.hardware.model_dump(), **(g.hardware or {})}
        tp_pp.append(int(hw.get("tp") or 1) * int(hw.get("pp") or 1))
    dec = groups[1].model_dump(exclude={"role", "count"}, exclude_none=True)
    return n, tp_pp, dec


def configurations(n: int, decode_sections: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """(name, prefill instances, overrides) of every split and of aggregated serving."""
    out = [(f"{p}P+{n - p}D", p, {"cluster.nodes.0.count": p, "cluster.nodes.1.count": n - p})
           for p in range(1, n)]  # fmt: skip
    agg = {"cluster.nodes": [{"count": n, **decode_sections}], "cluster.transfer": None,
           "cluster.router": {"kind": "session_affinity"}}  # fmt: skip
    return [*out, (AGGREGATED, 0, agg)]


def find_pd_ratio(
    scenario: Any,
    slos: list[SLO],
    *,
    sets: dict[str, Any] | None = None,
    replications: int = 1,
    executor: Executor | None = None,
    warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
) -> PDRatioResult:
    """Run every split and aggregated serving; see the module docstring."""
    from sim.scenario import load_scenario

    if not slos:
        raise KvsimError("--search pd_ratio needs at least one --slo")
    if not 1 <= replications <= 1000:
        raise KvsimError(f"--replications must be in [1, 1000], got {replications}")
    if not 0 <= warmup_fraction < 1:
        raise KvsimError(f"--warmup-fraction must be in [0, 1), got {warmup_fraction}")
    loaded = load_scenario(scenario, dict(sets or {}))
    n, gpus, dec = _shape(loaded)
    if n < 2:
        raise KvsimError("--search pd_ratio needs at least 2 instances (1 prefill + 1 decode)")
    seed0 = loaded.scenario.seed
    seeds = [seed0 + i for i in range(replications)]
    configs = configurations(n, dec)
    tasks = [
        {"scenario": scenario, "overrides": {**(sets or {}), **over}, "seed": s, "load": p,
         "replication": i, "config": {"name": name}, "slos": slos,
         "warmup_fraction": warmup_fraction}  # fmt: skip
        for name, p, over in configs
        for i, s in enumerate(seeds)
    ]
    probes: list[dict[str, Any] | None] = [None] * len(tasks)
    for i, out in (executor or Executor()).run(run_probe, tasks):
        probes[i] = out
    res = PDRatioResult(str(scenario), [s.name for s in slos], n, gpus, seeds)
    for k, (name, p, _over) in enumerate(configs):
        mine = [pr for pr in probes[k * replications:(k + 1) * replications] if pr is not None]
        res.rows.append(_row(name, p, n, gpus, mine, slos))
    res.aggregated = res.rows[-1]
    passing = [r for r in res.rows[:-1] if r["passed"]]
    first = slos[0].name
    res.best = min(passing, key=lambda r: (r["slo_values"][first], r["prefill"]), default=None)
    return res


def _row(name: str, p: int, n: int, gpus: list[int], probes: list[dict], slos: list[SLO]) -> dict:
    values = {}
    for s in slos:
        got = [(pr.get("slo_values") or {}).get(s.name) for pr in probes]
        values[s.name] = mean([v for v in got if v is not None]) if all(v is not None for v in got) else None
    decode_gpus = (n - p) * gpus[1] if p else n * gpus[1]
    return {
        "name": name,
        "prefill": p,
        "decode": n - p if p else 0,
        "prefill_gpus": p * gpus[0],
        "decode_gpus": decode_gpus if p else 0,
        "gpus": p * gpus[0] + (n - p) * gpus[1] if p else n * gpus[1],
        "passed": bool(probes) and all(pr.get("passed") for pr in probes),
        "slo_values": values,
        "reasons": sorted({r for pr in probes for r in pr.get("reasons") or []}),
        "probes": probes,
    }


def text_lines(res: PDRatioResult) -> list[str]:
    """The answer as the table ``kvsim capacity --search pd_ratio`` prints."""
    names = res.slos
    head = f"{'configuration':<14} {'prefill GPUs':>12} {'decode GPUs':>11}  " + "  ".join(
        f"{n:>14}" for n in names) + "  meets SLOs"  # fmt: skip
    out = [f"{res.scenario}: {res.instances} instances split prefill:decode, and aggregated "
           f"(seeds {', '.join(map(str, res.seeds))})", head]  # fmt: skip
    for r in res.rows:
        vals = "  ".join(
            f"{'-' if r['slo_values'][n] is None else format(r['slo_values'][n], '.4g'):>14}" for n in names)
        gpus = (f"{r['prefill_gpus']:>12} {r['decode_gpus']:>11}" if r["prefill"]
                else f"{'-':>12} {r['gpus']:>11}")  # fmt: skip
        out.append(f"{r['name']:<14} {gpus}  {vals}  {'yes' if r['passed'] else 'no'}")
    if res.best is None:
        out.append("no split meets the SLOs")
    else:
        b = res.best
        out.append(f"answer: {b['prefill']} prefill + {b['decode']} decode instances "
                   f"({b['prefill_gpus']} + {b['decode_gpus']} GPUs); aggregated on "
                   f"{res.aggregated['gpus'] if res.aggregated else '-'} GPUs "
                   f"{'meets' if res.aggregated and res.aggregated['passed'] else 'misses'} them")  # fmt: skip
    out.append("(each value: the mean over seeds of the SLO's metric in the measurement window; "
               "step times carry the cost model's error: see accuracy in each run's summary)")
    return out
