"""The run layer: build -> run -> collect, and the run folder.

    from sim.run import run_scenario
    result = run_scenario("workloads/chat_poisson.yaml", seed=3)
    result.summary["ttft_s"]["p99"]; result.requests; result.write("runs/demo")

Invariant: the only wall-clock reading of kvsim is here (``wall_time_s``). Importing this
package is cheap: its names load their modules on first use (PEP 562), so a caller of
``sim.run.checks`` (``kvsim validate``) does not import the engine, SimPy or pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.run.provenance import config_sha256
    from sim.run.runner import RunResult, Simulation, build, collect, run_scenario

__all__ = ["RunResult", "Simulation", "build", "collect", "config_sha256", "run_scenario"]


def __getattr__(name: str) -> Any:
    if name == "config_sha256":
        from sim.run.provenance import config_sha256

        return config_sha256
    if name in __all__:
        from sim.run import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
