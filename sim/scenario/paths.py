"""The files a scenario refers to (traces, a calibration file): found, made absolute, checked.

Responsibility: every ``path:`` entry of the ``workload`` section (the lengths trace, the
arrival trace) and ``cost.calibration`` when it names a file rather than a shipped
calibration are relative to the scenario file's folder as written; here those entries are
listed, rewritten as absolute paths (so a resolved config runs the same from any folder)
and checked to exist, with the scenario line of each missing one.

Invariant: absolute paths are left as they are; nothing here reads a file's content.
"""

from __future__ import annotations

import copy
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

#: the sections whose ``path`` entries name files (relative to the scenario's folder)
_FILE_SECTIONS = ("workload",)
#: where a scenario names its calibration (a shipped name, or a file)
CALIBRATION = ("cost", "calibration")


def names_a_file(calibration: str) -> bool:
    """Whether ``cost.calibration`` names a file rather than a calibration by name (the
    rule ``sim.cost.calibration.load_calibration`` applies: a YAML suffix or a folder)."""
    return calibration.endswith((".yaml", ".yml")) or "/" in calibration or os.sep in calibration


def file_entries(config: dict) -> list[tuple[tuple, str]]:
    """``(location, path as written)`` of every ``path:`` string in the file sections, and
    of ``cost.calibration`` when it names a file."""
    out: list[tuple[tuple, str]] = []

    def walk(node: Any, loc: tuple) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "path" and isinstance(value, str):
                    out.append(((*loc, key), value))
                else:
                    walk(value, (*loc, key))
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, (*loc, i))

    for section in _FILE_SECTIONS:
        walk(config.get(section), (section,))
    calibration = (config.get("cost") or {}).get("calibration")
    if isinstance(calibration, str) and names_a_file(calibration):
        out.append((CALIBRATION, calibration))
    return out


def absolute(raw: str, base_dir: Path) -> str:
    """``raw`` as written, resolved against the scenario's folder when relative."""
    return raw if Path(raw).is_absolute() else str((Path(base_dir) / raw).resolve())


def absolute_paths(config: dict, base_dir: Path) -> dict:
    """A copy of ``config`` with every relative file entry resolved against ``base_dir``."""
    out = copy.deepcopy(config)
    for loc, raw in file_entries(config):
        node = out
        for part in loc[:-1]:
            node = node[part]
        node[loc[-1]] = absolute(raw, base_dir)
    return out


def absolute_calibration(loaded):
    """``loaded`` with a relative ``cost.calibration`` file made absolute, so that the cost
    model, which reads the file the scenario names, reads the same one from any folder."""
    cost = loaded.scenario.cost
    raw = cost.calibration
    if raw is None or not names_a_file(raw) or Path(raw).is_absolute():
        return loaded
    cost = cost.model_copy(update={"calibration": absolute(raw, loaded.base_dir)})
    return replace(loaded, scenario=loaded.scenario.model_copy(update={"cost": cost}))


def missing_file(loaded, loc: tuple, raw: str) -> ConfigError | None:
    """The error for a file entry that does not name a file (None when it does)."""
    path = Path(raw) if Path(raw).is_absolute() else Path(loaded.base_dir) / raw
    if path.is_file():
        return None
    what = "not a file" if path.exists() else "no such file"
    return ConfigError(
        f"{what}: {raw} (looked for {path})",
        location=loaded.where(*loc),
        field=".".join(str(p) for p in loc),
    )


def missing_files(loaded) -> list[ConfigError]:
    """One error per referenced file that does not exist (``file:line: field: message``)."""
    config = loaded.scenario.model_dump(mode="json")
    found = (missing_file(loaded, loc, raw) for loc, raw in file_entries(config))
    return [err for err in found if err is not None]
