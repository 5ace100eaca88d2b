"""Test helpers: run scenarios with invariants checked, compare summaries and tables."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sim.run import run_scenario

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / "workloads"
SKIP = {"wall_time_s", "exact", "engine_decisions", "versions", "kvsim_version", "check_invariants"}
# where a run came from, not what it did (two runs compared may differ in command or file)
SKIP |= {"command", "scenario_path", "config_sha256"}


def run(name: str, **overrides):
    """A shipped scenario with invariants checked after every decision."""
    overrides.setdefault("engine.check_invariants", True)
    return run_scenario(str(WORKLOADS / name), **overrides)


def flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def assert_close(a, b, rel: float = 1e-9, where: str = "") -> None:
    if isinstance(a, float) or isinstance(b, float):
        assert a is not None and b is not None, f"{where}: {a!r} != {b!r}"
        assert math.isclose(a, b, rel_tol=rel, abs_tol=1e-12), f"{where}: {a!r} != {b!r}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_same_summary(a: dict, b: dict, rel: float = 1e-9) -> None:
    fa, fb = flat(a), flat(b)
    assert set(fa) == set(fb)
    for key in fa:
        if key.split(".")[0] in SKIP:
            continue
        assert_close(fa[key], fb[key], rel, key)


def assert_same_frame(a, b, rel: float = 1e-9) -> None:
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for col in a.columns:
        x, y = a[col].to_numpy(), b[col].to_numpy()
        if x.dtype.kind == "f":
            assert np.allclose(x, y, rtol=rel, atol=1e-12, equal_nan=True), col
        else:
            assert (x == y).all(), col
