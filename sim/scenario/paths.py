"""The files a scenario refers to (traces): found, made absolute, checked.

Responsibility: every ``path:`` entry of the ``workload`` section (the lengths trace, the
arrival trace) is relative to the scenario file's folder as written; here those entries
are listed, rewritten as absolute paths (so a resolved config runs the same from any
folder) and checked to exist, with the scenario line of each missing one.

Invariant: absolute paths are left as they are; nothing here reads a trace's content.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

#: the sections whose ``path`` entries name files (relative to the scenario's folder)
_FILE_SECTIONS = ("workload",)


def file_entries(config: dict) -> list[tuple[tuple, str]]:
    """``(location, path as written)`` of every ``path:`` string in the file sections."""
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
    return out


def absolute_paths(config: dict, base_dir: Path) -> dict:
    """A copy of ``config`` with every relative ``path:`` resolved against ``base_dir``."""
    out = copy.deepcopy(config)
    for loc, raw in file_entries(config):
        if Path(raw).is_absolute():
            continue
        node = out
        for part in loc[:-1]:
            node = node[part]
        node[loc[-1]] = str((Path(base_dir) / raw).resolve())
    return out


def missing_files(loaded) -> list[ConfigError]:
    """One error per referenced file that does not exist (``file:line: field: message``)."""
    config = loaded.scenario.model_dump(mode="json")
    errors = []
    for loc, raw in file_entries(config):
        path = Path(raw) if Path(raw).is_absolute() else Path(loaded.base_dir) / raw
        if not path.is_file():
            what = "not a file" if path.exists() else "no such file"
            errors.append(
                ConfigError(
                    f"{what}: {raw} (looked for {path})",
                    location=loaded.where(*loc),
                    field=".".join(str(p) for p in loc),
                )
            )
    return errors
