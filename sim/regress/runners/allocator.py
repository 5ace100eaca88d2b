"""The ``allocator`` runner: a deterministic allocation workload through one allocator kind.

Responsibility: build an allocator with ``make_allocator``, drive it with the ops of a
trace file or of ``sim.memory.replay.random_ops`` (seeded), and report the final
``MemoryMetrics`` (``eta_alloc``, ``eta_effective``, ``peak_allocated_bytes``,
``cow_copies``, ``bytes_copied``, ...), ``phi_ext`` at each fixed request size
(``phi_ext_at_<N>_tokens``), the op-averaged ``eta_alloc_mean``/``eta_effective_mean`` and
the counts of misses and skipped ops.

Invariant: the same inputs give the same metrics on every machine (no wall clock, seeded
ops, exact integer books), so these metrics can be compared with zero tolerance.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.config_model import ConfigModel
from sim.errors import KvsimError
from sim.regress.runners.base import MetricValue, RunContext, missing_layer, register_runner

#: ``MemoryMetrics`` fields reported (the others are inputs or tuples)
REPORTED_FIELDS = (
    "useful_bytes",
    "logical_bytes",
    "allocated_bytes",
    "free_bytes",
    "cached_bytes",
    "remainder_bytes",
    "largest_free_bytes",
    "eta_alloc",
    "eta_effective",
    "peak_allocated_bytes",
    "bytes_copied",
    "cow_copies",
    "num_sequences",
)


class GeneratorInputs(ConfigModel):
    """Parameters of ``sim.memory.replay.random_ops`` (seeded, so deterministic)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_ops: int = Field(ge=1, le=1_000_000)
    seed: int = 0
    max_prompt_tokens: int = Field(2048, ge=1)
    max_append_tokens: int = Field(64, ge=1)
    p_fork: float = Field(0.05, ge=0, le=1)
    p_free: float = Field(0.1, ge=0, le=1)
    max_live: int = Field(64, ge=1)
    p_reuse_id: float = Field(0.2, ge=0, le=1)


class AllocatorInputs(ConfigModel):
    """The allocator, the workload (``generator`` or ``trace``) and the request sizes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str | None = None  # allocator kind; may come from the trace's allocator section
    pool_bytes: int | float | str | None = None  # bytes, or '64 MiB' style
    kv_bytes_per_token: int | float | str | None = None
    options: dict[str, Any] = Field(default_factory=dict)  # the kind's options (block_size)
    generator: GeneratorInputs | None = None
    trace: str | None = None  # a sim.memory.replay trace file, relative to the suite
    request_tokens: list[int] = Field(default_factory=list)  # phi_ext at these sizes
    check_invariants: bool = False  # check_invariants() after every op (always at the end)

    @model_validator(mode="after")
    def _one_workload(self) -> AllocatorInputs:
        if (self.generator is None) == (self.trace is None):
            raise ValueError("give exactly one workload: generator or trace")
        if any(n < 1 for n in self.request_tokens):
            raise ValueError("request_tokens must be whole numbers >= 1")
        return self


class AllocatorRunner:
    name: ClassVar[str] = "allocator"
    inputs_model: ClassVar[type[BaseModel]] = AllocatorInputs

    def run(self, inputs: AllocatorInputs, ctx: RunContext) -> dict[str, MetricValue]:
        try:
            from sim.memory import replay as rp
        except ModuleNotFoundError as exc:
            if not (exc.name or "").startswith("sim"):
                raise
            raise missing_layer("allocator", "sim.memory.replay", exc) from None
        settings: dict[str, Any] = {}
        if inputs.trace is not None:
            path = ctx.resolve(inputs.trace)
            if not path.exists():
                raise KvsimError(f"{path}: allocation trace not found")
            trace = rp.load_trace(path)
            ops, settings = trace.ops, dict(trace.allocator)
        else:
            ops = rp.random_ops(**inputs.generator.model_dump())
        settings.update(_allocator_settings(inputs))
        alloc = rp.allocator_from_settings(settings)
        rows = rp.replay(alloc, ops, check=inputs.check_invariants)
        alloc.check_invariants()
        return _metrics(alloc, rows, inputs.request_tokens)


def _allocator_settings(inputs: AllocatorInputs) -> dict[str, Any]:
    out: dict[str, Any] = dict(inputs.options)
    for key in ("kind", "pool_bytes", "kv_bytes_per_token"):
        value = getattr(inputs, key)
        if value is not None:
            out[key] = value
    return out


def _metrics(alloc: Any, rows: list, request_tokens: list[int]) -> dict[str, MetricValue]:
    final = alloc.metrics()
    out: dict[str, MetricValue] = {f: getattr(final, f) for f in REPORTED_FIELDS}
    for n in request_tokens:
        out[f"phi_ext_at_{n}_tokens"] = alloc.metrics(n * alloc.kv_bytes_per_token).phi_ext
    etas = [r.metrics.eta_alloc for r in rows if r.metrics and r.metrics.eta_alloc is not None]
    effs = [r.metrics.eta_effective for r in rows if r.metrics is not None]
    out["eta_alloc_mean"] = sum(etas) / len(etas) if etas else None
    out["eta_effective_mean"] = sum(effs) / len(effs) if effs else None
    out["ops"] = len(rows)
    out["misses"] = sum(1 for r in rows if r.ok is False)
    out["skipped_ops"] = sum(1 for r in rows if r.ok is None)
    return out


register_runner(AllocatorRunner())
