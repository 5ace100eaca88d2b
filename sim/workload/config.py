"""Scenario configuration of workloads and arrival processes (pydantic, ``kind:`` tagged).

Invariant: every model forbids unknown fields; each ``kind`` names exactly one model here
and one strategy registered in ``sim.workload`` (arrivals and workloads by name); paths
are kept as written and resolved against the scenario file's folder when the run is built.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.workload.distributions import Dist, constant


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ----------------------------------------------------------------------------- arrivals
class PoissonArrival(_Cfg):
    """Open loop: exponential gaps at ``rate_per_s``."""

    kind: Literal["poisson"] = "poisson"
    rate_per_s: float = Field(gt=0)
    start_s: float = Field(0.0, ge=0)


class FixedArrival(_Cfg):
    """Open loop: one arrival every ``interval_s`` from ``start_s`` (0 = all at once)."""

    kind: Literal["fixed"] = "fixed"
    interval_s: float = Field(0.0, ge=0)
    start_s: float = Field(0.0, ge=0)


class ClosedLoopArrival(_Cfg):
    """``concurrency`` agents (users), each starting a new trajectory when one ends."""

    kind: Literal["closed_loop"] = "closed_loop"
    concurrency: int = Field(ge=1)
    think_s: Dist = constant(0.0)  # pause between one trajectory's end and the next start
    stagger_s: float = Field(0.0, ge=0)  # agent i starts at i * stagger_s


class TraceArrival(_Cfg):
    """Open loop at a trace's timestamps (relative to its first row), scaled by ``time_scale``."""

    kind: Literal["trace"] = "trace"
    path: str | None = None  # default: the workload's length trace
    time_column: str = "TIMESTAMP"
    time_scale: float = Field(1.0, gt=0)  # 0.5 replays twice as fast


Arrival = Annotated[
    Union[PoissonArrival, FixedArrival, ClosedLoopArrival, TraceArrival],  # noqa: UP007
    Field(discriminator="kind"),
]


# ------------------------------------------------------------------------------ lengths
class ParametricLengths(_Cfg):
    """Prompt and output lengths drawn from distributions."""

    kind: Literal["parametric"] = "parametric"
    prompt_tokens: Dist
    output_tokens: Dist


class TraceLengths(_Cfg):
    """Prompt and output lengths read from a CSV trace (e.g. Azure LLM inference 2023)."""

    kind: Literal["trace"] = "trace"
    path: str  # CSV file, relative to the scenario file
    prompt_column: str = "ContextTokens"
    output_column: str = "GeneratedTokens"
    order: Literal["sequential", "shuffle", "sample"] = "sequential"  # wraps around
    start_row: int = Field(0, ge=0)


Lengths = Annotated[
    Union[ParametricLengths, TraceLengths],  # noqa: UP007
    Field(discriminator="kind"),
]


# ---------------------------------------------------------------------------- workloads
class ChatWorkload(_Cfg):
    """Independent one-turn requests (a chat trajectory is one turn)."""

    kind: Literal["chat"] = "chat"
    num_requests: int = Field(ge=1)
    arrival: Arrival
    lengths: Lengths
    system_prompt_tokens: int = Field(0, ge=0)  # shared by every request (prefix caching)


class ForkConfig(_Cfg):
    """After a turn, with ``probability``, fork ``branches`` that run ``branch_turns`` each."""

    probability: float = Field(ge=0, le=1)
    branches: Dist = constant(2)  # fan-out (>= 2 after rounding)
    branch_turns: Dist = constant(1)
    mode: Literal["join", "prune"] = "join"  # join: wait for all; prune: first one wins


class AgentWorkload(_Cfg):
    """Multi-turn agent trajectories: turns, tool pauses, growing context, forks."""

    kind: Literal["agent"] = "agent"
    num_trajectories: int = Field(ge=1)
    arrival: Arrival
    turns: Dist  # LLM calls on the main line (>= 1)
    system_prompt_tokens: int = Field(2048, ge=0)  # shared by every trajectory
    tool_tokens: int = Field(1024, ge=0)  # tool definitions, shared by every trajectory
    task_tokens: Dist = constant(256)  # the user's task (first call's new input)
    output_tokens: Dist = constant(128)  # each reply
    observation_tokens: Dist = constant(512)  # each tool result (next call's new input)
    pause_s: Dist = constant(1.0)  # tool wait before each call after the first
    fork: ForkConfig | None = None

    @model_validator(mode="after")
    def _no_trace_arrival(self):
        if self.arrival.kind == "trace" and self.arrival.path is None:
            raise ValueError("arrival kind 'trace' needs a path for agent workloads")
        return self


class RequestGroup(_Cfg):
    """``count`` identical requests arriving at ``at_s``, ``interval_s`` apart."""

    count: int = Field(1, ge=1)
    at_s: float = Field(0.0, ge=0)
    interval_s: float = Field(0.0, ge=0)
    prompt_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)
    shared_prefix_tokens: int = Field(0, ge=0)  # leading tokens shared by every group

    @model_validator(mode="after")
    def _prefix(self):
        if self.shared_prefix_tokens > self.prompt_tokens:
            raise ValueError("shared_prefix_tokens cannot exceed prompt_tokens")
        return self


class RequestsWorkload(_Cfg):
    """An explicit list of requests (exact timelines, worked examples such as SPEC E20)."""

    kind: Literal["requests"] = "requests"
    requests: list[RequestGroup] = Field(min_length=1)


Workload = Annotated[
    Union[ChatWorkload, AgentWorkload, RequestsWorkload],  # noqa: UP007
    Field(discriminator="kind"),
]
