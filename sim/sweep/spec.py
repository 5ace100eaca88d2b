"""Sweep files: a base scenario, a grid and/or a list of points, and replications.

A sweep file is YAML with one top-level ``sweep:`` mapping (``schema_version: 1``,
``name`` and ``description`` may sit beside it)::

    sweep:
      base: coding_agents_capacity.yaml      # relative to this file
      grid: {workload.arrival.concurrency: [4, 8], pause_policy.kind: [hold, recompute]}
      points: [{hardware.accelerator: h200-141gb}]
      replications: 2

Responsibility: validate the file (``file:line: field: message``), expand it into the
ordered list of points (the grid's product, each merged with every listed point; the grid
alone; or the points alone), each with its replications (replication i runs with seed
``s + i * stride``, ``s`` the point's ``seed`` or the base scenario's, ``stride`` 1 unless
two points' seeds would overlap: ``seed_stride``), and identify the sweep by a hash of
what it runs.

Invariant: points are in a fixed order (the grid's keys as written, each key's values as
written, the slowest key first; then the listed points in order) and each (point,
replication) has one seed, and two runs of points with different first seeds never share
a seed (``seed_stride``); ``sweep_sha256`` changes exactly when the expanded runs change
(the spec or the base scenario's resolved config).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from sim.config_model import ConfigModel
from sim.errors import ConfigError
from sim.sweep.kind import is_sweep_file  # noqa: F401  (its old home: sim.sweep.spec.is_sweep_file)
from sim.yamlio import load_yaml

#: a sweep expands to at most this many runs (points x replications)
MAX_RUNS = 100_000
#: replications of one point at most
MAX_REPLICATIONS = 1_000


class _Cfg(ConfigModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SweepSection(_Cfg):
    """What to run: the base scenario and the overrides of each point."""

    base: str = Field(min_length=1)  # a scenario file, relative to the sweep file
    grid: dict[str, list[Any]] = Field(default_factory=dict)  # dotted key -> values
    points: list[dict[str, Any]] = Field(default_factory=list)  # each {dotted key: value}
    replications: int = Field(1, ge=1, le=MAX_REPLICATIONS)  # seeds s, s+1, ... (seed_stride)


class SweepFile(_Cfg):
    """A sweep file (``kvsim sweep``)."""

    schema_version: Literal[1] = 1
    name: str | None = None  # default: the file's stem
    description: str = ""
    sweep: SweepSection


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: a point's overrides with one replication's seed."""

    point: int  # index of the point (0-based, in sweep order)
    replication: int  # 0-based
    seed: int
    overrides: dict[str, Any]  # the point's dotted overrides (without the seed)


@dataclass(frozen=True)
class Sweep:
    """A validated, expanded sweep file."""

    path: Path  # the sweep file, absolute
    name: str
    spec: SweepFile
    base_path: Path  # the base scenario, absolute
    points: list[dict[str, Any]]  # overrides per point
    keys: list[str]  # every swept key, in first-seen order

    @property
    def replications(self) -> int:
        return self.spec.sweep.replications

    def runs(self, base_seed: int) -> list[SweepRun]:
        """Every run, point by point, replications together; replication r of a point
        whose first seed is s runs ``s + r * seed_stride(first seeds)``."""
        firsts = [int(point.get("seed", base_seed)) for point in self.points]
        stride = seed_stride(firsts, self.replications)
        out = []
        for i, (point, seed0) in enumerate(zip(self.points, firsts, strict=True)):
            overrides = {k: v for k, v in point.items() if k != "seed"}
            for r in range(self.replications):
                out.append(SweepRun(i, r, seed0 + r * stride, overrides))
        return out


def seed_stride(first_seeds: list[int], replications: int) -> int:
    """How far apart a point's replication seeds are: 1 (seeds s, s+1, ...) unless two
    points' seed runs would overlap (first seeds that differ by less than
    ``replications``), then the width of the first seeds (max - min + 1). Every first
    seed lies within one width of the others, so ``s + r * width`` never gives two points
    with different first seeds the same seed (``seed: [1, 2]`` with 2 replications runs
    seeds 1, 3 and 2, 4, not 1, 2 and 2, 3: the same run twice)."""
    seeds = sorted(set(first_seeds))
    if all(b - a >= replications for a, b in itertools.pairwise(seeds)):
        return 1
    return seeds[-1] - seeds[0] + 1


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file and expand its points (the base is checked to exist,
    not loaded: ``check_sweep`` validates it with every point)."""
    path = Path(path)
    data, lines = load_yaml(path)
    if not isinstance(data, dict) or "sweep" not in data:
        raise ConfigError("a sweep file needs a top-level 'sweep:' mapping", location=f"{path}:1")
    try:
        spec = SweepFile.model_validate(data)
    except ValidationError as exc:
        raise _one_line(exc, path, lines) from None
    sec = spec.sweep
    base = (path.resolve().parent / sec.base).resolve()
    if not base.is_file():
        raise ConfigError(
            f"no such scenario file: {sec.base} (looked for {base})",
            location=location_in(path, lines, ("sweep", "base")),
            field="sweep.base",
        )
    points = _expand(sec, path, lines)
    keys = list(dict.fromkeys(k for p in points for k in p))
    return Sweep(path.resolve(), spec.name or path.stem, spec, base, points, keys)


def _expand(sec: SweepSection, path: Path, lines) -> list[dict[str, Any]]:
    for key, values in sec.grid.items():
        _check_key(key, path, lines, ("sweep", "grid", key))
        if not values:
            raise ConfigError(
                "a grid key needs at least one value",
                location=location_in(path, lines, ("sweep", "grid", key)),
                field=f"sweep.grid.{key}",
            )
    for i, point in enumerate(sec.points):
        for key in point:
            _check_key(key, path, lines, ("sweep", "points", i, key))
    n_grid = 1
    for values in sec.grid.values():
        n_grid *= len(values)
    n_points = max(1, len(sec.points)) * (n_grid if sec.grid else 1)
    if n_points * sec.replications > MAX_RUNS:
        raise ConfigError(
            f"the sweep expands to {n_points * sec.replications:,} runs (points x "
            f"replications); at most {MAX_RUNS:,}",
            location=location_in(path, lines, ("sweep",)),
            field="sweep",
        )
    grid = [dict(zip(sec.grid, combo, strict=True)) for combo in itertools.product(*sec.grid.values())]
    if sec.points:
        return [{**g, **p} for g in grid for p in sec.points]
    return grid  # the grid alone (an empty grid: one point, the base scenario as it is)


def _check_key(key: str, path: Path, lines, loc: tuple) -> None:
    if not key or any(not part for part in str(key).split(".")):
        raise ConfigError(
            f"{key!r} is not a dotted scenario key (e.g. workload.arrival.concurrency)",
            location=location_in(path, lines, loc),
            field=".".join(str(p) for p in loc),
        )


def location_in(path: Path, lines, loc: tuple) -> str:
    """``FILE:LINE`` of the YAML node at ``loc`` (just ``FILE`` when it has no line)."""
    from sim.yamlio import line_for

    line = line_for(lines, loc)
    return f"{path}:{line}" if line else str(path)


def _one_line(exc: ValidationError, path: Path, lines) -> ConfigError:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        parent = SweepSection if loc[:1] == ("sweep",) else SweepFile
        msg = f"unknown field; valid: {', '.join(sorted(parent.model_fields))}"
    elif err["type"] == "missing":
        msg = "required field is missing"
    n = len(exc.errors()) - 1
    more = f" (and {n} more problem{'s' if n > 1 else ''})" if n else ""
    field = ".".join(str(p) for p in loc) or "(top level)"
    return ConfigError(msg + more, location=location_in(path, lines, loc), field=field)


def point_label(point: dict[str, Any]) -> str:
    """``key=value, ...`` for messages (the base scenario as it is: ``(base)``)."""
    return ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in point.items()) or "(base)"


def sweep_sha256(sweep: Sweep, base_config: dict) -> str:
    """The hash that identifies what a sweep runs: its spec and its base's resolved config."""
    doc = {"sweep": sweep.spec.model_dump(mode="json"), "base": base_config}
    doc["sweep"].pop("description", None)  # prose: editing it changes no run
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def json_schema() -> dict:
    """JSON Schema of a sweep file (draft 2020-12)."""
    schema = SweepFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "kvsim sweep file"
    return schema
