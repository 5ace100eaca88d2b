"""Workload configuration every kind shares, and the one-turn kinds (pydantic, ``kind:`` tagged).

Responsibility: the limits on input, the distribution types, the arrival processes and
lengths, and the ``chat``, ``requests`` and ``mooncake`` kinds. The agent kinds live in
``sim.workload.agent_config``, ``vllm_requests`` in ``sim.workload.vllm_requests``,
``mix`` and the whole ``workload`` union in ``sim.workload.mix_config``; the table of
kinds is ``sim.workload.kind_models``, and ``sim.workload.config`` names them all. Split
so that a scenario imports only the kind it names (``kvsim validate``'s start-up,
docs/performance.md).

Invariant: every model forbids unknown fields; each ``kind`` names exactly one model
(``sim.workload.kind_models``) and one strategy registered in ``sim.workload`` (arrivals
and workloads by name); paths
are kept as written and resolved against the scenario file's folder when the run is built.
Every number is finite and within a stated range (counts <= ``MAX_COUNT``, tokens <=
``MAX_TOKENS``, seconds <= ``MAX_TIME_S``; docs/scenarios.md "Limits on input"), so a
scenario that validates cannot ask for unbounded memory or time by its size alone.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from sim.config_model import ConfigModel
from sim.workload.distributions import MAX_TIME_S, MAX_TOKENS, Dist, constant, within

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


class WorkloadConfigModel(ConfigModel):
    # defer_build: a workload is validated as a part of the scenario model, which builds
    # these schemas once; building each class's own validator at import would double it
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


# ----------------------------------------------------------------------------- arrivals
class PoissonArrival(WorkloadConfigModel):
    """Open loop: exponential gaps at ``rate_per_s``."""

    kind: Literal["poisson"] = "poisson"
    rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S)
    start_s: float = Field(0.0, ge=0, le=MAX_TIME_S)


class FixedArrival(WorkloadConfigModel):
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


class GammaArrival(WorkloadConfigModel):
    """Open loop: gamma gaps with mean ``1 / rate_per_s`` and coefficient of variation
    ``cv`` (1 = Poisson; above 1 burstier, below 1 more regular)."""

    kind: Literal["gamma"] = "gamma"
    rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S)
    cv: float = Field(ge=MIN_CV, le=MAX_CV)
    start_s: float = Field(0.0, ge=0, le=MAX_TIME_S)


class Sinusoid(WorkloadConfigModel):
    """Relative rate ``1 + amplitude x sin(2 pi (t + phase_s) / period_s)`` (mean 1)."""

    amplitude: float = Field(ge=0, le=1)
    period_s: float = Field(86_400.0, gt=0, le=MAX_TIME_S)
    phase_s: float = Field(0.0, ge=-MAX_TIME_S, le=MAX_TIME_S)


class DiurnalArrival(WorkloadConfigModel):
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


class ClosedLoopArrival(WorkloadConfigModel):
    """``concurrency`` agents (users), each starting a new trajectory when one ends."""

    kind: Literal["closed_loop"] = "closed_loop"
    concurrency: int = Field(ge=1, le=MAX_CONCURRENCY)
    think_s: TimeDist = constant(0.0)  # pause between one trajectory's end and the next start
    stagger_s: float = Field(0.0, ge=0, le=MAX_TIME_S)  # agent i starts at i * stagger_s


class TraceArrival(WorkloadConfigModel):
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
class ParametricLengths(WorkloadConfigModel):
    """Prompt and output lengths drawn from distributions."""

    kind: Literal["parametric"] = "parametric"
    prompt_tokens: TokenDist
    output_tokens: TokenDist
    # every output length x this (rounded, >= 1): the same requests with longer or shorter
    # replies (the speed benchmark's "cost grows with decisions, not tokens" check)
    output_scale: float = Field(1.0, gt=0, le=1000)


class TraceLengths(WorkloadConfigModel):
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
class ChatWorkload(WorkloadConfigModel):
    """Independent one-turn requests (a chat trajectory is one turn)."""

    kind: Literal["chat"] = "chat"
    num_requests: int = Field(ge=1, le=MAX_COUNT)
    arrival: Arrival
    lengths: Lengths
    # shared by every request (prefix caching)
    system_prompt_tokens: int = Field(0, ge=0, le=MAX_TOKENS)


class RequestGroup(WorkloadConfigModel):
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


class RequestsWorkload(WorkloadConfigModel):
    """An explicit list of requests (exact timelines, worked examples such as E20)."""

    kind: Literal["requests"] = "requests"
    requests: list[RequestGroup] = Field(min_length=1)

    @model_validator(mode="after")
    def _total(self):
        total = sum(g.count for g in self.requests)
        if total > MAX_COUNT:
            raise ValueError(f"{total:,} requests in all; the limit is {MAX_COUNT:,}")
        return self


class MooncakeWorkload(WorkloadConfigModel):
    """Replay of a Mooncake block-hash trace through the engine: each request is a one-turn
    trajectory whose prompt is its hash ids as chained 512-token spans."""

    kind: Literal["mooncake"] = "mooncake"
    path: str | None = None  # JSON lines; None: workloads/data/mooncake/synthetic_trace.jsonl
    num_requests: int | None = Field(None, ge=1, le=MAX_COUNT)  # None: every request
    start_row: int = Field(0, ge=0, le=1_000_000_000)  # the first request replayed
    # default: the trace's own timestamps (ms), times time_scale (or rescaled to rate_per_s)
    arrival: Arrival = TraceArrival()
