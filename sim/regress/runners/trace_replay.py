"""The ``trace_replay`` runner: prefix-cache hit rates of a block-hash trace, no timing.

Responsibility: replay a trace file through ``sim.prefix.trace_replay`` (the rules of
``kvsim trace-replay``) and report its counts: ``hit_rate``, ``hit_rate_last_half``,
``hit_tokens``, ``prompt_tokens``, ``requests``, ``evicted_blocks``,
``peak_cached_tokens``.

Invariant: the replay is deterministic, so every metric may use a zero tolerance.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from sim.config_model import ConfigModel
from sim.errors import KvsimError
from sim.regress.runners.base import (
    MetricValue,
    RunContext,
    flatten_metrics,
    missing_layer,
    register_runner,
)


class TraceReplayInputs(ConfigModel):
    """A trace and the cache it is replayed through."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: str = Field(min_length=1)  # path, relative to the suite file
    format: str = "mooncake"
    block_size: int = Field(512, ge=1)  # tokens per cache block; divides 512
    cache_tokens: int | Literal["inf"] = "inf"  # capacity in tokens
    eviction: str = "lru"
    first_requests: int | None = Field(None, ge=1)  # replay only the first N requests


class TraceReplayRunner:
    name: ClassVar[str] = "trace_replay"
    inputs_model: ClassVar[type[BaseModel]] = TraceReplayInputs

    def run(self, inputs: TraceReplayInputs, ctx: RunContext) -> dict[str, MetricValue]:
        try:
            from sim.prefix.trace_replay import load_trace, replay
        except ModuleNotFoundError as exc:
            if not (exc.name or "").startswith("sim"):
                raise
            raise missing_layer("trace_replay", "sim.prefix.trace_replay", exc) from None
        path = ctx.resolve(inputs.trace)
        if not path.exists():
            raise KvsimError(f"{path}: trace file not found")
        requests = load_trace(path, inputs.format)
        if inputs.first_requests is not None:
            requests = requests[: inputs.first_requests]
        cap = None if inputs.cache_tokens == "inf" else inputs.cache_tokens
        result = replay(
            requests, block_size=inputs.block_size, cache_tokens=cap, eviction=inputs.eviction
        )
        out = result.to_dict()
        for key in ("block_size", "cache_tokens"):  # inputs, not results
            out.pop(key, None)
        return flatten_metrics(out)


register_runner(TraceReplayRunner())
