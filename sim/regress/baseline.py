"""Golden baselines: one JSON file per case, ``<baseline dir>/<case>.json``.

Responsibility: read, write and list baseline files. A file holds the case name, its
runner and the declared metrics' values in the suite's order, pretty-printed with one
metric per line so a reviewer reads a change in a diff.

Invariants: a baseline is read with ``json`` only (no code), checked for shape, and a bad
file is a one-line error naming it; writing the same values gives the same bytes, and an
unchanged file is not rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from sim.errors import ConfigError
from sim.regress.runners import MetricValue
from sim.yamlio import json_value

BASELINE_VERSION = 1


def baseline_path(baseline_dir: Path, case_name: str) -> Path:
    return Path(baseline_dir) / f"{case_name}.json"


def read_baseline(baseline_dir: Path, case_name: str) -> dict[str, MetricValue] | None:
    """The metrics recorded for ``case_name``; None when the file does not exist."""
    path = baseline_path(baseline_dir, case_name)
    if not path.exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read baseline: {exc}", location=str(path)) from None
    data = json_value(text, str(path), lines=True)  # syntax, digits, depth, a key twice
    metrics = data.get("metrics") if isinstance(data, dict) else None
    if not isinstance(metrics, dict):
        raise ConfigError("a baseline is an object with a 'metrics' object", location=str(path))
    for name, value in metrics.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ConfigError(
                f"must be a number or null, got {value!r}", location=str(path), field=name
            )
    return metrics


def render_baseline(case_name: str, runner: str, metrics: Mapping[str, MetricValue]) -> str:
    """The text of a baseline file (stable: same values, same bytes)."""
    doc = {
        "schema_version": BASELINE_VERSION,
        "case": case_name,
        "runner": runner,
        "metrics": dict(metrics),
    }
    return json.dumps(doc, indent=2) + "\n"


def write_baseline(
    baseline_dir: Path, case_name: str, runner: str, metrics: Mapping[str, MetricValue]
) -> bool:
    """Write the baseline of a case; return whether the file changed."""
    path = baseline_path(baseline_dir, case_name)
    text = render_baseline(case_name, runner, metrics)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def stale_baselines(baseline_dir: Path, case_names: set[str]) -> list[Path]:
    """Baseline files whose case the suite no longer has."""
    d = Path(baseline_dir)
    if not d.is_dir():
        return []
    return sorted(p for p in d.glob("*.json") if p.stem not in case_names)
