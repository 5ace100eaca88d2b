"""Many runs: sweeps, replications and capacity searches, on a local pool or a Dask cluster.

    from sim.sweep import run_sweep, find_capacity
    table = run_sweep("workloads/coding_agents_sweep.yaml", "runs/sweep", workers=2)
    res = find_capacity("workloads/coding_agents_capacity.yaml", ["ttft_p99_s=2"])
    res.capacity, res.analytic_estimate, res.gap, res.points_frame()

Layer: above ``sim/run`` (every run goes through ``sim.run.run_scenario``), below
``sim/cli``. Executors (``sim.sweep.executor``) are one interface over this process, a
``ProcessPoolExecutor`` and Dask, so a caller (``kvsim compare``, a notebook) can run any
list of tasks on them.

Invariant: every run is identified by its resolved config's ``config_sha256``;
replication i of anything runs with seed ``s + i``. Importing this package is cheap: each
name loads its module on first use (PEP 562), so ``sim.sweep.kind.is_sweep_file`` (``kvsim
validate``) does not import the engine or pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.sweep.capacity import (
        CapacityComparison,
        CapacityResult,
        find_capacities,
        find_capacity,
    )
    from sim.sweep.executor import Executor, WorkerLost, make_executor
    from sim.sweep.kind import is_sweep_file
    from sim.sweep.replicate import replication_summary, run_replications
    from sim.sweep.runner import run_sweep
    from sim.sweep.slo import SLO, parse_slo
    from sim.sweep.spec import Sweep, load_sweep
    from sim.sweep.stats import ci95, paired_difference

__all__ = [
    "SLO",
    "CapacityComparison",
    "CapacityResult",
    "Executor",
    "Sweep",
    "WorkerLost",
    "ci95",
    "find_capacities",
    "find_capacity",
    "is_sweep_file",
    "load_sweep",
    "make_executor",
    "paired_difference",
    "parse_slo",
    "replication_summary",
    "run_replications",
    "run_sweep",
]

#: each public name -> the module of this package that defines it
_HOME = {
    "SLO": "slo", "parse_slo": "slo",
    "CapacityComparison": "capacity", "CapacityResult": "capacity",
    "find_capacities": "capacity", "find_capacity": "capacity",
    "Executor": "executor", "WorkerLost": "executor", "make_executor": "executor",
    "replication_summary": "replicate", "run_replications": "replicate",
    "run_sweep": "runner",
    "Sweep": "spec", "is_sweep_file": "kind", "load_sweep": "spec",
    "ci95": "stats", "paired_difference": "stats",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"sim.sweep.{home}"), name)
