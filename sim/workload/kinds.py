"""The registry of workload kinds: name -> config model, trajectory count, driver.

Invariant: a kind is looked up by name at the moment it is used (never copied into a
table at import time), so a kind registered late is as usable as a shipped one; an unknown
name is a one-line ``UnknownNameError`` listing the registered kinds. The shipped kinds are
registered by ``sim.workload.builtin`` on the first look-up; drivers that dispatch on a kind (``mix``) import this module,
not the package, so the package's imports stay acyclic.

A kind's config model is a pydantic model whose ``kind`` field is ``Literal[name]`` (the
tag of the scenario's ``workload`` union); a name is registered with one config model
(registering it again with another is refused, as the allocator and scheduler registries
do), so the scenario schema (the shipped table ``sim.workload.kind_models``, and
``plugin_kinds`` there for the others) and the driver always agree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sim.errors import UnknownNameError
from sim.plugins import check_kind_tag, load_plugins
from sim.workload.shipped_kinds import WORKLOAD_MODELS

if TYPE_CHECKING:
    from sim.workload.context import WorkloadContext


@dataclass(frozen=True)
class WorkloadKind:
    """A registered workload: how many trajectories it starts and its driver."""

    name: str
    config: type
    count: Any  # config -> int
    driver: Any  # (config, WorkloadContext) -> SimPy generator


WORKLOADS: dict[str, WorkloadKind] = {}


def register_workload(kind: WorkloadKind) -> WorkloadKind:
    """Register ``kind``; its driver labels an unlabelled context with the kind's name
    and sets the context's ``kind`` (named when the driver disagrees with ``count``)."""
    _check_config(kind.name, kind.config)
    _check_driver(kind.name, kind.driver)
    driver = kind.driver

    def labelled(cfg, ctx: WorkloadContext):
        if not ctx.label:
            ctx.label = kind.name
        ctx.kind = kind.name
        return driver(cfg, ctx)

    labelled.__wrapped__ = driver  # type: ignore[attr-defined]  # the driver as registered
    kind = replace(kind, driver=labelled)
    WORKLOADS[kind.name] = kind
    return kind


def _check_config(name: str, config: type) -> None:
    """A config model tagged ``name``; the one ``name`` has if it is registered, and the
    table's class if ``name`` is a shipped kind (so a plug-in cannot take a shipped name
    before the shipped kinds load and leave the registry half-loaded)."""
    check_kind_tag("workload kind", name, config)
    old = WORKLOADS.get(name)
    if old is not None and _qualified(old.config) != _qualified(config):
        raise ValueError(
            f"workload kind {name!r} is already registered ({_qualified(old.config)}); "
            "register yours under another name"
        )
    if name in WORKLOAD_MODELS:
        shipped = "sim.workload.{}.{}".format(*WORKLOAD_MODELS[name])
        if _qualified(config) != shipped:
            raise ValueError(
                f"workload kind {name!r} is a shipped kind ({shipped}); "
                "register yours under another name"
            )


def _check_driver(name: str, driver: Any) -> None:
    """The driver ``name`` has if it is registered (the same function by name: a module
    reloaded), and one of ``sim.workload``'s own if ``name`` is a shipped kind (a plug-in
    reusing a shipped config model must not replace a shipped kind's driver)."""
    old = WORKLOADS.get(name)
    registered = getattr(old.driver, "__wrapped__", old.driver) if old is not None else None
    if registered is not None and _qualified(registered) != _qualified(driver):
        raise ValueError(
            f"workload kind {name!r} is already registered with the driver "
            f"{_qualified(registered)}; register yours under another name"
        )
    module = getattr(driver, "__module__", None) or ""
    if name in WORKLOAD_MODELS and not module.startswith("sim.workload."):
        raise ValueError(
            f"workload kind {name!r} is a shipped kind (its driver is sim.workload's); "
            "register yours under another name"
        )


def _qualified(cls: Any) -> str:
    return f"{getattr(cls, '__module__', None)}.{getattr(cls, '__qualname__', repr(cls))}"


def workload_kind(name: str) -> WorkloadKind:
    """The registered kind ``name`` (the shipped kinds load on the first look-up)."""
    load_plugins("workloads")
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownNameError("workload", name, list(WORKLOADS)) from None
