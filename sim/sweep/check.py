"""Checking a sweep without running it: the base scenario with every point's overrides.

Responsibility: what ``kvsim validate`` does for a scenario (schema, trace files,
profiles, KV pool, allocator, pause-policy tiers), for the base scenario and for each
point of a sweep, so that a bad grid value is found before hours of runs.

Invariant: every problem is one ``KvsimError`` line; a problem of a point names the point
(``point 3 (workload.arrival.concurrency=0): ...``); the base scenario is loaded once
and each point's overrides are applied to it, as ``kvsim sweep`` will.
"""

from __future__ import annotations

from sim.errors import KvsimError
from sim.sweep.spec import Sweep, point_label


def check_scenario(source, overrides: dict) -> tuple[list[KvsimError], object]:
    """(every problem of a scenario with overrides, the resolved scenario when none): the
    checks a run makes before it starts (``sim.run.checks.preflight``)."""
    from sim.run.checks import preflight
    from sim.scenario import load_scenario

    try:
        return [], preflight(load_scenario(str(source), overrides))
    except KvsimError as exc:
        return list(getattr(exc, "problems", None) or [exc]), None


def check_sweep(sweep: Sweep) -> tuple[list[KvsimError], object]:
    """(every problem of the base and of each point, the base resolved when it is valid)."""
    problems, base = check_scenario(sweep.base_path, {})
    if problems:
        return problems, None
    for i, point in enumerate(sweep.points):
        found, _ = check_scenario(sweep.base_path, {k: v for k, v in point.items()})
        for exc in found:
            # an override's error is located at "--set KEY"; here the key is the point's
            text = str(exc).removeprefix("--set ")
            problems.append(KvsimError(f"point {i} ({point_label(point)}): {text}"))
    return problems, base
