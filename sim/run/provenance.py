"""What makes a run reproducible: its resolved config, the config's hash, the command.

Responsibility: the resolved config of a run (the scenario with every default filled in
and every file it names absolute: trace paths and a calibration file, so
``config.resolved.yaml`` runs again to the same results from any folder), and
``config_sha256``, the hash that identifies it.

Invariant: ``config_sha256`` is the SHA-256 of the config's canonical JSON form
(``json.dumps(config, sort_keys=True, separators=(",", ":"))``), so two configs that
differ only in key order or formatting hash the same; re-running ``config.resolved.yaml``
gives the same hash.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from sim.scenario.paths import absolute_paths


def resolved_config(loaded) -> dict:
    """The scenario with every default filled in and file paths absolute."""
    return absolute_paths(loaded.scenario.model_dump(mode="json"), Path(loaded.base_dir))


def config_sha256(config: dict) -> str:
    """SHA-256 (hex) of ``config``'s canonical JSON form (sorted keys, no spaces)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def scenario_path(loaded) -> str | None:
    """The scenario file's absolute path (None for a scenario given as a dict)."""
    source = loaded.source
    if source.startswith("<") or not Path(source).is_file():
        return None
    return str(Path(source).resolve())
