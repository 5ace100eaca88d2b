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
off the list before it runs). ``check_kind_tag`` is the registries' one check that a
kind's config model is tagged with the kind's name (``kind: Literal[name]``), so the
scenario's discriminated unions never map a tag to two models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args, get_origin

_PENDING: dict[str, list[Callable[[], object]]] = {}


def add_loader(registry: str, loader: Callable[[], object]) -> None:
    """Run ``loader`` before the next look-up in ``registry``."""
    _PENDING.setdefault(registry, []).append(loader)


def load_plugins(registry: str) -> None:
    """Run every loader of ``registry`` not run yet (cheap when there is none)."""
    pending = _PENDING.get(registry)
    while pending:
        pending.pop(0)()


def check_kind_tag(what: str, name: str, config: object) -> None:
    """Refuse ``config`` unless it is a pydantic model whose ``kind`` field is
    ``Literal[name]`` (one line: ``what`` names the registry, e.g. ``router kind``)."""
    fields = getattr(config, "model_fields", None) if isinstance(config, type) else None
    tag = fields.get("kind") if isinstance(fields, dict) else None
    annotation = getattr(tag, "annotation", None)
    if get_origin(annotation) is not Literal or get_args(annotation) != (name,):
        raise TypeError(
            f"{what} {name!r} needs a pydantic config model with a field "
            f"kind: Literal[{name!r}], got {config!r}"
        )
