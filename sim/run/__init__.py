"""The run layer: build -> run -> collect, and the run folder.

    from sim.run import run_scenario
    result = run_scenario("workloads/chat_poisson.yaml", seed=3)
    result.summary["ttft_s"]["p99"]; result.requests; result.write("runs/demo")

Invariant: the only wall-clock reading of kvsim is here (``wall_time_s``).
"""

from sim.run.provenance import config_sha256
from sim.run.runner import RunResult, Simulation, build, collect, run_scenario

__all__ = ["RunResult", "Simulation", "build", "collect", "config_sha256", "run_scenario"]
