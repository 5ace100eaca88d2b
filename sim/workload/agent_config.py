"""The agent workload kinds' configuration (pydantic, ``kind:`` tagged): every kind that runs
trajectories of turns through ``sim.workload.agent``'s engine.

Responsibility: ``TrajectoryWorkload`` (what every agent kind shares: trajectory count,
arrivals, the harness near the context window, the prompt layout, the provider's cache,
KV hints) and one model per agent kind. They live apart from
``sim.workload.common_config`` (arrivals, lengths, the one-turn kinds) so that a scenario naming
a one-turn kind imports none of this module's dependencies (``kvsim validate``'s
start-up, docs/performance.md).

Invariant: as ``sim.workload.common_config``'s: every model forbids unknown fields, each
``kind`` names exactly one model (``sim.workload.kind_models``), every number is
finite and within a stated range.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sim.workload.billing import ProviderCacheConfig
from sim.workload.common_config import (
    MAX_BRANCHES,
    MAX_COUNT,
    MAX_TREE_BRANCHES,
    MAX_TURNS,
    Arrival,
    BranchDist,
    TimeDist,
    TokenDist,
    TurnDist,
    WorkloadConfigModel,
)
from sim.workload.context_limit import ContextLimit
from sim.workload.distributions import MAX_TIME_S, MAX_TOKENS, LogNormal, constant
from sim.workload.hints import HintsConfig
from sim.workload.layout import HarnessConfig


class ForkConfig(WorkloadConfigModel):
    """After a turn, with ``probability``, fork ``branches`` that run ``branch_turns`` each."""

    probability: float = Field(ge=0, le=1)
    branches: BranchDist = constant(2)  # fan-out (>= 2 after rounding)
    branch_turns: TurnDist = constant(1)
    mode: Literal["join", "prune"] = "join"  # join: wait for all; prune: first one wins


class TrajectoryWorkload(WorkloadConfigModel):
    """What every agent kind shares: how many trajectories, when they start, what the
    harness does near the model's context window, how it lays out its prompts, and what a
    hosted API's prompt cache would bill for them."""

    kind: str
    num_trajectories: int = Field(ge=1, le=MAX_COUNT)
    arrival: Arrival
    # what the harness does near the model's context window (sim.workload.context_limit)
    context_limit: ContextLimit = ContextLimit()
    # the prompt layout: per-call fields, tool changes, compaction (sim.workload.layout)
    harness: HarnessConfig = HarnessConfig()
    # the hosted-API view: a provider's prompt cache and bill (sim.workload.billing)
    provider_cache: ProviderCacheConfig | None = None
    # the harness's KV hints for the engine's ``hints`` pause policy (sim.workload.hints)
    hints: HintsConfig | None = None

    @model_validator(mode="after")
    def _no_trace_arrival(self):
        if self.arrival.kind == "trace" and self.arrival.path is None:
            raise ValueError("arrival kind 'trace' needs a path for agent workloads")
        return self


class AgentWorkload(TrajectoryWorkload):
    """Multi-turn agent trajectories: turns, tool pauses, growing context, forks (manual)."""

    kind: Literal["agent"] = "agent"
    turns: TurnDist  # LLM calls on the main line (>= 1)
    system_prompt_tokens: int = Field(2048, ge=0, le=MAX_TOKENS)  # shared by every trajectory
    tool_tokens: int = Field(1024, ge=0, le=MAX_TOKENS)  # tool definitions, shared by all
    task_tokens: TokenDist = constant(256)  # the user's task (first call's new input)
    output_tokens: TokenDist = constant(128)  # each reply
    observation_tokens: TokenDist = constant(512)  # each tool result (next call's new input)
    pause_s: TimeDist = constant(1.0)  # tool wait before each call after the first
    fork: ForkConfig | None = None


# ------------------------------------------------- agent kinds fitted from data (docs/workloads.md)
class ParamsFile(WorkloadConfigModel):
    """``params: {path: FILE}``: fitted parameters written by ``kvsim workload fit``."""

    path: str  # relative to the scenario file


class CodingAgentWorkload(TrajectoryWorkload):
    """A coding agent (fitted on SWE-agent with DeepSeek): tool categories as a chain, tool
    times with their whole tail and the harness timeout, context growth per category.
    ``null`` fields take the fit's value (``params``, default the shipped fit)."""

    kind: Literal["coding_agent"] = "coding_agent"
    params: ParamsFile | None = None
    system_prompt_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)  # shared prefix
    turns: TurnDist | None = None  # LLM calls per trajectory
    first_prompt_tokens: TokenDist | None = None  # the first call's whole prompt
    tool_time_scale: float = Field(1.0, gt=0, le=1e6)  # every tool time x this
    timeout_s: float | None = Field(None, gt=0, le=MAX_TIME_S)  # the harness's tool timeout


class FunctionCallingWorkload(TrajectoryWorkload):
    """Multi-turn function calling (fitted on BFCL served by vLLM): user turns of a few
    calls each over a shared function-doc prefix; replies' reasoning is dropped."""

    kind: Literal["function_calling"] = "function_calling"
    params: ParamsFile | None = None
    doc_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)  # shared function docs
    user_turns: TurnDist | None = None
    calls_per_user_turn: TurnDist | None = None
    tool_s: TimeDist = constant(0.1)  # no timings in the data: in-process functions
    think_s: TimeDist = constant(0.0)  # before each user turn after the first (scripted)


class HumanInLoopWorkload(TrajectoryWorkload):
    """A customer-service agent with a human user (fitted on tau-bench airline): user turns
    separated by the user's think time, tool calls in between, a shared policy prompt."""

    kind: Literal["human_in_loop"] = "human_in_loop"
    params: ParamsFile | None = None
    policy_prompt_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)  # shared policy
    tool_tokens: int = Field(0, ge=0, le=MAX_TOKENS)  # tool schemas (not in the data)
    user_turns: TurnDist | None = None
    calls_per_user_turn: TurnDist | None = None
    # no timings in the data: a human reads and types for about a minute (assumed)
    think_s: TimeDist = LogNormal(median=60.0, sigma=1.0, min=2.0, max=1800.0)
    tool_s: TimeDist = LogNormal(median=0.3, sigma=0.6, max=10.0)  # assumed (DB lookups)


class MultiAgentTeamWorkload(TrajectoryWorkload):
    """A MetaGPT-style software team (fitted on Parrot's MetaGPT logs): an architect, then
    rounds of ``branches`` parallel calls over one shared prompt (write, review, revise),
    each round joined before the next."""

    kind: Literal["multi_agent_team"] = "multi_agent_team"
    params: ParamsFile | None = None
    branches: int | None = Field(None, ge=1, le=MAX_BRANCHES)  # files per round
    rounds: int | None = Field(None, ge=1, le=1_000)  # rounds after the architect
    round_pause_s: TimeDist = constant(0.0)  # before each round's calls

    @model_validator(mode="after")
    def _no_tool_zone(self):
        if self.harness.layout().perturbs_tools:
            raise ValueError(
                "harness: multi_agent_team prompts have no shared tool definitions to change "
                "or reorder; set tool_change_every: 0 and unstable_tool_order: false"
            )
        return self


class TreeSearchWorkload(TrajectoryWorkload):
    """Tree search over agent continuations (manual; no data): nested forks, a verifier
    that rejects branches, the winner continues. Branches share KV by copy-on-write."""

    kind: Literal["tree_search"] = "tree_search"
    system_prompt_tokens: int = Field(2048, ge=0, le=MAX_TOKENS)
    tool_tokens: int = Field(1024, ge=0, le=MAX_TOKENS)
    task_tokens: TokenDist = constant(512)
    output_tokens: TokenDist = LogNormal(median=200.0, sigma=0.6, max=4096.0)
    observation_tokens: TokenDist = LogNormal(median=300.0, sigma=0.8, max=8192.0)
    pause_s: TimeDist = LogNormal(median=1.0, sigma=0.8, max=60.0)
    pre_turns: int = Field(1, ge=1, le=MAX_TURNS)  # turns before the search (task first)
    depth: int = Field(2, ge=1, le=16)  # fork levels
    fan_out: int = Field(3, ge=2, le=MAX_BRANCHES)  # branches per fork
    level_turns: TurnDist = constant(1)  # turns a branch runs at its level before judgement
    prune_probability: float = Field(0.5, ge=0, le=1)  # a verifier rejects a losing branch
    post_turns: int = Field(1, ge=0, le=MAX_TURNS)  # the winner's turns after the search
    mode: Literal["join", "prune"] = "join"

    @model_validator(mode="after")
    def _tree_size(self):
        if self.fan_out**self.depth > MAX_TREE_BRANCHES:
            raise ValueError(
                f"fan_out^depth = {self.fan_out}^{self.depth} branches at the deepest level; "
                f"the limit is {MAX_TREE_BRANCHES:,}"
            )
        return self


class AgentTraceWorkload(TrajectoryWorkload):
    """Replay of recorded trajectories (``turns.jsonl`` schema) through the engine: each
    call's prompt and completion tokens and the tool time after it, as recorded."""

    kind: Literal["agent_trace"] = "agent_trace"
    path: str | None = None  # None: the shipped sample (8 SWE-agent trajectories)
    system_prompt_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)  # None: 320 / 0
    order: Literal["sequential", "shuffle", "sample"] = "sequential"  # wraps around
    tool_time_scale: float = Field(1.0, gt=0, le=1e6)


class ClaudeCodeWorkload(TrajectoryWorkload):
    """Replay of recorded Claude Code sessions (kv-cache-tester format, block ids per call)
    through the engine: each session a trajectory, its subagents concurrent child agents
    the parent waits for, the pause before each call its think time (``tool`` or ``human``;
    ``sim.workload.claude_code``)."""

    kind: Literal["claude_code"] = "claude_code"
    path: str | None = None  # None: the 32 shipped sessions (workloads/data/claude_code)
    order: Literal["sequential", "shuffle", "sample"] = "sequential"  # wraps around
    # the upstream tester's strategies: think_only (think_time), original (the recorded
    # gap between call starts), api_scaled (previous api_time x api_time_scale + think_time)
    timing: Literal["think_only", "original", "api_scaled"] = "think_only"
    api_time_scale: float = Field(1.0, ge=0, le=1e6)
    time_scale: float = Field(1.0, ge=0, le=1e6)  # every pause x this
    max_pause_s: float | None = Field(None, gt=0, le=MAX_TIME_S)  # cap each pause; None: none
    # the tool definitions and system prompt are fleet-shared content (the tester's warm prefix)
    warm_shared_prefix: bool = True


class InteractiveCodingAgentWorkload(TrajectoryWorkload):
    """An interactive coding assistant (fitted on 487 Claude Code sessions): user turns of
    tool calls, tool pauses of seconds and human pauses of minutes to hours, prompts that
    mostly extend the previous one, occasional compactions, subagents spawned in parallel
    (``sim.workload.interactive``). ``null`` fields take the fit's value."""

    kind: Literal["interactive_coding_agent"] = "interactive_coding_agent"
    params: ParamsFile | None = None
    shared_prefix_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)  # system + tools
    user_turns: TurnDist | None = None  # user messages per session (the task included)
    calls_per_user_turn: TurnDist | None = None  # LLM calls answering one user message
    first_prompt_tokens: TokenDist | None = None  # the first call's whole prompt
    time_scale: float = Field(1.0, ge=0, le=1e6)  # every pause x this
    max_pause_s: float | None = Field(None, gt=0, le=MAX_TIME_S)  # cap each pause; None: none
    subagents: bool = True  # spawn subagents at the fitted rate
