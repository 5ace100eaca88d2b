"""Allocator kinds by name: ``make_allocator(kind, pool_bytes=..., kv_bytes_per_token=...)``.

Responsibility: turn a kind name and options into an allocator, with one-line errors
(unknown kind -> ``UnknownNameError`` listing the kinds; unknown or missing option ->
``ConfigError`` listing the kind's options). Kinds are registered as classes or as
``"module.path:ClassName"`` strings imported on first use, so a kind defined in an upper
layer (the ``radix`` prefix cache in ``sim.prefix``) is found by name without this layer
importing it.

Invariant: the options a kind accepts are exactly the keyword parameters of its class's
``__init__`` besides ``pool_bytes`` and ``kv_bytes_per_token``.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from sim.errors import ConfigError, UnknownNameError
from sim.memory.base import Allocator

_COMMON = ("pool_bytes", "kv_bytes_per_token")

#: kind name -> class, or "module:Class" imported lazily
_REGISTRY: dict[str, type[Allocator] | str] = {
    "static": "sim.memory.static:StaticAllocator",
    "contiguous": "sim.memory.contiguous:ContiguousAllocator",
    "buddy": "sim.memory.buddy:BuddyAllocator",
    "paged": "sim.memory.paged:PagedAllocator",
    # issue 4: the radix prefix cache composes PagedAllocator with sim.prefix's tree
    "radix": "sim.prefix.radix_allocator:RadixAllocator",
    "paged_hash": "sim.prefix.hash_allocator:HashPagedAllocator",  # issue 4: vLLM V1 hash cache
}


#: kind -> (option, {value: kind it selects}): ``paged`` with ``prefix_caching: hash`` is
#: vLLM V1's hashed block cache, ``prefix_caching: radix`` the radix tree (REFERENCES.md)
_SELECTORS: dict[str, tuple[str, dict[Any, str]]] = {
    "paged": (
        "prefix_caching",
        {None: "paged", "none": "paged", "hash": "paged_hash", "radix": "radix"},
    ),
}


def register_allocator(name: str, factory: type[Allocator] | str, *, replace: bool = False):
    """Register a kind: an ``Allocator`` subclass or a ``"module:Class"`` path."""
    if not isinstance(name, str) or not name:
        raise ValueError("an allocator kind needs a non-empty name")
    if name in _REGISTRY and not replace and not _same_entry(_REGISTRY[name], factory):
        raise ValueError(f"allocator kind {name!r} is already registered")
    if isinstance(factory, str):
        if ":" not in factory:
            raise ValueError(f"lazy allocator path must be 'module:Class', got {factory!r}")
    elif not (isinstance(factory, type) and issubclass(factory, Allocator)):
        raise TypeError(f"allocator kind {name!r} must be an Allocator subclass")
    _REGISTRY[name] = factory
    return factory


def _same_entry(old: type[Allocator] | str, new: type[Allocator] | str) -> bool:
    """Equal entries, or a lazy path and the class it names (a module registering itself)."""

    def path(e):
        return e if isinstance(e, str) else f"{e.__module__}:{e.__qualname__}"

    return old is new or path(old) == path(new)


def allocator_kinds() -> list[str]:
    """Registered kind names, sorted."""
    return sorted(_REGISTRY)


def allocator_class(kind: str) -> type[Allocator]:
    """The class of a kind, importing it if registered by path."""
    entry = _REGISTRY.get(kind)
    if entry is None:
        raise UnknownNameError("allocator kind", str(kind), list(_REGISTRY))
    if isinstance(entry, str):
        module_name, _, attr = entry.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                raise ConfigError(
                    f"allocator kind {kind!r} is registered at {entry} but that module is "
                    "not available in this installation",
                    field="kind",
                ) from None
            raise
        entry = getattr(module, attr)
        _REGISTRY[kind] = entry
    return entry


def allocator_options(kind: str) -> dict[str, Any]:
    """A kind's options and their defaults (``inspect.Parameter.empty`` = required)."""
    params = inspect.signature(allocator_class(kind).__init__).parameters
    return {
        n: p.default
        for n, p in params.items()
        if n != "self" and n not in _COMMON and p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def make_allocator(
    kind: str, *, pool_bytes: float, kv_bytes_per_token: float, **options: Any
) -> Allocator:
    """A new allocator of ``kind`` over ``pool_bytes`` (see each kind for its options)."""
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
    return cls(pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token, **options)


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
