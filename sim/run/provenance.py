"""What makes a run reproducible: its resolved config, the config's hash, the command.

Responsibility: the resolved config of a run (the scenario with every default filled in
and every file it names absolute: trace paths and a calibration file, so
``config.resolved.yaml`` runs again to the same results from any folder), and
``config_sha256``, the hash that identifies it.

Invariant: ``config_sha256`` is the SHA-256 of the config's canonical JSON form
(``json.dumps(config, sort_keys=True, separators=(",", ":"))``) in which every file the
config names (``sim.scenario.paths.file_entries``: trace ``path:`` entries, a calibration
file) stands as ``sha256:<hex>`` of its content (a folder: of its files' relative names
and contents) instead of its path. So two configs that differ only in key order or
formatting hash the same; the same scenario in two checkouts (same files, different
absolute paths) hashes the same; an edited trace changes the hash; re-running
``config.resolved.yaml`` gives the same hash. A config that names no file hashes its plain
canonical form; an entry that names nothing readable keeps its path (the run refuses it).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from pathlib import Path

from sim.scenario.paths import absolute_paths, file_entries

_CHUNK_BYTES = 1 << 20  # read files in 1 MiB pieces: memory stays flat for any trace


def resolved_config(loaded) -> dict:
    """The scenario with every default filled in and file paths absolute."""
    return absolute_paths(loaded.scenario.model_dump(mode="json"), Path(loaded.base_dir))


def scenario_inputs(source: str | Path, overrides: dict | None = None) -> list[str]:
    """The files a scenario file reads: itself and every file its resolved config names
    (traces, fits, a calibration file; absolute): what ``kvsim run --force`` must not
    delete (``sim.run.output.check_out_dir``)."""
    from sim.scenario.load import load_scenario

    config = resolved_config(load_scenario(source, overrides))
    return [str(source), *(raw for _, raw in file_entries(config))]


@functools.lru_cache(maxsize=64)
def _file_sha256(path: str, size_bytes: int, mtime_ns: int) -> str:
    """SHA-256 of a file's bytes; keyed by (path, size, mtime) so a sweep's many configs
    naming one trace read it once, and an edited file is read again."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


def content_sha256(raw: str) -> str | None:
    """SHA-256 (hex) of the file ``raw`` names, or of a folder's files (their names relative
    to it, in sorted order, and contents); None when it names nothing readable."""
    path = Path(raw)
    try:
        if path.is_file():
            st = path.stat()
            return _file_sha256(str(path.resolve()), st.st_size, st.st_mtime_ns)
        if path.is_dir():
            h = hashlib.sha256()
            for f in sorted(p for p in path.rglob("*") if p.is_file()):
                st = f.stat()
                digest = _file_sha256(str(f.resolve()), st.st_size, st.st_mtime_ns)
                h.update(f"{f.relative_to(path).as_posix()}\0{digest}\n".encode())
            return h.hexdigest()
    except OSError:
        return None
    return None


def _content_addressed(config: dict) -> dict:
    """``config`` with every file entry replaced by ``sha256:<hex>`` of its content."""
    entries = file_entries(config)
    if not entries:
        return config
    out = copy.deepcopy(config)
    for loc, raw in entries:
        digest = content_sha256(raw)
        if digest is None:
            continue  # unreadable: keep the path (the run reports it as missing)
        node = out
        for part in loc[:-1]:
            node = node[part]
        node[loc[-1]] = f"sha256:{digest}"
    return out


def config_sha256(config: dict) -> str:
    """SHA-256 (hex) of ``config``'s canonical JSON form (sorted keys, no spaces), each
    file it names replaced by its content's hash (see the module docstring)."""
    text = json.dumps(
        _content_addressed(config), sort_keys=True, separators=(",", ":"), allow_nan=True
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def scenario_path(loaded) -> str | None:
    """The scenario file's absolute path (None for a scenario given as a dict)."""
    source = loaded.source
    if source.startswith("<") or not Path(source).is_file():
        return None
    return str(Path(source).resolve())
