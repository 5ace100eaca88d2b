"""Allocator kinds by name: ``make_allocator(kind, pool_bytes=..., kv_bytes_per_token=...)``.

Responsibility: turn a kind name and options into an allocator, with one-line errors
(unknown kind -> ``UnknownNameError`` listing the kinds; unknown or missing option ->
``ConfigError`` listing the kind's options). Every entry is an ``Allocator`` class. This
layer registers its own kinds (``static``, ``contiguous``, ``buddy``, ``paged``); a kind
built above it registers itself from the module that defines it, which imports this one:
``sim.prefix`` registers ``radix`` and ``paged_hash`` (the paged core composed with a prefix
index), and ``sim`` adds it as a plug-in loader (``sim.plugins``) that every look-up here
runs first. Nothing here imports an upper layer.

Invariant: the options a kind accepts are exactly the keyword-only parameters of its class's
``__init__`` besides ``pool_bytes`` and ``kv_bytes_per_token``.
"""

from __future__ import annotations

import inspect
from typing import Any

from sim.errors import ConfigError, UnknownNameError
from sim.memory.base import Allocator
from sim.memory.buddy import BuddyAllocator
from sim.memory.contiguous import ContiguousAllocator
from sim.memory.paged import PagedAllocator
from sim.memory.static import StaticAllocator
from sim.plugins import load_plugins

_COMMON = ("pool_bytes", "kv_bytes_per_token")
#: the largest KV pool kvsim accepts, in tokens per GPU (8 x B200 hold ~12 M tokens of a
#: Llama-3.1-8B; the allocators keep per-block tables, so the bound keeps memory bounded):
#: a run's (``sim.scenario.resolve``) and ``kvsim alloc-replay``'s (``sim.memory.replay``)
MAX_POOL_TOKENS = 2e8

#: kind name -> class
_REGISTRY: dict[str, type[Allocator]] = {
    "static": StaticAllocator,
    "contiguous": ContiguousAllocator,
    "buddy": BuddyAllocator,
    "paged": PagedAllocator,
}


#: kind -> (option, {value: kind it selects}): ``paged`` with ``prefix_caching: hash`` is
#: vLLM V1's hashed block cache, ``prefix_caching: radix`` the radix tree (REFERENCES.md);
#: both are registered by ``sim.prefix``
_SELECTORS: dict[str, tuple[str, dict[Any, str]]] = {
    "paged": (
        "prefix_caching",
        {None: "paged", "none": "paged", "hash": "paged_hash", "radix": "radix"},
    ),
}


def register_allocator(
    name: str, cls: type[Allocator], *, replace: bool = False
) -> type[Allocator]:
    """Register a kind: an ``Allocator`` subclass (a module registering itself again, e.g.
    on reload, replaces its own entry)."""
    if not isinstance(name, str) or not name:
        raise ValueError("an allocator kind needs a non-empty name")
    if not (isinstance(cls, type) and issubclass(cls, Allocator)):
        raise TypeError(f"allocator kind {name!r} must be an Allocator subclass, got {cls!r}")
    old = _REGISTRY.get(name)
    if old is not None and not replace and _qualified(old) != _qualified(cls):
        raise ValueError(f"allocator kind {name!r} is already registered ({_qualified(old)})")
    _REGISTRY[name] = cls
    return cls


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def allocator_kinds() -> list[str]:
    """Registered kind names, sorted."""
    load_plugins("allocators")
    return sorted(_REGISTRY)


def allocator_class(kind: str) -> type[Allocator]:
    """The class of a kind."""
    load_plugins("allocators")
    cls = _REGISTRY.get(kind)
    if cls is None:
        raise UnknownNameError("allocator kind", str(kind), list(_REGISTRY))
    return cls


def allocator_options(kind: str) -> dict[str, Any]:
    """A kind's options and their defaults (``inspect.Parameter.empty`` = required)."""
    params = inspect.signature(allocator_class(kind).__init__).parameters
    return {
        n: p.default
        for n, p in params.items()
        if n != "self" and n not in _COMMON and p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def make_allocator(
    kind: str, *, pool_bytes: float, kv_bytes_per_token: float, kv_groups: Any = None,
    **options: Any,
) -> Allocator:
    """A new allocator of ``kind`` over ``pool_bytes`` (see each kind for its options).

    ``kv_groups`` (``sim.sizing.group_demand.KVGroups``, None: every layer keeps every
    token) makes a hybrid model's sliding-window, chunked-local and state-space groups hold
    their own blocks beside the block table; ``kv_bytes_per_token`` is then the table's."""
    kind = _select(kind, options)
    cls = allocator_class(kind)
    valid = allocator_options(kind)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        names = ", ".join(sorted(valid)) or "none"
        raise ConfigError(f"unknown option of kind {kind!r}; valid: {names}", field=unknown[0])
    missing = [n for n, d in valid.items() if d is inspect.Parameter.empty and n not in options]
    if missing:
        raise ConfigError(f"required option of kind {kind!r} is missing", field=missing[0])
    if kv_groups is not None and not cls.counts_kv_groups:  # every layer for every token
        kv_groups, kv_bytes_per_token = None, kv_groups.all_bytes_per_token
    alloc = cls(pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token, **options)
    alloc.use_kv_groups(kv_groups)
    return alloc


def _select(kind: str, options: dict[str, Any]) -> str:
    """Resolve a selector option (``paged`` + ``prefix_caching``) to the kind it names."""
    if kind not in _SELECTORS or _SELECTORS[kind][0] not in options:
        return kind
    option, choices = _SELECTORS[kind]
    value = options.pop(option)
    if value not in choices:
        valid = ", ".join(str(v) for v in choices if v is not None)
        raise ConfigError(
            f"unknown {option} {value!r} for kind {kind!r}; valid: {valid}", field=option
        )
    return choices[value]
