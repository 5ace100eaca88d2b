"""A ``claude_code`` workload's recorded sessions file, read without the driver.

Responsibility: find the sessions file (``sessions_path``: the config's ``path``, else the
shipped sample) and read it once per path and modification time (``recorded``).
``sim.workload.claude_code`` (the run) and ``sim.workload.trace_files`` (``kvsim
validate``) call these same functions.

Invariant: importing this module imports neither numpy nor the trajectory engine
(``sim.workload.agent``): ``kvsim validate`` of a Claude Code scenario reads the file
without them.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.prefix.session_trace import Session, load_sessions
from sim.workload.traces import DATA_DIR

#: the shipped sessions, relative to ``workloads/data``
SAMPLE = "claude_code/sessions.jsonl.gz"


def sessions_path(cfg: Any, ctx: Any | None) -> Path:
    """The sessions file: ``path`` (relative to the scenario), else the shipped sample."""
    if cfg.path is not None:
        return ctx.resolve(cfg.path) if ctx is not None else Path(cfg.path)
    p = DATA_DIR / SAMPLE
    if not p.is_file():
        field = None if ctx is None else f"{ctx.field_prefix}.path"
        raise ConfigError(
            f"the shipped Claude Code sessions are not in this install (looked for {p}); "
            "they ship in the source checkout's workloads/data: give a path instead",
            field=field,
        )
    return p


@functools.lru_cache(maxsize=4)
def _sessions(path: str, mtime_ns: int) -> tuple[Session, ...]:
    return tuple(load_sessions(path))


def recorded(cfg: Any, ctx: Any | None) -> tuple[Session, ...]:
    """The sessions a config replays."""
    p = sessions_path(cfg, ctx)
    try:
        mtime = p.stat().st_mtime_ns
    except OSError:
        raise ConfigError(
            "no such file or folder (Claude Code sessions)", location=str(p)
        ) from None
    return _sessions(str(p), mtime)
