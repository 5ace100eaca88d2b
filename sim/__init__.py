"""kvsim: a discrete-event simulator of KV-cache memory on LLM accelerator nodes.

Invariant: importing ``sim`` is cheap: it never imports torch, numpy, pandas, pyarrow,
matplotlib, rich, pydantic, SimPy or the engine (tests/cli/test_startup_imports.py); the
entry points below load their layers lazily. It adds ``sim.prefix`` (which registers the
prefix-cache allocator kinds ``radix`` and ``paged_hash``) as a plug-in loader
(``sim.plugins``) that the allocator registry runs before its first look-up, so
``sim.memory.make_allocator`` knows every kind whatever is imported first.
"""

from __future__ import annotations

from sim import plugins as _plugins
from sim.version import __version__  # one source of truth (summary.json, pyproject)


def _load_prefix_kinds() -> None:
    import sim.prefix  # noqa: F401  (registers the radix and paged_hash allocator kinds)


_plugins.add_loader("allocators", _load_prefix_kinds)

__all__ = ["__version__", "find_capacity", "run_scenario", "run_sweep"]


def run_scenario(path_or_scenario, **overrides):
    """Run a scenario (a YAML path or a Scenario object) and return a ``RunResult``.

    Overrides use dotted keys as on the command line: ``seed=3`` or
    ``**{"allocator.kind": "static"}``.
    """
    from sim.run import run_scenario as _run

    return _run(path_or_scenario, **overrides)


def run_sweep(sweep_file, out, **options):
    """Run (or resume) a sweep file into ``out``; returns ``results.parquet`` as a
    DataFrame (``sim.sweep.run_sweep``: ``executor="local"|"dask"``, ``workers=N``)."""
    from sim.sweep import run_sweep as _sweep

    return _sweep(sweep_file, out, **options)


def find_capacity(scenario, slos, **options):
    """The largest load meeting every SLO (``["ttft_p99_s=2"]``), with a 95 % interval and
    F37's estimate beside it; a ``CapacityResult`` (``sim.sweep.find_capacity``)."""
    from sim.sweep import find_capacity as _find

    return _find(scenario, slos, **options)
