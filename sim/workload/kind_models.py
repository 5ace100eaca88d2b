"""The table of workload kinds: each kind's config model declared without importing it.

Responsibility: ``WORKLOAD_MODELS`` (kind -> module of ``sim.workload`` and class of its
config model, in the order of the ``workload`` union: its JSON Schema, and the valid
kinds an error lists; declared in ``sim.workload.shipped_kinds``, which the registry
reads too) and ``workload_models(kinds)``, which imports only the modules of
the kinds asked for. The scenario model narrowed to a document's kind reads it
(``sim.scenario.schema.scenario_model_for``); so does the whole union
(``sim.workload.mix_config.Workload``).

Invariant: every kind of the table names a class whose ``kind`` field is that kind
(tested); ``mix`` is listed for its place in the union but loaded by
``sim.workload.mix_config`` alone (its components may be of any kind, so a document
naming ``mix`` is validated with the whole union). ``plugin_kinds()`` lists the kinds
registered (``sim.workload.kinds``) that the table does not: plug-ins, read at each call.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType

from pydantic import BaseModel

from sim.workload.kinds import WORKLOADS
from sim.workload.shipped_kinds import WORKLOAD_MODELS

__all__ = ["WORKLOAD_MODELS", "plugin_kinds", "workload_models"]



def _module(name: str) -> ModuleType:
    """A module of the table, imported now (each by name, so the import graph shows it)."""
    if name == "common_config":
        from sim.workload import common_config

        return common_config
    if name == "agent_config":
        from sim.workload import agent_config

        return agent_config
    if name == "vllm_requests":
        from sim.workload import vllm_requests

        return vllm_requests
    # mix_config imports this module: it builds the whole union itself
    raise ValueError(f"workload models of module {name!r} are not loaded here")


def workload_models(kinds: Iterable[str] | None = None) -> tuple[type[BaseModel], ...]:
    """The config models of ``kinds`` (default: every kind but ``mix``), in the table's
    order, importing only their modules."""
    wanted = set(WORKLOAD_MODELS if kinds is None else kinds) - {"mix"}
    return tuple(
        getattr(_module(module), name)
        for kind, (module, name) in WORKLOAD_MODELS.items()
        if kind in wanted
    )


def plugin_kinds() -> tuple[tuple[str, type], ...]:
    """(name, config model) of each registered kind the table does not list, in
    registration order: the kinds registered now (the ``workloads`` plug-in loaders are
    not run here; ``sim.plugins``)."""
    return tuple((n, k.config) for n, k in WORKLOADS.items() if n not in WORKLOAD_MODELS)
