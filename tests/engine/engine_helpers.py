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
#: nested keys left out too (none: the share of step time a calibration does not measure,
#: accuracy.not_measured, sums every step's own terms since issue 25, so it is compared)
SKIP_PREFIXES: tuple[str, ...] = ()


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
        if key.split(".")[0] in SKIP or key.startswith(SKIP_PREFIXES):
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


def one_request_doc(model: str, prompt: int, output: int, block_size: int = 16) -> dict:
    """One request of ``prompt`` + ``output`` tokens on one H200 with a 40 GB paged pool:
    the scenario the per-model peak tests run (a hybrid model's run peak against plan)."""
    return {
        "schema_version": 1,
        "name": "one_request",
        "seed": 0,
        "model": model,
        "hardware": {"accelerator": "h200-141gb", "tp": 1, "kv_pool_bytes_per_gpu": 40e9},
        "allocator": {"kind": "paged", "block_size": block_size},
        "scheduler": {"kind": "vllm_v1"},
        "workload": {"kind": "requests", "requests": [
            {"count": 1, "at_s": 0.0, "prompt_tokens": prompt, "output_tokens": output}]},
    }  # fmt: skip
