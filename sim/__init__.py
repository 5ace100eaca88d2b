"""kvsim: a discrete-event simulator of KV-cache memory on LLM accelerator nodes.

Invariant: importing ``sim`` is cheap and never imports torch, SimPy-heavy engine code or
plotting; the entry points below load their layers lazily.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "run_scenario"]


def run_scenario(path_or_scenario, **overrides):
    """Run a scenario (a YAML path or a Scenario object) and return a ``RunResult``.

    Overrides use dotted keys as on the command line: ``seed=3`` or
    ``**{"allocator.kind": "static"}``.
    """
    from sim.run import run_scenario as _run

    return _run(path_or_scenario, **overrides)
