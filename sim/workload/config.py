"""Scenario configuration of workloads and arrival processes (pydantic, ``kind:`` tagged).

Invariant: every model forbids unknown fields; each ``kind`` names exactly one model here
and one strategy registered in ``sim.workload`` (arrivals and workloads by name); paths
are kept as written and resolved against the scenario file's folder when the run is built.
Every number is finite and within a stated range (counts <= ``MAX_COUNT``, tokens <=
``MAX_TOKENS``, seconds <= ``MAX_TIME_S``; docs/scenarios.md "Limits on input"), so a
scenario that validates cannot ask for unbounded memory or time by its size alone.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from sim.workload.billing import ProviderCacheConfig
from sim.workload.context_limit import ContextLimit
from sim.workload.distributions import MAX_TIME_S, MAX_TOKENS, Dist, LogNormal, constant, within
from sim.workload.hints import HintsConfig
from sim.workload.layout import HarnessConfig
from sim.workload.vllm_requests import VllmRequestsWorkload

#: the most trajectories, requests or requests of a ``requests`` list in one workload
MAX_COUNT = 10_000_000
#: the most turns a trajectory (or a fork branch) may state
MAX_TURNS = 100_000
#: the widest fork fan-out, the most closed-loop agents, the fastest arrival rate (per s)
MAX_BRANCHES, MAX_CONCURRENCY, MAX_RATE_PER_S = 1_000, 1_000_000, 1e9
#: the most branches at the deepest level of a tree search (fan_out ^ depth)
MAX_TREE_BRANCHES = 100_000
#: the range of a gamma arrival's coefficient of variation (shape 1/cv^2 in [1e-4, 1e4])
MIN_CV, MAX_CV = 0.01, 100.0
#: the most components of a ``mix`` workload
MAX_COMPONENTS = 64

TokenDist = Annotated[Dist, AfterValidator(within(0, MAX_TOKENS, "token counts"))]
TimeDist = Annotated[Dist, AfterValidator(within(0, MAX_TIME_S, "times in seconds"))]
TurnDist = Annotated[Dist, AfterValidator(within(0, MAX_TURNS, "turn counts"))]
BranchDist = Annotated[Dist, AfterValidator(within(0, MAX_BRANCHES, "branch counts"))]


class _Cfg(BaseModel):
    # defer_build: a workload is validated as a part of the scenario model, which builds
    # these schemas once; building each class's own validator at import would double it
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


# ----------------------------------------------------------------------------- arrivals
class PoissonArrival(_Cfg):
    """Open loop: exponential gaps at ``rate_per_s``."""

    kind: Literal["poisson"] = "poisson"
    rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S)
    start_s: float = Field(0.0, ge=0, le=MAX_TIME_S)


class FixedArrival(_Cfg):
    """Open loop: one arrival every ``interval_s`` from ``start_s`` (0 = all at once);
    ``rate_per_s`` instead of ``interval_s`` means ``interval_s = 1 / rate_per_s``."""

    kind: Literal["fixed"] = "fixed"
    interval_s: float = Field(0.0, ge=0, le=MAX_TIME_S)
    start_s: float = Field(0.0, ge=0, le=MAX_TIME_S)
    rate_per_s: float | None = Field(None, gt=0, le=MAX_RATE_PER_S)

    @model_validator(mode="after")
    def _one_spacing(self):
        # value checks, not "was it written": config.resolved.yaml writes every default
        if self.rate_per_s is not None and self.interval_s != 0:
            raise ValueError("give interval_s or rate_per_s, not both")
        return self

    @property
    def gap_s(self) -> float:
        return self.interval_s if self.rate_per_s is None else 1.0 / self.rate_per_s


class GammaArrival(_Cfg):
    """Open loop: gamma gaps with mean ``1 / rate_per_s`` and coefficient of variation
    ``cv`` (1 = Poisson; above 1 burstier, below 1 more regular)."""

    kind: Literal["gamma"] = "gamma"
    rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S)
    cv: float = Field(ge=MIN_CV, le=MAX_CV)
    start_s: float = Field(0.0, ge=0, le=MAX_TIME_S)


class Sinusoid(_Cfg):
    """Relative rate ``1 + amplitude x sin(2 pi (t + phase_s) / period_s)`` (mean 1)."""

    amplitude: float = Field(ge=0, le=1)
    period_s: float = Field(86_400.0, gt=0, le=MAX_TIME_S)
    phase_s: float = Field(0.0, ge=-MAX_TIME_S, le=MAX_TIME_S)


class DiurnalArrival(_Cfg):
    """Open loop, non-homogeneous Poisson: ``rate_per_s`` (the mean over a day or a period)
    times a relative curve, either 24 hourly values over ``day_s`` (normalised to mean 1,
    t = 0 at ``start_hour``) or a ``sinusoid``."""

    kind: Literal["diurnal"] = "diurnal"
    rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S)
    hourly: list[Annotated[float, Field(ge=0, le=1e12)]] | None = None
    day_s: float = Field(86_400.0, gt=0, le=MAX_TIME_S)  # the 24 points span this long
    start_hour: float = Field(0.0, ge=0, lt=24)
    sinusoid: Sinusoid | None = None

    @model_validator(mode="after")
    def _one_curve(self):
        if (self.hourly is None) == (self.sinusoid is None):
            raise ValueError("give exactly one curve: hourly (24 values) or sinusoid")
        if self.hourly is not None:
            if len(self.hourly) != 24:
                raise ValueError(f"hourly needs 24 values (one per hour), got {len(self.hourly)}")
            if sum(self.hourly) <= 0:
                raise ValueError("hourly values must not all be zero")
        elif self.day_s != 86_400.0 or self.start_hour != 0:
            raise ValueError(
                "day_s and start_hour go with hourly; a sinusoid has period_s, phase_s"
            )
        return self


class ClosedLoopArrival(_Cfg):
    """``concurrency`` agents (users), each starting a new trajectory when one ends."""

    kind: Literal["closed_loop"] = "closed_loop"
    concurrency: int = Field(ge=1, le=MAX_CONCURRENCY)
    think_s: TimeDist = constant(0.0)  # pause between one trajectory's end and the next start
    stagger_s: float = Field(0.0, ge=0, le=MAX_TIME_S)  # agent i starts at i * stagger_s


class TraceArrival(_Cfg):
    """Open loop at a trace's timestamps (relative to its first row), scaled by ``time_scale``."""

    kind: Literal["trace"] = "trace"
    path: str | None = None  # default: the workload's length trace
    time_column: str = "TIMESTAMP"
    time_scale: float = Field(1.0, gt=0, le=1e9)  # 0.5 replays twice as fast
    # instead of time_scale: rescale the replayed times to this mean rate
    rate_per_s: float | None = Field(None, gt=0, le=MAX_RATE_PER_S)

    @model_validator(mode="after")
    def _one_scale(self):
        if self.rate_per_s is not None and self.time_scale != 1.0:
            raise ValueError("give time_scale or rate_per_s, not both")
        return self


Arrival = Annotated[
    Union[  # noqa: UP007
        PoissonArrival,
        FixedArrival,
        GammaArrival,
        DiurnalArrival,
        ClosedLoopArrival,
        TraceArrival,
    ],
    Field(discriminator="kind"),
]


# ------------------------------------------------------------------------------ lengths
class ParametricLengths(_Cfg):
    """Prompt and output lengths drawn from distributions."""

    kind: Literal["parametric"] = "parametric"
    prompt_tokens: TokenDist
    output_tokens: TokenDist
    # every output length x this (rounded, >= 1): the same requests with longer or shorter
    # replies (the speed benchmark's "cost grows with decisions, not tokens" check)
    output_scale: float = Field(1.0, gt=0, le=1000)


class TraceLengths(_Cfg):
    """Prompt and output lengths read from a CSV trace (e.g. Azure LLM inference 2023):
    a ``path``, or a ``trace`` shipped in ``workloads/data`` by name."""

    kind: Literal["trace"] = "trace"
    path: str | None = None  # CSV file, relative to the scenario file
    trace: Literal["azure_conv", "azure_code"] | None = None  # sim.workload.traces.SHIPPED
    prompt_column: str = "ContextTokens"
    output_column: str = "GeneratedTokens"
    order: Literal["sequential", "shuffle", "sample"] = "sequential"  # wraps around
    start_row: int = Field(0, ge=0, le=1_000_000_000)
    output_scale: float = Field(1.0, gt=0, le=1000)  # every output length x this (>= 1)

    @model_validator(mode="after")
    def _one_source(self):
        if (self.path is None) == (self.trace is None):
            raise ValueError("give path (a CSV file) or trace (azure_conv, azure_code), not both")
        return self


Lengths = Annotated[
    Union[ParametricLengths, TraceLengths],  # noqa: UP007
    Field(discriminator="kind"),
]


# ---------------------------------------------------------------------------- workloads
class ChatWorkload(_Cfg):
    """Independent one-turn requests (a chat trajectory is one turn)."""

    kind: Literal["chat"] = "chat"
    num_requests: int = Field(ge=1, le=MAX_COUNT)
    arrival: Arrival
    lengths: Lengths
    # shared by every request (prefix caching)
    system_prompt_tokens: int = Field(0, ge=0, le=MAX_TOKENS)


class ForkConfig(_Cfg):
    """After a turn, with ``probability``, fork ``branches`` that run ``branch_turns`` each."""

    probability: float = Field(ge=0, le=1)
    branches: BranchDist = constant(2)  # fan-out (>= 2 after rounding)
    branch_turns: TurnDist = constant(1)
    mode: Literal["join", "prune"] = "join"  # join: wait for all; prune: first one wins


class TrajectoryWorkload(_Cfg):
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
class ParamsFile(_Cfg):
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


class RequestGroup(_Cfg):
    """``count`` identical requests arriving at ``at_s``, ``interval_s`` apart."""

    count: int = Field(1, ge=1, le=MAX_COUNT)
    at_s: float = Field(0.0, ge=0, le=MAX_TIME_S)
    interval_s: float = Field(0.0, ge=0, le=MAX_TIME_S)
    prompt_tokens: int = Field(ge=1, le=MAX_TOKENS)
    output_tokens: int = Field(ge=1, le=MAX_TOKENS)
    # leading tokens shared by every group
    shared_prefix_tokens: int = Field(0, ge=0, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _prefix(self):
        if self.shared_prefix_tokens > self.prompt_tokens:
            raise ValueError("shared_prefix_tokens cannot exceed prompt_tokens")
        return self


class RequestsWorkload(_Cfg):
    """An explicit list of requests (exact timelines, worked examples such as E20)."""

    kind: Literal["requests"] = "requests"
    requests: list[RequestGroup] = Field(min_length=1)

    @model_validator(mode="after")
    def _total(self):
        total = sum(g.count for g in self.requests)
        if total > MAX_COUNT:
            raise ValueError(f"{total:,} requests in all; the limit is {MAX_COUNT:,}")
        return self


class MooncakeWorkload(_Cfg):
    """Replay of a Mooncake block-hash trace through the engine: each request is a one-turn
    trajectory whose prompt is its hash ids as chained 512-token spans."""

    kind: Literal["mooncake"] = "mooncake"
    path: str | None = None  # JSON lines; None: workloads/data/mooncake/synthetic_trace.jsonl
    num_requests: int | None = Field(None, ge=1, le=MAX_COUNT)  # None: every request
    start_row: int = Field(0, ge=0, le=1_000_000_000)  # the first request replayed
    # default: the trace's own timestamps (ms), times time_scale (or rescaled to rate_per_s)
    arrival: Arrival = TraceArrival()


class MixWorkload(_Cfg):
    """Several workloads on one engine, each with its own arrival process; ``names`` label
    them in the ``workload`` column (default: the kind, with ``_i`` when a kind repeats)."""

    kind: Literal["mix"] = "mix"
    components: list[Workload] = Field(min_length=1, max_length=MAX_COMPONENTS)
    names: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,32}$")]] | None = None

    @model_validator(mode="after")
    def _components(self):
        if any(c.kind == "mix" for c in self.components):
            raise ValueError("a mix component cannot itself be a mix")
        if self.names is not None:
            if len(self.names) != len(self.components):
                raise ValueError(
                    f"names has {len(self.names)} entries for {len(self.components)} components"
                )
            if len(set(self.names)) != len(self.names):
                raise ValueError("names must be unique")
        return self

    def labels(self) -> list[str]:
        """Each component's name in the ``workload`` column."""
        if self.names is not None:
            return list(self.names)
        kinds = [c.kind for c in self.components]
        return [k if kinds.count(k) == 1 else f"{k}_{i}" for i, k in enumerate(kinds)]


Workload = Annotated[
    Union[  # noqa: UP007
        ChatWorkload,
        AgentWorkload,
        RequestsWorkload,
        MooncakeWorkload,
        MixWorkload,
        CodingAgentWorkload,
        FunctionCallingWorkload,
        HumanInLoopWorkload,
        MultiAgentTeamWorkload,
        TreeSearchWorkload,
        AgentTraceWorkload,
        VllmRequestsWorkload,
        ClaudeCodeWorkload,
        InteractiveCodingAgentWorkload,
    ],
    Field(discriminator="kind"),
]
# MixWorkload names ``Workload`` before it is defined: pydantic resolves it when the class
# is first built (the scenario model builds it; defer_build above)
