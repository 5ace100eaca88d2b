"""The shipped workload kinds, by name: each config model's module and class, as text.

Responsibility: ``WORKLOAD_MODELS``, the table ``sim.workload.kind_models`` imports the
models from and the registry (``sim.workload.kinds``) checks a registration against (a
plug-in cannot take a shipped name with a model of its own). Text only: importing this
module imports nothing, so both may read it (the import graph stays acyclic).

Invariant: the table's order is the order of the ``workload`` union.
"""

from __future__ import annotations

#: every workload kind -> (module of ``sim.workload``, class) of its config model, in the
#: order of the ``workload`` union
WORKLOAD_MODELS: dict[str, tuple[str, str]] = {
    "chat": ("common_config", "ChatWorkload"),
    "agent": ("agent_config", "AgentWorkload"),
    "requests": ("common_config", "RequestsWorkload"),
    "mooncake": ("common_config", "MooncakeWorkload"),
    "mix": ("mix_config", "MixWorkload"),
    "coding_agent": ("agent_config", "CodingAgentWorkload"),
    "function_calling": ("agent_config", "FunctionCallingWorkload"),
    "human_in_loop": ("agent_config", "HumanInLoopWorkload"),
    "multi_agent_team": ("agent_config", "MultiAgentTeamWorkload"),
    "tree_search": ("agent_config", "TreeSearchWorkload"),
    "agent_trace": ("agent_config", "AgentTraceWorkload"),
    "vllm_requests": ("vllm_requests", "VllmRequestsWorkload"),
    "claude_code": ("agent_config", "ClaudeCodeWorkload"),
    "interactive_coding_agent": ("agent_config", "InteractiveCodingAgentWorkload"),
}
