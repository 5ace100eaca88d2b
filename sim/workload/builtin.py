"""The shipped workload kinds, registered on import (``sim.workload.kinds``).

Responsibility: register every shipped kind by name with its config model, trajectory
count and driver. ``sim.workload`` adds this module as a plug-in loader (``sim.plugins``)
that ``workload_kind`` runs before its first look-up, so importing a config model or a
distribution of this layer (the scenario schema does) does not import every driver; and
the drivers and counts here are ``shipped`` references, each of which imports its module
on its first call, so a run imports its own kind's driver and no other's (a chat run
does not import the agent kinds', mix's or mooncake's modules: ~50 ms of a process's
start, docs/performance.md; ``sim.workload.vllm_requests`` holds a config model as well,
which the scenario schema imports anyway).

Invariant: every kind is registered once, with its config model, trajectory count and
driver; a reference is the function it names once called (``shipped(m, f)(*a)`` is
``m.f(*a)``), and it carries that function's ``__module__`` and ``__qualname__``, so the
registry's checks see the same driver as the function itself; the tool-time registry
(``sim.workload.hints``) imports every driver's module before its first look-up (a
plug-in loader), so what it lists never depends on which drivers a process called.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from sim.plugins import add_loader
from sim.workload.agent_config import (
    AgentTraceWorkload,
    AgentWorkload,
    ClaudeCodeWorkload,
    CodingAgentWorkload,
    FunctionCallingWorkload,
    HumanInLoopWorkload,
    InteractiveCodingAgentWorkload,
    MultiAgentTeamWorkload,
    TreeSearchWorkload,
)
from sim.workload.common_config import ChatWorkload, MooncakeWorkload, RequestsWorkload
from sim.workload.kinds import WorkloadKind, register_workload
from sim.workload.mix_config import MixWorkload
from sim.workload.vllm_requests import VllmRequestsWorkload

#: each shipped driver's module, imported by its literal name (so the import graph that
#: tests/test_layers.py and tests/test_import_cycles.py check sees every edge)
_MODULES: dict[str, Callable[[], ModuleType]] = {
    "agent": lambda: importlib.import_module("sim.workload.agent"),
    "agent_trace": lambda: importlib.import_module("sim.workload.agent_trace"),
    "chat": lambda: importlib.import_module("sim.workload.chat"),
    "claude_code": lambda: importlib.import_module("sim.workload.claude_code"),
    "coding_agent": lambda: importlib.import_module("sim.workload.coding_agent"),
    "function_calling": lambda: importlib.import_module("sim.workload.function_calling"),
    "human_in_loop": lambda: importlib.import_module("sim.workload.human_in_loop"),
    "interactive": lambda: importlib.import_module("sim.workload.interactive"),
    "mix": lambda: importlib.import_module("sim.workload.mix"),
    "mooncake": lambda: importlib.import_module("sim.workload.mooncake"),
    "multi_agent": lambda: importlib.import_module("sim.workload.multi_agent"),
    "tree_search": lambda: importlib.import_module("sim.workload.tree_search"),
    "vllm_requests": lambda: importlib.import_module("sim.workload.vllm_requests"),
}


class shipped:  # noqa: N801  (read as a function: shipped("chat", "chat_driver"))
    """``sim.workload.<module>.<name>``, imported on the first call."""

    def __init__(self, module: str, name: str) -> None:
        if module not in _MODULES:
            raise ValueError(f"no shipped workload module {module!r}: {sorted(_MODULES)}")
        self.__module__ = f"sim.workload.{module}"
        self.__qualname__ = self.__name__ = name
        self._module = module
        self._fn: Any = None

    def __call__(self, *args: Any) -> Any:
        fn = self._fn
        if fn is None:
            fn = self._fn = getattr(_MODULES[self._module](), self.__name__)
        return fn(*args)

    def __repr__(self) -> str:
        return f"<shipped {self.__module__}.{self.__qualname__}>"


def _requests(cfg) -> int:
    return cfg.num_requests


def _trajectories(cfg) -> int:
    return cfg.num_trajectories


#: name, config model, trajectory count (a function, or the shipped module's), the
#: driver's module and name (docs/workloads.md)
_KINDS: tuple[tuple[str, type, Any, str, str], ...] = (
    ("chat", ChatWorkload, _requests, "chat", "chat_driver"),
    ("agent", AgentWorkload, _trajectories, "agent", "agent_driver"),
    ("requests", RequestsWorkload, "requests_count", "chat", "requests_driver"),
    ("mooncake", MooncakeWorkload, "mooncake_count", "mooncake", "mooncake_driver"),
    ("mix", MixWorkload, "mix_count", "mix", "mix_driver"),
    ("vllm_requests", VllmRequestsWorkload, "vllm_requests_count", "vllm_requests",
     "vllm_requests_driver"),
    # agent kinds fitted from data, the tree search and the trace replay
    ("coding_agent", CodingAgentWorkload, _trajectories, "coding_agent", "coding_agent_driver"),
    ("function_calling", FunctionCallingWorkload, _trajectories, "function_calling",
     "function_calling_driver"),
    ("human_in_loop", HumanInLoopWorkload, _trajectories, "human_in_loop", "human_in_loop_driver"),
    ("multi_agent_team", MultiAgentTeamWorkload, _trajectories, "multi_agent", "multi_agent_driver"),
    ("tree_search", TreeSearchWorkload, _trajectories, "tree_search", "tree_search_driver"),
    ("agent_trace", AgentTraceWorkload, _trajectories, "agent_trace", "agent_trace_driver"),
    ("claude_code", ClaudeCodeWorkload, _trajectories, "claude_code", "claude_code_driver"),
    ("interactive_coding_agent", InteractiveCodingAgentWorkload, _trajectories, "interactive",
     "interactive_driver"),
)  # fmt: skip

for _name, _config, _count, _module, _driver in _KINDS:
    if isinstance(_count, str):
        _count = shipped(_module, _count)
    register_workload(WorkloadKind(_name, _config, _count, shipped(_module, _driver)))


def _import_drivers() -> None:
    """Import every shipped driver's module: the agent kinds' modules declare their tool
    times on import (``sim.workload.hints.register_tool_times``, ``refuse_tool_times``),
    which that registry reads after running this loader."""
    for load in _MODULES.values():
        load()


add_loader("tool_times", _import_drivers)
