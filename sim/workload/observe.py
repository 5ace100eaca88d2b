"""What a sample of trajectories looks like: the quantities the fits are checked on.

Responsibility: from trajectories in the ``kvsim workload sample --json`` format (a list of
``{"id", "turns": [...]}``), collect per trajectory the observables the fit tests and the
quantile plots compare, so a source converted to that format and a generated sample are
measured by the same code:

- ``calls`` (main-line calls), ``user_turns``, ``calls_per_user_turn``, ``first_prompt``;
- per call: ``completion``, ``tool_s`` (and ``completion:<category>``, ``tool_s:<category>``
  by the category of the tool the call issues);
- between consecutive calls of one branch: ``growth`` (what the next prompt adds beyond
  this prompt and reply, ``growth:<category>``), ``delta`` (the next prompt minus this
  one), split into ``delta:within`` (same user turn) and ``delta:user`` (a new user turn);
- ``pair:<category>``: (tool_s, growth) pairs, for rank correlations.

Invariant: pure functions of their input; an observable absent from a sample is absent
from the result (never a zero-length array standing for it).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

QUANTILES = (10, 50, 90, 99)


def trajectory_observables(traj: dict) -> dict[str, list]:
    """One trajectory's observables (lists; pairs as (tool_s, growth) tuples)."""
    out: dict[str, list] = defaultdict(list)
    calls = traj["turns"]
    if not calls:
        return out
    main = [c for c in calls if c["branch_id"] == 0]
    out["calls"].append(len(main))
    out["first_prompt"].append(calls[0]["prompt_tokens"])
    users = [c["user_turn"] for c in main]
    out["user_turns"].append(max(users) + 1)
    out["calls_per_user_turn"].extend(np.bincount(users).tolist())
    by_branch: dict[int, list[dict]] = defaultdict(list)
    for c in calls:
        by_branch[c["branch_id"]].append(c)
        cat = c["tool_category"]
        out["completion"].append(c["completion_tokens"])
        if cat is not None:
            out[f"completion:{cat}"].append(c["completion_tokens"])
            if c["tool_s"] is not None:
                out["tool_s"].append(c["tool_s"])
                out[f"tool_s:{cat}"].append(c["tool_s"])
    for line in by_branch.values():
        for a, b in zip(line, line[1:], strict=False):
            grow = b["prompt_tokens"] - a["prompt_tokens"] - a["completion_tokens"]
            delta = b["prompt_tokens"] - a["prompt_tokens"]
            out["growth"].append(grow)
            out["delta"].append(delta)
            out["delta:within" if a["user_turn"] == b["user_turn"] else "delta:user"].append(delta)
            cat = a["tool_category"]
            if cat is not None:
                out[f"growth:{cat}"].append(grow)
                if a["tool_s"] is not None:
                    out[f"pair:{cat}"].append((a["tool_s"], grow))
    return out


def observables(trajs: list[dict]) -> dict[str, list[list]]:
    """Per observable, one list per trajectory (so trajectories can be resampled)."""
    per = [trajectory_observables(t) for t in trajs]
    names = sorted({k for p in per for k in p})
    return {k: [p.get(k, []) for p in per] for k in names}


def pooled(per_traj: list[list]) -> np.ndarray:
    """An observable's values over all trajectories."""
    flat = [x for values in per_traj for x in values]
    return np.asarray(flat, dtype=np.float64)


def summary(values: np.ndarray) -> dict[str, float]:
    """``p10``, ``p50``, ``p90``, ``p99`` (linear interpolation) of non-empty ``values``."""
    q = np.percentile(values, QUANTILES)
    return {f"p{p}": float(v) for p, v in zip(QUANTILES, q, strict=True)}


def team_observables(trajs: list[dict], branches: int, role_of) -> dict[str, list[list]]:
    """A multi-agent team's observables by role: ``prompt:<role>`` and
    ``completion:<role>`` of the branch calls (round ``(branch_id - 1) // branches + 1``,
    its role ``role_of(round)``), one list per trajectory."""
    out: dict[str, list[list]] = defaultdict(lambda: [[] for _ in trajs])
    for i, traj in enumerate(trajs):
        for c in traj["turns"]:
            if c["branch_id"] == 0:
                continue
            role = role_of((c["branch_id"] - 1) // branches + 1)
            out[f"prompt:{role}"][i].append(c["prompt_tokens"])
            out[f"completion:{role}"][i].append(c["completion_tokens"])
    return dict(out)
