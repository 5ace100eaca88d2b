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

from sim.workload.context_limit import ContextLimit
from sim.workload.distributions import MAX_TIME_S, MAX_TOKENS, Dist, constant, within

#: the most trajectories, requests or requests of a ``requests`` list in one workload
MAX_COUNT = 10_000_000
#: the most turns a trajectory (or a fork branch) may state
MAX_TURNS = 100_000
#: the widest fork fan-out, the most closed-loop agents, the fastest arrival rate (per s)
MAX_BRANCHES, MAX_CONCURRENCY, MAX_RATE_PER_S = 1_000, 1_000_000, 1e9

TokenDist = Annotated[Dist, AfterValidator(within(0, MAX_TOKENS, "token counts"))]
TimeDist = Annotated[Dist, AfterValidator(within(0, MAX_TIME_S, "times in seconds"))]
TurnDist = Annotated[Dist, AfterValidator(within(0, MAX_TURNS, "turn counts"))]
BranchDist = Annotated[Dist, AfterValidator(within(0, MAX_BRANCHES, "branch counts"))]


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# ----------------------------------------------------------------------------- arrivals
class PoissonArrival(_Cfg):
    """Open loop: exponential gaps at ``rate_per_s``."""

    kind: Literal["poisson"] = "poisson"
    rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S)
    start_s: float = Field(0.0, ge=0, le=MAX_TIME_S)


class FixedArrival(_Cfg):
    """Open loop: one arrival every ``interval_s`` from ``start_s`` (0 = all at once)."""

    kind: Literal["fixed"] = "fixed"
    interval_s: float = Field(0.0, ge=0, le=MAX_TIME_S)
    start_s: float = Field(0.0, ge=0, le=MAX_TIME_S)


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


Arrival = Annotated[
    Union[PoissonArrival, FixedArrival, ClosedLoopArrival, TraceArrival],  # noqa: UP007
    Field(discriminator="kind"),
]


# ------------------------------------------------------------------------------ lengths
class ParametricLengths(_Cfg):
    """Prompt and output lengths drawn from distributions."""

    kind: Literal["parametric"] = "parametric"
    prompt_tokens: TokenDist
    output_tokens: TokenDist


class TraceLengths(_Cfg):
    """Prompt and output lengths read from a CSV trace (e.g. Azure LLM inference 2023)."""

    kind: Literal["trace"] = "trace"
    path: str  # CSV file, relative to the scenario file
    prompt_column: str = "ContextTokens"
    output_column: str = "GeneratedTokens"
    order: Literal["sequential", "shuffle", "sample"] = "sequential"  # wraps around
    start_row: int = Field(0, ge=0, le=1_000_000_000)


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


class AgentWorkload(_Cfg):
    """Multi-turn agent trajectories: turns, tool pauses, growing context, forks."""

    kind: Literal["agent"] = "agent"
    num_trajectories: int = Field(ge=1, le=MAX_COUNT)
    arrival: Arrival
    turns: TurnDist  # LLM calls on the main line (>= 1)
    system_prompt_tokens: int = Field(2048, ge=0, le=MAX_TOKENS)  # shared by every trajectory
    tool_tokens: int = Field(1024, ge=0, le=MAX_TOKENS)  # tool definitions, shared by all
    task_tokens: TokenDist = constant(256)  # the user's task (first call's new input)
    output_tokens: TokenDist = constant(128)  # each reply
    observation_tokens: TokenDist = constant(512)  # each tool result (next call's new input)
    pause_s: TimeDist = constant(1.0)  # tool wait before each call after the first
    fork: ForkConfig | None = None
    # what the harness does near the model's context window (sim.workload.context_limit)
    context_limit: ContextLimit = ContextLimit()

    @model_validator(mode="after")
    def _no_trace_arrival(self):
        if self.arrival.kind == "trace" and self.arrival.path is None:
            raise ValueError("arrival kind 'trace' needs a path for agent workloads")
        return self


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
    """An explicit list of requests (exact timelines, worked examples such as SPEC E20)."""

    kind: Literal["requests"] = "requests"
    requests: list[RequestGroup] = Field(min_length=1)

    @model_validator(mode="after")
    def _total(self):
        total = sum(g.count for g in self.requests)
        if total > MAX_COUNT:
            raise ValueError(f"{total:,} requests in all; the limit is {MAX_COUNT:,}")
        return self


Workload = Annotated[
    Union[ChatWorkload, AgentWorkload, RequestsWorkload],  # noqa: UP007
    Field(discriminator="kind"),
]
