"""Source-quantile fixtures: what the fit tests compare generated samples against.

For each fitted kind, the source (converted to the sample format by ``sources.py``) is
measured by ``sim.workload.observe``; for every observable the fixture keeps ``n`` and
p10/p50/p90/p99, and for each quantile its standard deviation (``sd``) and 95 % percentile
interval (``ci95``) over ``BOOTSTRAP`` resamples of the source's trajectories (calls, for the single team run of
``multi_agent_team``). Rank correlations of (tool time, growth) per category come with
theirs. The tests' tolerances are built from these deviations (docs/workloads.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from sources import SOURCES, TRAJECTORIES

from sim.workload.empirical import spearman
from sim.workload.multi_agent import round_role
from sim.workload.observe import QUANTILES, observables, pooled, summary, team_observables
from sim.workload.params import load_params

HERE = Path(__file__).resolve().parent
BOOTSTRAP = 200
SEED = 20250101
#: observables kept per kind (and every per-category one of the coding agent)
KEEP = {
    "coding_agent": ("calls", "first_prompt", "completion", "growth", "tool_s"),
    "function_calling": (
        "calls", "user_turns", "calls_per_user_turn", "first_prompt", "completion",
        "delta:within", "delta:user",
    ),
    "human_in_loop": (
        "calls", "user_turns", "calls_per_user_turn", "first_prompt", "completion",
        "delta:within", "delta:user",
    ),
}  # fmt: skip
#: a category needs this many calls to get per-category fixtures
MIN_CATEGORY = 100


def _select(kind: str, obs: dict) -> dict:
    if kind == "multi_agent_team":
        return obs
    keep = {k: v for k, v in obs.items() if k in KEEP[kind]}
    if kind == "coding_agent":
        for k, v in obs.items():
            head = k.split(":")[0]
            if head in ("growth", "tool_s", "completion") and ":" in k:
                if len(pooled(v)) >= MIN_CATEGORY:
                    keep[k] = v
    return keep


def _bootstrap_both(per_traj: list[list], rng: np.random.Generator) -> tuple[dict, dict]:
    """Each quantile's standard deviation and its 95 % percentile interval ``[p2.5,
    p97.5]`` over the same resamples of trajectories."""
    n = len(per_traj)
    draws = []
    for _ in range(BOOTSTRAP):
        pick = rng.integers(0, n, n)
        vals = pooled([per_traj[i] for i in pick])
        if vals.size:
            draws.append(np.percentile(vals, QUANTILES))
    arr = np.asarray(draws)
    sd = np.std(arr, axis=0, ddof=1)
    lo, hi = np.percentile(arr, [2.5, 97.5], axis=0)
    names = [f"p{p}" for p in QUANTILES]
    return (
        {k: float(s) for k, s in zip(names, sd, strict=True)},
        {k: [float(a), float(b)] for k, a, b in zip(names, lo, hi, strict=True)},
    )


def _rho(pairs_per_traj: list[list], rng: np.random.Generator) -> dict[str, float]:
    flat = [p for t in pairs_per_traj for p in t]
    x = np.asarray(flat, dtype=np.float64)
    value = spearman(x[:, 0], x[:, 1])
    n = len(pairs_per_traj)
    draws = []
    for _ in range(BOOTSTRAP):
        pick = rng.integers(0, n, n)
        y = np.asarray([p for i in pick for p in pairs_per_traj[i]], dtype=np.float64)
        draws.append(spearman(y[:, 0], y[:, 1]))
    return {"value": value, "sd": float(np.std(draws, ddof=1)), "n": len(flat)}


def build_fixture(kind: str, data: Path) -> dict:
    trajs = TRAJECTORIES[kind](data)
    rng = np.random.default_rng(SEED)
    if kind == "multi_agent_team":
        fit = load_params(kind, HERE.parents[1] / "sim" / "workload" / "fitted" / f"{kind}.yaml")
        obs = team_observables(trajs, fit.branches, round_role)
        # one team run: resample its calls instead of its trajectories
        obs = {k: [[x] for x in v[0]] for k, v in obs.items()}
        unit = "calls (one team run)"
    else:
        obs = _select(kind, observables(trajs))
        unit = "trajectories"
    out = {
        "kind": kind,
        "source": SOURCES[kind][1],
        "trajectories": len(trajs),
        "bootstrap": {"resamples": BOOTSTRAP, "unit": unit, "seed": SEED},
        "observables": {},
    }
    for name, per in sorted(obs.items()):
        vals = pooled(per)
        sd, ci95 = _bootstrap_both(per, rng)
        out["observables"][name] = {"n": int(vals.size), **summary(vals), "sd": sd, "ci95": ci95}
    if kind == "coding_agent":
        pairs = {k: v for k, v in observables(trajs).items() if k.startswith("pair:")}
        out["rank_correlation"] = {
            k.split(":", 1)[1]: _rho(v, rng)
            for k, v in sorted(pairs.items())
            if len(pooled(v)) >= 2 * MIN_CATEGORY
        }
    return out


def write_fixture(kind: str, data: Path) -> None:
    fixture = build_fixture(kind, data)
    path = HERE / "fixtures" / f"{kind}.json"
    path.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
