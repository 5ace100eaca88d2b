"""Plug-ins loaded on first use: a lower layer's registry runs them before a look-up.

Responsibility: the loaders an upper layer adds, by registry (callables that import a
module which registers kinds: ``sim`` adds ``sim.prefix`` to ``"allocators"``, the
``radix`` and ``paged_hash`` kinds; ``sim.workload`` adds ``sim.workload.builtin`` to
``"workloads"``), and ``load_plugins(registry)``, which that registry calls before it looks
a name up. So a lower layer never imports an upper one, every kind is known whatever was
imported first, and ``import sim`` stays cheap (no numpy, no allocators, no drivers)
until a kind is looked up.

Invariant: each loader runs once, in the order added to its registry, before the first
look-up in that registry after it was added; a loader running may look names up (it is
off the list before it runs).
"""

from __future__ import annotations

from collections.abc import Callable

_PENDING: dict[str, list[Callable[[], object]]] = {}


def add_loader(registry: str, loader: Callable[[], object]) -> None:
    """Run ``loader`` before the next look-up in ``registry``."""
    _PENDING.setdefault(registry, []).append(loader)


def load_plugins(registry: str) -> None:
    """Run every loader of ``registry`` not run yet (cheap when there is none)."""
    pending = _PENDING.get(registry)
    while pending:
        pending.pop(0)()
