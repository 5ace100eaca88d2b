"""The shipped workload kinds, registered on import (``sim.workload.kinds``).

Responsibility: import every shipped driver and config model and register each kind by
name. ``sim.workload`` adds this module as a plug-in loader (``sim.plugins``) that
``workload_kind`` runs before its first look-up, so importing a config model or a
distribution of this layer (the scenario schema does) does not import every driver.

Invariant: every kind is registered once, with its config model, trajectory count and
driver.
"""

from __future__ import annotations

from sim.workload.agent import agent_driver
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
from sim.workload.agent_trace import agent_trace_driver
from sim.workload.chat import chat_driver, requests_count, requests_driver
from sim.workload.claude_code import claude_code_driver
from sim.workload.coding_agent import coding_agent_driver
from sim.workload.common_config import ChatWorkload, MooncakeWorkload, RequestsWorkload
from sim.workload.function_calling import function_calling_driver
from sim.workload.human_in_loop import human_in_loop_driver
from sim.workload.interactive import interactive_driver
from sim.workload.kinds import WorkloadKind, register_workload
from sim.workload.mix import mix_count, mix_driver
from sim.workload.mix_config import MixWorkload
from sim.workload.mooncake import mooncake_count, mooncake_driver
from sim.workload.multi_agent import multi_agent_driver
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
