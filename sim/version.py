"""The kvsim version: one string, the single source of truth.

Invariant: this module imports nothing, so any layer may read it (``summary.json``'s
``kvsim_version``, the header of ``config.resolved.yaml``, ``kvsim --version`` through the
installed distribution); ``pyproject.toml`` reads it statically (``attr``) at build time.
CHANGELOG.md lists, by version, every change that moves results.
"""

__version__ = "0.1.0"
