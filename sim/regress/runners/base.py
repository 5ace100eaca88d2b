"""What every regress runner shares: the protocol, the registry's table, the helpers.

Responsibility: the runner protocol, ``register_runner`` and the table it fills, and the
helpers every runner shares (the run context, flattening a summary into dotted metric
names, the wall-clock words no baseline may hold). The built-in runners import this
module, never the package, so ``sim.regress.runners`` (which loads them) stays acyclic.

Invariants: a runner is deterministic (same inputs -> same metrics); it returns a flat
``{dotted name: number or None}`` mapping; a user error (missing file, a layer this
installation lacks) is a ``KvsimError`` with one line; heavy layers (memory, prefix,
engine) are imported inside ``run``, so loading a suite stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel

from sim.errors import KvsimError

#: a metric value: a number, or None where the quantity is undefined (e.g. phi_ext, no free)
MetricValue = float | int | None


@dataclass(frozen=True)
class RunContext:
    """What a runner may know besides its inputs."""

    base_dir: Path  # relative paths in inputs resolve against the suite file's folder

    def resolve(self, path: str | Path) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.base_dir / p


class Runner(Protocol):
    """One kind of case."""

    name: ClassVar[str]
    inputs_model: ClassVar[type[BaseModel]]

    def run(self, inputs: Any, ctx: RunContext) -> dict[str, MetricValue]:
        """Run the case; return every metric it can report, by dotted name."""
        ...


#: parts of a metric name that mean host time, not simulated time
WALL_CLOCK_WORDS = ("wall", "elapsed", "cpu_time", "host_time", "runtime", "duration_real")


_RUNNERS: dict[str, Runner] = {}


def register_runner(runner: Runner, *, replace: bool = False) -> Runner:
    """Make ``runner`` available to suites under ``runner.name``."""
    if runner.name in _RUNNERS and not replace:
        raise ValueError(f"regress runner {runner.name!r} is already registered")
    _RUNNERS[runner.name] = runner
    return runner


def flatten_metrics(summary: Mapping[str, Any], prefix: str = "") -> dict[str, MetricValue]:
    """``{"ttft_s": {"p99": 0.2}}`` -> ``{"ttft_s.p99": 0.2}``; numbers and None only.

    Strings, lists and booleans are not metrics and are left out.
    """
    out: dict[str, MetricValue] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_metrics(value, name + "."))
        elif value is None:
            out[name] = None
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int | float) or _is_numpy_number(value):
            out[name] = _plain(value)
    return out


def _is_numpy_number(value: Any) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "item")


def _plain(value: Any) -> MetricValue:
    return value.item() if _is_numpy_number(value) else value


def missing_layer(what: str, module: str, exc: ModuleNotFoundError) -> KvsimError:
    """The error for a runner whose layer is not in this installation (yet)."""
    return KvsimError(
        f"the {what} runner needs {module}, which this kvsim installation does not provide "
        f"(import failed: {exc.name}); remove the case or update kvsim"
    )


def wall_clock_word(metric: str) -> str | None:
    """The wall-clock word found in ``metric`` (any dotted part), or None."""
    for part in metric.lower().split("."):
        for word in WALL_CLOCK_WORDS:
            if word in part:
                return word
    return None
