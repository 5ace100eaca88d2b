"""The ``kernel_tables`` section of a version-2 calibration file (pydantic), and its build.

Responsibility: validate measured per-layer kernel tables as a calibration file states
them and build the immutable ``sim.cost.kernel_tables`` objects. Layout (times in
microseconds, as the profiler writes them; long lists as one string of space-separated
numbers, ``nan`` where a grid point was not measured)::

    kernel_tables:
      <name>:                       # e.g. llama-3.1-8b (informational key)
        source_model: meta-llama/Llama-3.1-8B
        geometry: {num_layers: 32, d_model: 4096, ...}   # matched against the model profile
        layer_ops: {layernorm: 2, qkv_proj: 1, ...}       # dense operators per layer
        step_ops: [embedding, final_layernorm]           # once per step
        sequence_ops: [lm_head, sampler]                 # over the scheduled sequences
        by_tp:
          1:
            dense: {tokens: "1 2 ...", time_us: {qkv_proj: "...", ...}}
            per_sequence: {sequences: "1 2 ...", time_us: {lm_head: "...", sampler: "..."}}
            attention: {prefill_chunk: [..], kv_prefill: [..], n_decode: [..],
                        kv_decode: [..], time_us: "..."}   # C order over the four axes
            moe: {tokens: [..], activated_experts: [..], time_us: "..."}  # MoE models
                                    # (needed at the lowest degree; the others reuse it)
            skew_fit:               # optional: the attention's context-skew correction
              alpha_default: 0.0649          # pooled alpha (a batch with no bucket)
              prefill_chunk: [0, 16, ..]     # chunk sizes with buckets (exact match)
              n_decode_edges: [0, 2, ..]     # bucket (e[i], e[i+1]] of each axis
              skew_rate_edges: [..]
              kv_decode_max_edges: [..]
              kv_prefill_edges: [..]
              alpha: "..."                   # C order over the five axes, nan = no bucket

Invariant: a validated section builds without error: axes strictly increasing, grids the
size of their axes, every operator a ``*_ops`` list names present in every TP degree's
tables, the attention grid's holes of the kinds ``fill_attention_holes`` fills, times
finite and in [0, 1) seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from sim.config_model import ConfigModel
from sim.cost.kernel_tables import (
    GEOMETRY_FIELDS,
    AttentionGrid,
    Curve,
    ModelTables,
    MoeGrid,
    SkewFit,
    TableSet,
    fill_attention_holes,
    fill_moe_holes,
)
from sim.lazy_numpy import numpy_on_first_use

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())

US = 1e-6
MAX_TIME_US = 1e6  # one second per kernel of one layer: anything above is a unit mistake


class _Strict(ConfigModel):
    # tables hold NaN where unmeasured; defer_build: built on the first table read, not by
    # every import
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def _numbers(v: Any) -> Any:
    """A list of numbers, or the same numbers in one space-separated string (``nan``
    allowed where a grid says "not measured")."""
    if isinstance(v, str):
        try:
            return [float(x) for x in v.split()]
        except ValueError:
            raise ValueError("must be numbers separated by spaces") from None
    return v


def _axis(values: list[float], what: str, first: int = 1) -> None:
    if not values:
        raise ValueError(f"{what} is empty")
    if values[0] < first or any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError(f"{what} must be strictly increasing from >= {first}")


def _times(values: list[float], what: str, nan_ok: bool = False) -> None:
    arr = np.asarray(values, dtype=np.float64)
    bad = ~np.isnan(arr) if nan_ok else np.ones(arr.shape, dtype=bool)
    vals = arr[bad]
    if np.isnan(vals).any() or np.any(vals < 0) or np.any(vals >= MAX_TIME_US):
        raise ValueError(f"{what} values must be microseconds in [0, {MAX_TIME_US:.0f})")


class DenseSpec(_Strict):
    """Dense operators by the step's token count."""

    tokens: list[int]
    time_us: dict[str, list[float]] = Field(min_length=1)

    _lists = field_validator("tokens", mode="before")(lambda cls, v: _numbers(v))

    @field_validator("time_us", mode="before")
    @classmethod
    def _ops(cls, v: Any) -> Any:
        return {k: _numbers(x) for k, x in v.items()} if isinstance(v, dict) else v

    @model_validator(mode="after")
    def _shape(self) -> DenseSpec:
        _axis(self.tokens, "tokens")
        for name, t in self.time_us.items():
            if len(t) != len(self.tokens):
                raise ValueError(f"time_us.{name} needs one value per token count")
            _times(t, f"time_us.{name}")
        return self


class PerSequenceSpec(_Strict):
    """Operators over the scheduled sequences (LM head on each one's last token, sampler)."""

    sequences: list[int]
    time_us: dict[str, list[float]] = Field(min_length=1)

    _lists = field_validator("sequences", mode="before")(lambda cls, v: _numbers(v))
    _ops = field_validator("time_us", mode="before")(
        lambda cls, v: {k: _numbers(x) for k, x in v.items()} if isinstance(v, dict) else v
    )

    @model_validator(mode="after")
    def _shape(self) -> PerSequenceSpec:
        _axis(self.sequences, "sequences")
        for name, t in self.time_us.items():
            if len(t) != len(self.sequences):
                raise ValueError(f"time_us.{name} needs one value per sequence count")
            _times(t, f"time_us.{name}")
        return self


class AttentionGridSpec(_Strict):
    """One layer's attention kernel over (prefill chunk, its history, decodes, their context)."""

    prefill_chunk: list[int]
    kv_prefill: list[int]
    n_decode: list[int]
    kv_decode: list[int]
    time_us: list[float]

    _lists = field_validator("prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us",
                             mode="before")(lambda cls, v: _numbers(v))  # fmt: skip

    @model_validator(mode="after")
    def _shape(self) -> AttentionGridSpec:
        for name in ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode"):
            _axis(getattr(self, name), name, first=0)
            if getattr(self, name)[0] != 0:
                raise ValueError(f"{name} must start at 0")
        size = len(self.prefill_chunk) * len(self.kv_prefill) * len(self.n_decode) * len(self.kv_decode)
        if len(self.time_us) != size:
            raise ValueError(f"time_us needs {size} values (the four axes' product), got {len(self.time_us)}")
        _times(self.time_us, "time_us", nan_ok=True)
        return self

    def build(self) -> AttentionGrid:
        axes = (self.prefill_chunk, self.kv_prefill, self.n_decode, self.kv_decode)
        grid = np.asarray(self.time_us, dtype=np.float64).reshape([len(a) for a in axes]) * US
        return AttentionGrid(*(tuple(int(x) for x in a) for a in axes), fill_attention_holes(*axes, grid))


class MoeGridSpec(_Strict):
    """The routed expert layer by tokens and activated experts."""

    tokens: list[int]
    activated_experts: list[int]
    time_us: list[float]

    _lists = field_validator("tokens", "activated_experts", "time_us", mode="before")(
        lambda cls, v: _numbers(v)
    )

    @model_validator(mode="after")
    def _shape(self) -> MoeGridSpec:
        _axis(self.tokens, "tokens")
        _axis(self.activated_experts, "activated_experts")
        if len(self.time_us) != len(self.tokens) * len(self.activated_experts):
            raise ValueError("time_us needs len(tokens) x len(activated_experts) values")
        _times(self.time_us, "time_us", nan_ok=True)
        return self

    def build(self) -> MoeGrid:
        grid = np.asarray(self.time_us, dtype=np.float64).reshape(len(self.tokens), -1) * US
        return MoeGrid(tuple(int(x) for x in self.tokens),
                       tuple(int(x) for x in self.activated_experts),
                       fill_moe_holes(self.tokens, self.activated_experts, grid))  # fmt: skip


class SkewFitSpec(_Strict):
    """LLMServingSim's skew correction of one TP degree (``sim.cost.kernel_tables.SkewFit``)."""

    alpha_default: float = Field(allow_inf_nan=False)
    prefill_chunk: list[int]
    n_decode_edges: list[float]
    skew_rate_edges: list[float]
    kv_decode_max_edges: list[float]
    kv_prefill_edges: list[float]
    alpha: list[float]

    _lists = field_validator("prefill_chunk", "n_decode_edges", "skew_rate_edges", "kv_decode_max_edges",
                             "kv_prefill_edges", "alpha", mode="before")(lambda cls, v: _numbers(v))  # fmt: skip

    @model_validator(mode="after")
    def _shape(self) -> SkewFitSpec:
        _axis(self.prefill_chunk, "prefill_chunk", first=0)
        size = len(self.prefill_chunk)
        for name in ("n_decode_edges", "skew_rate_edges", "kv_decode_max_edges", "kv_prefill_edges"):
            edges = getattr(self, name)
            if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
                raise ValueError(f"{name} must be at least two strictly increasing bucket edges")
            if not all(np.isfinite(edges)):
                raise ValueError(f"{name} must be finite")
            size *= len(edges) - 1
        if len(self.alpha) != size:
            raise ValueError(f"alpha needs {size} values (prefill_chunk x the buckets of each axis), "
                             f"got {len(self.alpha)}")  # fmt: skip
        if np.isinf(np.asarray(self.alpha, dtype=np.float64)).any():
            raise ValueError("alpha values must be finite (nan = no bucket)")
        return self

    def build(self) -> SkewFit:
        edges = (self.n_decode_edges, self.skew_rate_edges, self.kv_decode_max_edges, self.kv_prefill_edges)
        shape = [len(self.prefill_chunk)] + [len(e) - 1 for e in edges]
        return SkewFit(self.alpha_default, tuple(int(x) for x in self.prefill_chunk),
                       *(tuple(float(x) for x in e) for e in edges),
                       np.asarray(self.alpha, dtype=np.float64).reshape(shape))  # fmt: skip


class TpTablesSpec(_Strict):
    """The tables measured at one TP degree (per-GPU shapes)."""

    dense: DenseSpec
    per_sequence: PerSequenceSpec
    attention: AttentionGridSpec
    moe: MoeGridSpec | None = None
    skew_fit: SkewFitSpec | None = None


class ModelTablesSpec(_Strict):
    """One model's tables on this GPU, per TP degree."""

    source_model: str = Field(min_length=1)
    geometry: dict[str, int] = Field(min_length=1)
    layer_ops: dict[str, int] = Field(min_length=1)  # operator -> runs per layer (>= 1)
    step_ops: list[str] = []
    sequence_ops: list[str] = Field(min_length=1)
    by_tp: dict[int, TpTablesSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> ModelTablesSpec:
        unknown = sorted(set(self.geometry) - set(GEOMETRY_FIELDS))
        if unknown:
            raise ValueError(f"geometry: unknown field {unknown[0]!r}; valid: {', '.join(GEOMETRY_FIELDS)}")
        if any(n < 1 for n in self.layer_ops.values()):
            raise ValueError("layer_ops counts must be >= 1")
        bad = sorted(k for k, n in self.geometry.items() if n < 1)
        if bad:
            raise ValueError(f"geometry: {bad[0]} must be >= 1, got {self.geometry[bad[0]]}")
        moe = "num_experts" in self.geometry
        for tp, tables in self.by_tp.items():
            if tp < 1:
                raise ValueError("by_tp keys are TP degrees >= 1")
            dense, seq = tables.dense.time_us, tables.per_sequence.time_us
            for op in (*self.layer_ops, *self.step_ops):
                if op not in dense:
                    raise ValueError(f"by_tp.{tp}.dense has no {op!r}; it has: {', '.join(dense)}")
            for op in self.sequence_ops:
                if op not in seq:
                    raise ValueError(f"by_tp.{tp}.per_sequence has no {op!r}; it has: {', '.join(seq)}")
        if moe and self.by_tp[min(self.by_tp)].moe is None:
            raise ValueError(f"by_tp.{min(self.by_tp)}: a MoE geometry (num_experts) needs a moe table")
        if moe and "experts_per_token" not in self.geometry:
            raise ValueError("geometry: num_experts needs experts_per_token")
        return self

    def build(self) -> ModelTables:
        return ModelTables(self.source_model, tuple(sorted(self.geometry.items())),
                           tuple((tp, self._tp(tp, t)) for tp, t in sorted(self.by_tp.items())))  # fmt: skip

    def _tp(self, tp: int, t: TpTablesSpec) -> TableSet:
        # the profiler measures the expert layer once, at the lowest degree (one rank's
        # view under expert parallelism); other degrees use that table
        moe = t.moe if t.moe is not None else self.by_tp[min(self.by_tp)].moe
        dense = tuple((op, Curve(tuple(t.dense.tokens), tuple(x * US for x in v)))
                      for op, v in t.dense.time_us.items())  # fmt: skip
        seq = tuple((op, Curve(tuple(t.per_sequence.sequences), tuple(x * US for x in v)))
                    for op, v in t.per_sequence.time_us.items())  # fmt: skip
        return TableSet(
            tp=tp, layer_ops=tuple(self.layer_ops.items()), step_ops=tuple(self.step_ops),
            sequence_ops=tuple(self.sequence_ops), dense=dense, sequence=seq,
            attention=t.attention.build(), moe=moe.build() if moe is not None else None,
            skew=t.skew_fit.build() if t.skew_fit is not None else None,
        )  # fmt: skip


def tables_mapping(tables: ModelTables) -> dict:
    """The file form of built tables (holes already filled; microseconds)."""
    first = tables.by_tp[0][1]
    return {
        "source_model": tables.source_model,
        "geometry": dict(tables.geometry),
        "layer_ops": dict(first.layer_ops),
        "step_ops": list(first.step_ops),
        "sequence_ops": list(first.sequence_ops),
        "by_tp": {tp: _tp_mapping(t) for tp, t in tables.by_tp},
    }


def _us(values) -> list[float]:
    return [float(v) / US for v in np.ravel(values)]


def _tp_mapping(t: TableSet) -> dict:
    dense = dict(t.dense)
    seq = dict(t.sequence)
    a = t.attention
    out = {
        "dense": {"tokens": [int(x) for x in next(iter(dense.values())).x],
                  "time_us": {op: _us(c.time_s) for op, c in dense.items()}},
        "per_sequence": {"sequences": [int(x) for x in next(iter(seq.values())).x],
                         "time_us": {op: _us(c.time_s) for op, c in seq.items()}},
        "attention": {"prefill_chunk": list(a.prefill_chunk), "kv_prefill": list(a.kv_prefill),
                      "n_decode": list(a.n_decode), "kv_decode": list(a.kv_decode),
                      "time_us": _us(a.time_s)},
    }  # fmt: skip
    if t.moe is not None:
        out["moe"] = {"tokens": list(t.moe.tokens), "activated_experts": list(t.moe.activated_experts),
                      "time_us": _us(t.moe.time_s)}  # fmt: skip
    if t.skew is not None:
        k = t.skew
        out["skew_fit"] = {"alpha_default": k.alpha_default, "prefill_chunk": list(k.prefill_chunk),
                           "n_decode_edges": list(k.n_decode_edges), "skew_rate_edges": list(k.skew_rate_edges),
                           "kv_decode_max_edges": list(k.kv_decode_max_edges),
                           "kv_prefill_edges": list(k.kv_prefill_edges),
                           "alpha": [float(v) for v in np.ravel(k.alpha)]}  # fmt: skip
    return out
