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
off the list before it runs). A loader added again to its registry while that registry's
loaders run (by itself, or by a loader it runs: a loop, or a recursion through a look-up)
is refused in one line naming it (``KvsimError``), before it runs a second time; so is a
look-up whose loaders keep adding new ones past ``MAX_LOADERS_PER_LOOKUP``.
``check_kind_tag`` is the registries' one check that a kind's config model is tagged with
the kind's name (``kind: Literal[name]``), so the scenario's discriminated unions never map
a tag to two models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args, get_origin

from sim.errors import KvsimError

_PENDING: dict[str, list[Callable[[], object]]] = {}
#: registry -> the loaders run by the look-up now running them (by id; the loader kept so
#: its id is not reused), from the outermost ``load_plugins`` to its return
_RUNNING: dict[str, dict[int, Callable[[], object]]] = {}
#: loaders one look-up may run (the shipped registries have one or two): past it, loaders
#: that add new loaders (each a new object) are a loop the identity check cannot see
MAX_LOADERS_PER_LOOKUP = 1000


def add_loader(registry: str, loader: Callable[[], object]) -> None:
    """Run ``loader`` before the next look-up in ``registry``."""
    _PENDING.setdefault(registry, []).append(loader)


def load_plugins(registry: str) -> None:
    """Run every loader of ``registry`` not run yet (cheap when there is none); a loader
    that comes back while they run (added again) is refused in one line naming it."""
    pending = _PENDING.get(registry)
    if not pending:
        return
    ran = _RUNNING.get(registry)
    outermost = ran is None
    if ran is None:
        ran = _RUNNING[registry] = {}
    try:
        while pending:
            loader = pending.pop(0)
            if id(loader) in ran:
                raise KvsimError(
                    f"plug-in loader {_loader_name(loader)} of registry {registry!r} was "
                    "added again while the registry's loaders ran (by itself or a loader it "
                    "runs: a loop); add it once (sim.plugins.add_loader, docs/plugins.md)"
                )
            if len(ran) >= MAX_LOADERS_PER_LOOKUP:
                raise KvsimError(
                    f"plug-in loader {_loader_name(loader)} of registry {registry!r} would "
                    f"be loader {len(ran) + 1} run by one look-up: loaders keep adding "
                    f"loaders (at most {MAX_LOADERS_PER_LOOKUP}; docs/plugins.md)"
                )
            ran[id(loader)] = loader
            loader()
    finally:
        if outermost:
            del _RUNNING[registry]


def _loader_name(loader: Callable[[], object]) -> str:
    """``module.qualname`` of a loader (its repr when it has no name), quoted."""
    name = getattr(loader, "__qualname__", None)
    module = getattr(loader, "__module__", None)
    return repr(f"{module}.{name}" if name and module else repr(loader))


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
