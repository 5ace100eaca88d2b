"""The ``scenario`` runner: one engine run of a scenario YAML, its summary as metrics.

Responsibility: call ``sim.run_scenario(path, **overrides)`` and flatten the run's summary
(``ttft_s.p99``, ``preemptions``, ...). The engine is imported only when a case runs, so a
suite loads on an installation without it and the case fails with a clear message.

Invariant: wall-clock figures of the summary are dropped here, so they can never reach a
baseline; everything else the summary holds is offered to the suite.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from sim.config_model import ConfigModel
from sim.errors import KvsimError
from sim.regress.runners.base import (
    MetricValue,
    RunContext,
    flatten_metrics,
    missing_layer,
    register_runner,
    wall_clock_word,
)


class ScenarioInputs(ConfigModel):
    """A scenario file and the dotted overrides applied to it (as ``--set`` would)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scenario: str = Field(min_length=1)  # path, relative to the suite file
    overrides: dict[str, Any] = Field(default_factory=dict)  # e.g. {"seed": 3}


class ScenarioRunner:
    name: ClassVar[str] = "scenario"
    inputs_model: ClassVar[type[BaseModel]] = ScenarioInputs

    def run(self, inputs: ScenarioInputs, ctx: RunContext) -> dict[str, MetricValue]:
        path = ctx.resolve(inputs.scenario)
        if not path.exists():
            raise KvsimError(f"{path}: scenario file not found")
        run_scenario = _engine_entry()
        result = run_scenario(str(path), **inputs.overrides)
        summary = getattr(result, "summary", None)
        if callable(summary):
            summary = summary()
        if not isinstance(summary, dict):
            raise KvsimError(f"{path}: the run returned no summary dict")
        return {k: v for k, v in flatten_metrics(summary).items() if wall_clock_word(k) is None}


def _engine_entry():
    try:
        from sim.run import run_scenario
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("sim"):
            raise
        raise missing_layer("scenario", "the engine (sim.run)", exc) from None
    return run_scenario


register_runner(ScenarioRunner())
