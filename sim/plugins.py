"""Plug-ins loaded on first use: a lower layer's registry runs them before a look-up.

Responsibility: the loaders an upper layer adds (callables that import a module which
registers kinds: ``sim`` adds ``sim.prefix``, the ``radix`` and ``paged_hash`` allocator
kinds) and ``load_plugins()``, which a registry below them (``sim.memory.registry``) calls
before it looks a name up. So the lower layer never imports the upper one, every kind is
known whatever was imported first, and ``import sim`` stays cheap (no numpy, no
allocators) until a kind is looked up.

Invariant: each loader runs once, in the order added, before the first look-up after it
was added; a loader running may look names up (it is off the list before it runs).
"""

from __future__ import annotations

from collections.abc import Callable

_PENDING: list[Callable[[], object]] = []


def add_loader(loader: Callable[[], object]) -> None:
    """Run ``loader`` before the next registry look-up."""
    _PENDING.append(loader)


def load_plugins() -> None:
    """Run every loader not run yet (cheap when there is none)."""
    while _PENDING:
        _PENDING.pop(0)()
