"""The registry of workload kinds: name -> config model, trajectory count, driver.

Invariant: a kind is looked up by name at the moment it is used (never copied into a
table at import time), so a kind registered late is as usable as a shipped one; an unknown
name is a one-line ``UnknownNameError`` listing the registered kinds. The shipped kinds are
registered by ``sim.workload.builtin`` on the first look-up; drivers that dispatch on a kind (``mix``) import this module,
not the package, so the package's imports stay acyclic.

A kind's config model is a pydantic model whose ``kind`` field is ``Literal[name]`` (the
tag of the scenario's ``workload`` union); a shipped kind's name (the table
``sim.workload.kind_models.WORKLOAD_MODELS``) takes only its shipped model, so the
scenario schema, which reads a shipped kind's model from that table, and the driver
always agree. ``plugin_kinds()`` lists the other registered kinds for the schema
(``sim.scenario.schema``): they are accepted from the moment they are registered.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from pydantic import BaseModel

from sim.errors import UnknownNameError
from sim.plugins import load_plugins
from sim.workload.kind_models import WORKLOAD_MODELS

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
    """Register ``kind``; its driver labels an unlabelled context with the kind's name."""
    _check_config(kind.name, kind.config)
    driver = kind.driver

    def labelled(cfg, ctx: WorkloadContext):
        if not ctx.label:
            ctx.label = kind.name
        return driver(cfg, ctx)

    kind = replace(kind, driver=labelled)
    WORKLOADS[kind.name] = kind
    return kind


def _check_config(name: str, config: type) -> None:
    """A config model tagged ``name``; a shipped name only with its shipped model."""
    tag = None
    if isinstance(config, type) and issubclass(config, BaseModel):
        tag = config.model_fields.get("kind")
    if (
        tag is None
        or get_origin(tag.annotation) is not Literal
        or get_args(tag.annotation) != (name,)
    ):
        raise TypeError(
            f"workload kind {name!r} needs a pydantic config model with a field "
            f"kind: Literal[{name!r}], got {config!r}"
        )
    shipped = WORKLOAD_MODELS.get(name)
    home = (config.__module__, config.__qualname__)
    if shipped is not None and home != (f"sim.workload.{shipped[0]}", shipped[1]):
        raise ValueError(
            f"workload kind {name!r} is shipped (sim.workload.{shipped[0]}.{shipped[1]}); "
            "register yours under another name"
        )


def plugin_kinds() -> tuple[tuple[str, type], ...]:
    """(name, config model) of each registered kind the shipped table does not list, in
    registration order: the kinds registered now (loaders not run; ``load_plugins``)."""
    return tuple((n, k.config) for n, k in WORKLOADS.items() if n not in WORKLOAD_MODELS)


def workload_kind(name: str) -> WorkloadKind:
    """The registered kind ``name`` (the shipped kinds load on the first look-up)."""
    load_plugins("workloads")
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownNameError("workload", name, list(WORKLOADS)) from None
