"""The regression suite file: cases, their runner inputs and the metrics they check.

Responsibility: parse and validate a suite YAML (pydantic v2, ``extra="forbid"``) into
frozen ``Suite``/``Case``/``MetricCheck`` objects; each case's ``inputs`` are validated by
the model its runner declares, so a bad input is reported where it is written.

Invariants: every error names ``file:line: field: message`` on one line; case names are
unique and safe as file names; a metric name that measures wall-clock time (``wall``,
``elapsed``, ``cpu_time``, ...) is refused, because wall-clock figures are never compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from sim.config_model import ConfigModel
from sim.errors import ConfigError, UnknownNameError
from sim.regress.runners.base import WALL_CLOCK_WORDS, wall_clock_word  # noqa: F401
from sim.yamlio import LineMap, format_validation_error, line_for, load_yaml

#: the suite format this code reads
SCHEMA_VERSION = 1

#: file looked up when ``--suite`` names a directory
SUITE_FILE_NAME = "suite.yaml"

CASE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


class ToleranceDefaults(ConfigModel):
    """Suite-wide tolerances used where a metric does not declare its own."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    abs_tol: float = Field(0.0, alias="abs", ge=0, allow_inf_nan=False)
    rel_tol: float = Field(0.0, alias="rel", ge=0, allow_inf_nan=False)
    two_sided: bool = False


class MetricCheck(ConfigModel):
    """How one metric is compared: allowed |now - baseline| = max(abs, rel x |baseline|)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    better: Literal["lower", "higher"]  # the good direction of a change
    abs_tol: float = Field(0.0, alias="abs", ge=0, allow_inf_nan=False)  # same unit as the metric
    rel_tol: float = Field(0.0, alias="rel", ge=0, allow_inf_nan=False)  # fraction of |baseline|
    two_sided: bool = False  # an improvement beyond tolerance fails too

    def allowed(self, baseline: float) -> float:
        """The largest |delta| that still passes against ``baseline``."""
        return max(self.abs_tol, self.rel_tol * abs(baseline))


class _CaseFile(ConfigModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    runner: str
    description: str = ""
    inputs: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, dict[str, Any]] = Field(min_length=1)


class _SuiteFile(ConfigModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1]
    description: str = ""
    defaults: ToleranceDefaults = ToleranceDefaults()
    cases: list[_CaseFile] = Field(min_length=1)


@dataclass(frozen=True)
class Case:
    """One validated case: a runner, its validated inputs, the metrics checked."""

    name: str
    runner: str
    description: str
    inputs: Any  # the runner's own pydantic model instance
    metrics: dict[str, MetricCheck]  # in the order the suite lists them
    location: str  # file:line of the case, for messages


@dataclass(frozen=True)
class Suite:
    """A validated suite file; relative input paths resolve against ``base_dir``."""

    path: Path
    base_dir: Path
    description: str
    cases: tuple[Case, ...]

    def select(self, names: list[str] | None) -> tuple[Case, ...]:
        """The cases named (all when ``names`` is empty), refusing unknown names."""
        if not names:
            return self.cases
        known = {c.name: c for c in self.cases}
        for n in names:
            if n not in known:
                raise UnknownNameError("case", n, list(known))
        return tuple(c for c in self.cases if c.name in names)


def load_suite(path: str | Path) -> Suite:
    """Read and validate a suite file (or ``DIR/suite.yaml``)."""
    path = Path(path)
    if path.is_dir():
        path = path / SUITE_FILE_NAME
    if not path.exists():
        raise ConfigError("suite file not found", location=str(path))
    data, lines = load_yaml(path)
    src = str(path)
    if not isinstance(data, dict):
        raise ConfigError("a suite must be a mapping with schema_version and cases", location=src)
    try:
        raw = _SuiteFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_first_error(exc, src, lines)) from None
    names: set[str] = set()
    cases = []
    for i, c in enumerate(raw.cases):
        where = _where(src, lines, ("cases", i))
        if not CASE_NAME.match(c.name):
            raise ConfigError(
                "must start with a letter or digit and use only letters, digits, '.', '_', '-'"
                f" (it names the baseline file); got {c.name!r}",
                location=_where(src, lines, ("cases", i, "name")),
                field=f"cases.{i}.name",
            )
        if c.name in names:
            raise ConfigError(
                f"duplicate case name {c.name!r}",
                location=_where(src, lines, ("cases", i, "name")),
                field=f"cases.{i}.name",
            )
        names.add(c.name)
        cases.append(
            Case(
                name=c.name,
                runner=c.runner,
                description=c.description,
                inputs=_runner_inputs(c, i, src, lines),
                metrics=_metrics(c, i, raw.defaults, src, lines),
                location=where,
            )
        )
    return Suite(path=path, base_dir=path.parent, description=raw.description, cases=tuple(cases))


def _runner_inputs(c: _CaseFile, i: int, src: str, lines: LineMap) -> Any:
    from sim.regress.runners import get_runner

    try:
        runner = get_runner(c.runner)
    except UnknownNameError as exc:
        raise ConfigError(
            str(exc), location=_where(src, lines, ("cases", i, "runner")), field=f"cases.{i}.runner"
        ) from None
    try:
        return runner.inputs_model.model_validate(c.inputs)
    except ValidationError as exc:
        raise ConfigError(_first_error(exc, src, lines, ("cases", i, "inputs"))) from None


def _metrics(
    c: _CaseFile, i: int, defaults: ToleranceDefaults, src: str, lines: LineMap
) -> dict[str, MetricCheck]:
    out = {}
    base = defaults.model_dump(by_alias=True)
    for name, spec in c.metrics.items():
        loc = ("cases", i, "metrics", name)
        field = f"cases.{i}.metrics.{name}"
        if not METRIC_NAME.match(name):
            raise ConfigError(
                "a metric name is a dotted path of letters, digits and '_' "
                "(for example ttft_s.p99)",
                location=_where(src, lines, loc),
                field=field,
            )
        word = wall_clock_word(name)
        if word is not None:
            raise ConfigError(
                f"wall-clock figures are never compared ({word!r} measures host time, which "
                "changes from machine to machine); remove this metric",
                location=_where(src, lines, loc),
                field=field,
            )
        try:
            out[name] = MetricCheck.model_validate({**base, **spec})
        except ValidationError as exc:
            raise ConfigError(_first_error(exc, src, lines, loc)) from None
    return out


def _where(src: str, lines: LineMap, loc: tuple) -> str:
    line = line_for(lines, loc)
    return f"{src}:{line}" if line else src


def _first_error(exc: ValidationError, src: str, lines: LineMap, prefix: tuple = ()) -> str:
    found = format_validation_error(exc, src, lines, prefix).splitlines()
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return found[0] + more
