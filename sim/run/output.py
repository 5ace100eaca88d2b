"""Writing a run folder: the resolved config, the summary and the record tables.

Invariant: files are written only under the given folder (created if needed), each
through a temporary file renamed over the old one, so a failure never leaves a
half-written file:
``config.resolved.yaml`` (the scenario with every default filled in; running it again
gives the same results), ``summary.json``, ``requests.parquet``, ``steps.parquet``,
``memory.parquet``, ``trajectories.parquet`` and ``pauses.parquet`` (one row per tool
pause).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import yaml

from sim.errors import KvsimError

#: section order of config.resolved.yaml (what a person reads first)
_ORDER = (
    "schema_version",
    "name",
    "description",
    "seed",
    "duration_s",
    "model",
    "hardware",
    "cost",
    "allocator",
    "scheduler",
    "pause_policy",
    "workload",
    "engine",
)


def resolved_yaml(config: dict, source: str) -> str:
    ordered = {k: config[k] for k in _ORDER if k in config}
    ordered.update({k: v for k, v in config.items() if k not in ordered})
    head = f"# kvsim: the scenario {source} with every default filled in\n"
    return head + yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False)


def write_run(result, out_dir: str | Path) -> Path:
    """Write ``result`` into ``out_dir``; returns the folder."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KvsimError(f"cannot create output folder {str(out)!r}: {exc.strerror}") from None
    source = result.resolved.loaded.source if result.resolved is not None else "<scenario>"
    _replace(
        out / "config.resolved.yaml",
        lambda p: p.write_text(resolved_yaml(result.config, source), encoding="utf-8"),
    )
    _replace(
        out / "summary.json",
        lambda p: p.write_text(json.dumps(result.summary, indent=2) + "\n", encoding="utf-8"),
    )
    for name in ("requests", "steps", "memory", "trajectories", "pauses"):
        frame = getattr(result, name, None)
        if frame is not None:
            _replace(out / f"{name}.parquet", lambda p, f=frame: f.to_parquet(p, index=False))
    return out


def _replace(target: Path, write: Callable[[Path], object]) -> None:
    """Write beside ``target`` and rename over it, so a failed write never leaves a
    half-written file or destroys the previous run's file."""
    tmp = target.with_name(f".{target.name}.partial")
    try:
        write(tmp)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise KvsimError(f"cannot write {str(target)!r}: {exc.strerror}") from None
