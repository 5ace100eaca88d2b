"""Writing a run folder: the resolved config, the summary and the record tables.

Invariant: files are written only under the given folder (created if needed):
``config.resolved.yaml`` (the scenario with every default filled in; running it again
gives the same results), ``summary.json``, ``requests.parquet``, ``steps.parquet``,
``memory.parquet``, ``trajectories.parquet`` and ``pauses.parquet`` (one row per tool
pause).
"""

from __future__ import annotations

import json
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
    (out / "config.resolved.yaml").write_text(
        resolved_yaml(result.config, source), encoding="utf-8"
    )
    (out / "summary.json").write_text(json.dumps(result.summary, indent=2) + "\n", encoding="utf-8")
    for name in ("requests", "steps", "memory", "trajectories", "pauses"):
        frame = getattr(result, name, None)
        if frame is not None:
            frame.to_parquet(out / f"{name}.parquet", index=False)
    return out
