"""Runners: strategy objects, registered by name, that turn a case's inputs into metrics.

Responsibility: the registry's look-ups (``get_runner``, ``runner_names``), which load the
built-in runners on first use; the protocol, ``register_runner`` and the helpers every
runner shares live in ``sim.regress.runners.base`` and are re-exported here. A new kind of
case plugs in by registering one more runner.

Invariants: a runner is deterministic (same inputs -> same metrics); it returns a flat
``{dotted name: number or None}`` mapping; a user error (missing file, a layer this
installation lacks) is a ``KvsimError`` with one line; heavy layers (memory, prefix,
engine) are imported inside ``run``, so loading a suite stays cheap.
"""

from __future__ import annotations

from sim.errors import UnknownNameError
from sim.regress.runners.base import (
    _RUNNERS,
    MetricValue,
    RunContext,
    Runner,
    flatten_metrics,
    missing_layer,
    register_runner,
)

__all__ = [
    "MetricValue",
    "RunContext",
    "Runner",
    "flatten_metrics",
    "get_runner",
    "missing_layer",
    "register_runner",
    "runner_names",
]


def get_runner(name: str) -> Runner:
    """A registered runner by name."""
    _load_builtins()
    try:
        return _RUNNERS[name]
    except KeyError:
        raise UnknownNameError("regress runner", name, list(_RUNNERS)) from None


def runner_names() -> list[str]:
    _load_builtins()
    return sorted(_RUNNERS)


def _load_builtins() -> None:
    # the built-in runner modules register themselves on import
    from sim.regress.runners import allocator, scenario, trace_replay  # noqa: F401
