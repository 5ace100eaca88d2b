"""Who asks: trajectory processes, arrival processes, traces, seeded random streams.

Workloads are registered by name (``chat``, ``agent``, ``requests``, ``mooncake``, ``vllm_requests``,
``mix``, and the agent kinds ``coding_agent``, ``function_calling``, ``human_in_loop``,
``multi_agent_team``, ``tree_search``, ``agent_trace``, ``claude_code``,
``interactive_coding_agent`` that share ``sim.workload.agent``'s
trajectory engine); each has a config model (``sim.workload.config``), a trajectory count and a
driver (a SimPy generator that starts trajectories through an arrival strategy). A
registered driver labels its context with the kind (the ``workload`` column) unless a
``mix`` already named it. Every agent kind lays out its prompts through one builder
(``workload.harness``, ``sim.workload.layout``) and may be billed by a provider's prompt
cache (``workload.provider_cache``, ``sim.workload.billing``).

Invariant: this layer talks to the engine only through the node's workload API (submit,
fork, release, cancel); randomness comes only from the named streams of ``rng``.
"""

from __future__ import annotations

from sim.workload.agent import agent_driver
from sim.workload.agent_trace import agent_trace_driver
from sim.workload.arrivals import ARRIVALS, arrival_strategy
from sim.workload.chat import chat_driver, requests_count, requests_driver
from sim.workload.claude_code import claude_code_driver
from sim.workload.coding_agent import coding_agent_driver
from sim.workload.config import (
    AgentTraceWorkload,
    AgentWorkload,
    ChatWorkload,
    ClaudeCodeWorkload,
    CodingAgentWorkload,
    FunctionCallingWorkload,
    HumanInLoopWorkload,
    InteractiveCodingAgentWorkload,
    MixWorkload,
    MooncakeWorkload,
    MultiAgentTeamWorkload,
    RequestsWorkload,
    TreeSearchWorkload,
    Workload,
)
from sim.workload.context import WorkloadContext
from sim.workload.function_calling import function_calling_driver
from sim.workload.human_in_loop import human_in_loop_driver
from sim.workload.interactive import interactive_driver
from sim.workload.kinds import WORKLOADS, WorkloadKind, register_workload, workload_kind
from sim.workload.mix import mix_count, mix_driver
from sim.workload.mooncake import mooncake_count, mooncake_driver
from sim.workload.multi_agent import multi_agent_driver
from sim.workload.rng import Streams
from sim.workload.tree_search import tree_search_driver
from sim.workload.vllm_requests import (
    VllmRequestsWorkload,
    vllm_requests_count,
    vllm_requests_driver,
)

register_workload(WorkloadKind("chat", ChatWorkload, lambda c: c.num_requests, chat_driver))
register_workload(WorkloadKind("agent", AgentWorkload, lambda c: c.num_trajectories, agent_driver))
register_workload(WorkloadKind("requests", RequestsWorkload, requests_count, requests_driver))
register_workload(WorkloadKind("mooncake", MooncakeWorkload, mooncake_count, mooncake_driver))
register_workload(WorkloadKind("mix", MixWorkload, mix_count, mix_driver))
register_workload(WorkloadKind("vllm_requests", VllmRequestsWorkload, vllm_requests_count,
                               vllm_requests_driver))  # fmt: skip



def _trajectories(cfg) -> int:
    return cfg.num_trajectories


# agent kinds fitted from data, the tree search and the trace replay (docs/workloads.md)
for _name, _config, _driver in (
    ("coding_agent", CodingAgentWorkload, coding_agent_driver),
    ("function_calling", FunctionCallingWorkload, function_calling_driver),
    ("human_in_loop", HumanInLoopWorkload, human_in_loop_driver),
    ("multi_agent_team", MultiAgentTeamWorkload, multi_agent_driver),
    ("tree_search", TreeSearchWorkload, tree_search_driver),
    ("agent_trace", AgentTraceWorkload, agent_trace_driver),
    ("claude_code", ClaudeCodeWorkload, claude_code_driver),
    ("interactive_coding_agent", InteractiveCodingAgentWorkload, interactive_driver),
):
    register_workload(WorkloadKind(_name, _config, _trajectories, _driver))


__all__ = [
    "ARRIVALS",
    "WORKLOADS",
    "AgentWorkload",
    "ChatWorkload",
    "MixWorkload",
    "MooncakeWorkload",
    "RequestsWorkload",
    "Streams",
    "Workload",
    "WorkloadContext",
    "WorkloadKind",
    "arrival_strategy",
    "register_workload",
    "workload_kind",
]
