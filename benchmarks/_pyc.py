"""Byte-code for the benchmarks' child processes, as an installed kvsim has it.

pip writes every module's ``.pyc`` at install, and a checkout's first import writes its
``__pycache__``; with ``PYTHONDONTWRITEBYTECODE=1`` in the environment (these machines set
it) and no cache, every child process compiles ~130 of kvsim's modules from source again
(about 0.5 s of a ``kvsim run``, a third of ``kvsim validate``), which no user pays twice.
``tree_env`` gives a child its tree's own byte-code folder under ``cache``
(``PYTHONPYCACHEPREFIX``: two checkouts' modules share names, not sources) and drops
``PYTHONDONTWRITEBYTECODE``, so the first run of a tree fills the folder and later ones
read it; a benchmark runs each tree once untimed first.

Invariant: the environment returned differs from ``os.environ`` only in ``PYTHONPATH``
(when a tree is given), ``PYTHONPYCACHEPREFIX``, ``PYTHONDONTWRITEBYTECODE`` (removed) and
what the caller adds.
"""

from __future__ import annotations

import os
from pathlib import Path


def pyc_folder(cache: Path, tree: Path) -> Path:
    """``tree``'s own byte-code folder under ``cache``."""
    return cache / str(tree.resolve()).strip("/").replace("/", "_")


def tree_env(tree: Path, cache: Path, *, on_path: bool = True, **extra: str) -> dict[str, str]:
    """The environment of a child process running ``tree``'s kvsim with its byte-code
    cached under ``cache``; ``on_path``: put ``tree`` first on ``PYTHONPATH``; ``extra``
    variables are added last."""
    env = dict(os.environ)
    if on_path:
        env["PYTHONPATH"] = str(tree)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pyc_folder(cache, tree))
    env.update(extra)
    return env
