"""Measured calibration curves for the cost model, loaded from ``hardware_profiles/calibration``.

Responsibility: read and validate one calibration file and answer the cost model's
questions. Two schema versions load:

- ``schema_version: 1`` (written by ``kernels_validation/calibrate.py`` from real-kernel
  benchmarks, or a labelled synthetic example): achieved fraction of HBM bandwidth for
  paged decode attention (by block size and context) and for weight streaming (by batch),
  fraction of dense peak for prefill GEMMs (by tokens), pinned host<->device copy fits
  (``overhead + bytes / bandwidth``) and the fixed per-step overhead; optionally
  ``cross_validation``, the held-out error of its step times (``kvsim calibrate RESULTS
  --cross-validate``).
- ``schema_version: 2`` adds ``source: public-measurement`` with its ``origin``
  (repository, commit, licence, path), measured GEMM times keyed by per-GPU shape
  (``linear.shapes``, see ``sim.cost.linear``) with a fitted roofline for unseen shapes
  (``linear.fallback``), fitted element-wise and embedding kernels, and the measured TP
  all-reduce per degree (``allreduce.by_tp``); every section of version 1 becomes
  optional, and ``not_measured`` says which ones the file lacks and what stands in.

``host_link_fits`` (which host link a run's copy engines use) lives in
``sim.cost.host_link`` and is imported from here too.

Invariant: a ``Calibration`` is immutable and valid once built (axes strictly increasing
and positive, every efficiency in (0, 1.5], grids the size of their axes); queries
outside the measured range are clamped to the nearest measured point, never extrapolated
(GEMM tables: see ``sim.cost.linear``). Axes that span decades (block size, context,
batch, tokens) are interpolated linearly in log2 of the axis. Efficiencies are fractions
of the ``reference`` figures stored in the file (normally the accelerator's datasheet). A
version-2 file without ``decode``/``gemm``/``attention`` curves answers those questions
with its fitted ``linear.fallback`` efficiencies (flat curves), so ``roofline_max``
pricing works with either version. Bad files raise a one-line ``ConfigError``
(``file:line: field: message``); this module never imports torch.
"""

from __future__ import annotations

import datetime as dt
import os
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from sim.config_model import ConfigModel
from sim.cost.host_link import COPY_DIRECTIONS, CopyFit, host_link_fits  # noqa: F401  (re-exported)
from sim.cost.kernel_tables import ModelTables
from sim.cost.linear import AllReduceFit, GemmTable, KernelFit
from sim.cost.table_schema import ModelTablesSpec
from sim.errors import ConfigError, UnknownNameError
from sim.lazy_numpy import numpy_on_first_use
from sim.profiles.bounds import (  # the ceilings of the file's times and rates
    MAX_ALLREDUCE_LATENCY_S,
    MAX_BW_BYTES_PER_S,
    MAX_COPY_OVERHEAD_S,
    MAX_EFFICIENCY,
    MAX_FLOPS_PER_S,
    MAX_KERNEL_FLOOR_S,
    MAX_KERNEL_S,
    MAX_STEP_OVERHEAD_S,
)
from sim.profiles.registry import builtin_profiles_dir, load_shipped_yaml
from sim.yamlio import format_validation_error, read_bytes_bounded

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())

ENV_VAR = "KVSIM_PROFILES"
#: ``attention_bw_one``'s table: contexts per chunk (a power of two) and chunks kept per
#: block size (64 x 4,096 contexts x 8 bytes: 2 MiB at most; past it, one array call each)
EFF_CHUNK_BITS = 12
EFF_CHUNKS_MAX = 64


# -- file schema (pydantic) ---------------------------------------------------------------


class _Strict(ConfigModel):
    # defer_build: built on the first calibration file read, not by every import (``kvsim
    # validate`` of a scenario without a calibration never reads one)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


def _increasing(values: Sequence[float], what: str) -> None:
    if any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError(f"{what} must be strictly increasing")


Efficiency = Field(gt=0, le=MAX_EFFICIENCY)


class ReferenceSpec(_Strict):
    """The figures efficiencies are fractions of (normally the datasheet)."""

    hbm_bw_bytes_per_s: float = Field(gt=0, le=MAX_BW_BYTES_PER_S)
    peak_flops_per_s: float = Field(gt=0, le=MAX_FLOPS_PER_S)
    host_link_bw_bytes_per_s: float | None = Field(None, gt=0, le=MAX_BW_BYTES_PER_S)
    basis: str = ""  # where the figures come from, e.g. "datasheet (h200-141gb)"


class AttentionSpec(_Strict):
    """Paged decode attention: efficiency[block_size][context]."""

    block_sizes: list[int] = Field(min_length=1)
    context_tokens: list[int] = Field(min_length=1)
    bw_efficiency: list[list[float]] = Field(min_length=1)

    @model_validator(mode="after")
    def _grid(self) -> AttentionSpec:
        _positive_increasing(self.block_sizes, "block_sizes")
        _positive_increasing(self.context_tokens, "context_tokens")
        if len(self.bw_efficiency) != len(self.block_sizes):
            raise ValueError("bw_efficiency needs one row per block size")
        for row in self.bw_efficiency:
            if len(row) != len(self.context_tokens):
                raise ValueError("each bw_efficiency row needs one value per context")
            _efficiencies(row, "bw_efficiency")
        return self


class CurveSpec(_Strict):
    """One efficiency curve over a positive, increasing axis."""

    x: list[int] = Field(min_length=1)
    efficiency: list[float] = Field(min_length=1)

    @model_validator(mode="after")
    def _curve(self) -> CurveSpec:
        _positive_increasing(self.x, "x")
        if len(self.x) != len(self.efficiency):
            raise ValueError("x and efficiency must have the same length")
        _efficiencies(self.efficiency, "efficiency")
        return self


class CopyFitSpec(_Strict):
    """A pinned transfer takes overhead_s + bytes / bw_bytes_per_s."""

    overhead_s: float = Field(ge=0, le=MAX_COPY_OVERHEAD_S)
    bw_bytes_per_s: float = Field(gt=0, le=MAX_BW_BYTES_PER_S)


class OriginSpec(_Strict):
    """Where public measurements come from (``source: public-measurement``)."""

    repository: str = Field(min_length=1)  # URL of the repository
    commit: str = Field(min_length=7)  # the commit the data was taken from
    licence: str = Field(min_length=1)  # the data's licence, e.g. MIT
    path: str = Field(min_length=1)  # folder(s) of the data in that repository


class KernelFitSpec(_Strict):
    """``kernel_floor_s + max(bytes / (HBM x bw_efficiency), FLOPs / (peak x flops_efficiency))``."""

    kernel_floor_s: float = Field(ge=0, le=MAX_KERNEL_FLOOR_S)  # seconds, per kernel launch
    bw_efficiency: float = Efficiency  # fraction of reference HBM bandwidth
    flops_efficiency: float = Field(1.0, gt=0, le=MAX_EFFICIENCY)  # fraction of reference peak


def _numbers(v: Any) -> Any:
    """A list of numbers, or the same numbers separated by spaces in one string (long
    tables: one YAML scalar instead of thousands parses ~10x faster)."""
    if isinstance(v, str):
        try:
            return [float(x) if any(c in x for c in ".eE") else int(x) for x in v.split()]
        except ValueError:
            raise ValueError("must be numbers separated by spaces") from None
    return v


class GemmShapeSpec(_Strict):
    """One GEMM shape (per GPU: K inputs x N outputs) measured at ``tokens`` (rows M)."""

    k: int = Field(gt=0)
    n: int = Field(gt=0)
    models: list[str] = []  # informational: the models whose layers have this shape
    tokens: list[int] = Field(min_length=1)  # list, or one string of space-separated numbers
    time_s: list[float] = Field(min_length=1)  # seconds per kernel, one per token count

    _lists = field_validator("tokens", "time_s", mode="before")(lambda cls, v: _numbers(v))

    @model_validator(mode="after")
    def _table(self) -> GemmShapeSpec:
        _positive_increasing(self.tokens, "tokens")
        if len(self.tokens) != len(self.time_s):
            raise ValueError("tokens and time_s must have the same length")
        if any(not (0 < t < MAX_KERNEL_S) for t in self.time_s):
            raise ValueError(f"time_s values must lie in (0, {MAX_KERNEL_S:g}) seconds")
        return self


class LinearSpec(_Strict):
    """The linear layers (QKV, output, MLP up/gate, down, LM head)."""

    fallback: KernelFitSpec  # shapes no table covers (and flat v1-style curves)
    shapes: list[GemmShapeSpec] = []

    @model_validator(mode="after")
    def _unique(self) -> LinearSpec:
        keys = [(s.k, s.n) for s in self.shapes]
        if len(set(keys)) != len(keys):
            raise ValueError("each (k, n) shape may appear once")
        return self


class AllReduceTpSpec(_Strict):
    """One TP degree: ``latency_s + 2 (p-1)/p x bytes / bus_bw_bytes_per_s``, and optionally
    a measured curve (``size_bytes`` -> ``time_s``, linear in between; the line beyond)."""

    latency_s: float = Field(ge=0, le=MAX_ALLREDUCE_LATENCY_S)  # seconds per call
    bus_bw_bytes_per_s: float = Field(gt=0, le=MAX_BW_BYTES_PER_S)  # NCCL bus bandwidth, bytes/s
    size_bytes: list[float] = []  # message bytes, increasing (list or space-separated string)
    time_s: list[float] = []  # seconds per call at each size

    _lists = field_validator("size_bytes", "time_s", mode="before")(lambda cls, v: _numbers(v))

    @model_validator(mode="after")
    def _curve(self) -> AllReduceTpSpec:
        if len(self.size_bytes) != len(self.time_s):
            raise ValueError("size_bytes and time_s must have the same length")
        _positive_increasing(self.size_bytes, "size_bytes")
        if any(not (0 < t < MAX_KERNEL_S) for t in self.time_s):
            raise ValueError(f"time_s values must lie in (0, {MAX_KERNEL_S:g}) seconds")
        return self


class AllReduceSpec(_Strict):
    by_tp: dict[int, AllReduceTpSpec] = Field(min_length=1)  # TP degree (>= 2) -> fit

    @field_validator("by_tp")
    @classmethod
    def _degrees(cls, v: dict) -> dict:
        if any(tp < 2 for tp in v):
            raise ValueError("by_tp keys are TP degrees >= 2")
        return v


V2_SECTIONS = ("attention", "decode", "gemm", "copy", "linear", "elementwise", "embedding",
               "allreduce", "kernel_tables")  # fmt: skip


class HeldOutErrorSpec(_Strict):
    """Relative errors (predicted / measured - 1) of one cross-validation split, each group
    predicted by a calibration fitted without it."""

    median_rel_error: float = Field(ge=0)  # median of |error| over the held-out points
    worst_rel_error: float  # the error largest in magnitude, signed
    points: int = Field(ge=1)  # held-out points predicted
    held_out: list[str] = Field(min_length=1)  # the groups held out in turn


class DomainSpec(_Strict):
    """What the calibration was fitted on: a run outside it is extrapolated."""

    accelerator: str | None = None  # the accelerator profile measured (None: not stated)
    models: list[str] = []  # model profiles measured (empty: not stated)
    max_tokens: int | None = Field(None, ge=1)  # the largest step token count measured
    tp: list[int] = []  # tensor-parallel degrees measured (empty: not stated)


class CrossValidationSpec(_Strict):
    """The calibration's held-out error (``kvsim calibrate``; docs/kernels_validation.md)."""

    quantity: str = Field(min_length=1)  # what the errors are of, e.g. "operator time"
    leave_one_model_out: HeldOutErrorSpec | None = None
    leave_one_token_range_out: HeldOutErrorSpec | None = None
    domain: DomainSpec = DomainSpec()

    @model_validator(mode="after")
    def _some_split(self) -> CrossValidationSpec:
        if self.leave_one_model_out is None and self.leave_one_token_range_out is None:
            raise ValueError("needs leave_one_model_out or leave_one_token_range_out")
        return self

    def splits(self) -> dict[str, HeldOutErrorSpec]:
        """The splits present, by name."""
        both = (("leave_one_model_out", self.leave_one_model_out),
                ("leave_one_token_range_out", self.leave_one_token_range_out))  # fmt: skip
        return {k: v for k, v in both if v is not None}


class CalibrationFileV2(_Strict):
    """The YAML file's schema (``schema_version: 2``); version 1's sections become optional."""

    schema_version: Literal[2]
    device: str = Field(min_length=1)
    driver: str
    torch_version: str
    date: str
    source: Literal["gpu", "synthetic", "cpu", "public-measurement"]
    origin: OriginSpec | None = None
    notes: str = ""
    reference: ReferenceSpec
    # seconds per step; null: not measured, the scenario's cost.step_overhead_s applies
    step_overhead_s: float | None = Field(None, ge=0, le=MAX_STEP_OVERHEAD_S)
    not_measured: dict[str, str] = {}  # absent section -> what stands in for it
    attention: AttentionSpec | None = None
    decode: CurveSpec | None = None
    gemm: CurveSpec | None = None
    copy_fits: dict[Literal["h2d", "d2h"], CopyFitSpec] | None = Field(None, alias="copy")
    linear: LinearSpec | None = None
    elementwise: KernelFitSpec | None = None  # norms, RoPE, activation, residual add
    embedding: KernelFitSpec | None = None  # the token-embedding gather, once per step
    allreduce: AllReduceSpec | None = None
    # measured per-layer kernels of whole models (sim.cost.table_schema): name -> tables
    kernel_tables: dict[str, ModelTablesSpec] | None = None
    measured: dict[str, float] = {}
    # held-out error and fitted domain (absent: the file states no held-out error)
    cross_validation: CrossValidationSpec | None = None

    _date = field_validator("date", mode="before")(lambda cls, v: _iso_date(v))
    _copy = field_validator("copy_fits")(lambda cls, v: v if v is None else _both_directions(v))

    @model_validator(mode="after")
    def _consistent(self) -> CalibrationFileV2:
        if self.source == "public-measurement" and self.origin is None:
            raise ValueError("source 'public-measurement' needs an origin")
        if self.linear is None and self.kernel_tables is None and None in (self.attention, self.decode, self.gemm):
            raise ValueError("needs a linear section, kernel_tables, or all of attention, decode and gemm")
        for name in self.not_measured:
            if name not in V2_SECTIONS:
                raise ValueError(f"not_measured: unknown section {name!r}; valid: {', '.join(V2_SECTIONS)}")
            if self.section(name) is not None:
                raise ValueError(f"not_measured names {name!r}, but the file has that section")
        return self

    def section(self, name: str):
        return self.copy_fits if name == "copy" else getattr(self, name)


def _iso_date(v: Any) -> Any:
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, str):
        try:
            dt.date.fromisoformat(v[:10])
        except ValueError:
            raise ValueError("date must be an ISO date, e.g. 2026-11-29") from None
    return v


def _both_directions(v: dict) -> dict:
    missing = [d for d in COPY_DIRECTIONS if d not in v]
    if missing:
        raise ValueError(f"copy needs both directions; missing: {', '.join(missing)}")
    return v


class CalibrationFile(_Strict):
    """The YAML file's schema (``schema_version: 1``)."""

    schema_version: Literal[1]
    device: str = Field(min_length=1)
    driver: str
    torch_version: str
    date: str
    source: Literal["gpu", "synthetic", "cpu"]
    notes: str = ""
    reference: ReferenceSpec
    step_overhead_s: float = Field(ge=0, le=MAX_STEP_OVERHEAD_S)
    attention: AttentionSpec
    decode: CurveSpec  # x = decode batch (sequences)
    gemm: CurveSpec  # x = tokens in the step
    copy_fits: dict[Literal["h2d", "d2h"], CopyFitSpec] = Field(alias="copy")
    measured: dict[str, float] = {}  # informational figures, not used by the cost model
    # held-out error of the step time (``kvsim calibrate RESULTS --cross-validate``: the
    # step overhead refitted without each token range of bench_layer's steps); absent: the
    # file states no held-out error
    cross_validation: CrossValidationSpec | None = None

    _date = field_validator("date", mode="before")(lambda cls, v: _iso_date(v))
    _copy = field_validator("copy_fits")(lambda cls, v: _both_directions(v))


def _positive_increasing(values: Sequence[int], what: str) -> None:
    if any(x <= 0 for x in values):
        raise ValueError(f"{what} must be positive")
    _increasing(values, what)


def _efficiencies(values: Sequence[float], what: str) -> None:
    for v in values:
        if not (0 < v <= MAX_EFFICIENCY):
            raise ValueError(f"{what} values must lie in (0, {MAX_EFFICIENCY}], got {v}")


# -- the object the cost model uses -------------------------------------------------------


def _log2_interp(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    if x <= 0:
        raise ValueError(f"calibration axes are positive; got {x}")
    return float(np.interp(np.log2(x), np.log2(np.asarray(xs, dtype=float)), ys))


@dataclass(frozen=True)
class Calibration:
    """Measured efficiency curves of one device (see the module docstring)."""

    device: str
    driver: str
    torch_version: str
    date: str
    source: str  # 'gpu', 'synthetic', 'cpu' (plumbing only) or 'public-measurement'
    step_overhead_s: float | None  # None: not measured (the scenario's value applies)
    attention_block_sizes: tuple[int, ...]
    attention_context_tokens: tuple[int, ...]
    attention_bw_grid: tuple[tuple[float, ...], ...]  # [block size][context]
    decode_batches: tuple[int, ...]
    decode_bw_curve: tuple[float, ...]
    gemm_tokens: tuple[int, ...]
    gemm_curve: tuple[float, ...]
    copy_fits: tuple[tuple[str, CopyFit], ...]  # (direction, fit); () when not measured
    reference_hbm_bw_bytes_per_s: float
    reference_peak_flops_per_s: float
    reference_host_link_bw_bytes_per_s: float | None = None
    reference_basis: str = ""
    notes: str = ""
    measured: tuple[tuple[str, float], ...] = ()
    path: str | None = None  # the file it was loaded from
    # -- schema version 2 (all empty for a version-1 file) --------------------------------
    schema_version: int = 1
    origin: tuple[tuple[str, str], ...] = ()  # repository, commit, licence, path
    linear_tables: tuple[GemmTable, ...] = ()  # measured GEMM shapes
    linear_fallback: KernelFit | None = None  # fitted roofline of shapes no table covers
    elementwise_fit: KernelFit | None = None  # norms, RoPE, activation, residual add
    embedding_fit: KernelFit | None = None  # the embedding gather, once per step
    allreduce_by_tp: tuple[tuple[int, AllReduceFit], ...] = ()
    not_measured: tuple[tuple[str, str], ...] = ()  # absent section -> stand-in
    sections: tuple[str, ...] = ()  # the optional sections the file has (v2)
    # measured per-layer kernels of whole models (kernel_tables pricing), by table name
    kernel_tables: tuple[tuple[str, ModelTables], ...] = ()
    # held-out error and fitted domain (v2 files that state one; sim.cost.accuracy reads it)
    cross_validation: CrossValidationSpec | None = None

    def __post_init__(self) -> None:
        tables = {(t.k, t.n): t for t in self.linear_tables}
        object.__setattr__(self, "_tables", tables)

    @property
    def attention_measured(self) -> bool:
        """False for a version-2 file without an ``attention`` section."""
        return self.schema_version == 1 or "attention" in self.sections

    def model_tables(self, model) -> ModelTables | None:
        """The kernel tables measured for ``model``'s geometry (a ModelProfile), or None."""
        return next((t for _, t in self.kernel_tables if t.matches(model)), None)

    def gemm_table(self, k: int, n: int) -> GemmTable | None:
        """The measured table of a per-GPU GEMM shape, or None."""
        return self._tables.get((k, n))

    def allreduce_fit(self, tp: int) -> AllReduceFit | None:
        """The measured all-reduce of this TP degree, or None."""
        return dict(self.allreduce_by_tp).get(tp)

    def attention_bw_efficiency(self, block_size: int, context_tokens: int) -> float:
        """Fraction of reference HBM bandwidth reached by paged decode attention."""
        ctx = np.array([context_tokens], dtype=np.float64)
        return float(self.attention_bw_efficiencies(block_size, ctx)[0])

    def attention_bw_efficiencies(self, block_size: int, context_tokens: np.ndarray) -> np.ndarray:
        """``attention_bw_efficiency`` for many contexts at once (bilinear in log2: across
        block sizes first, then across contexts; the scalar query is this with one
        element, so runs of steps price exactly as single steps)."""
        if np.any(context_tokens <= 0):
            raise ValueError("calibration axes are positive; got a context <= 0")
        return self.attention_bw_at(block_size, context_tokens)

    def attention_bw_at(self, block_size: int, context_tokens: np.ndarray) -> np.ndarray:
        """``attention_bw_efficiencies`` of contexts the caller made positive (the pricers'
        mean contexts, ``np.maximum(1.0, ...)``), without the check: priced on every run,
        where the check cost more than the look-up."""
        per_ctx = self._per_context(block_size)
        xs = self.__dict__.get("_log2_contexts")  # the axis, once (priced every step)
        if xs is None:
            xs = np.log2(np.asarray(self.attention_context_tokens, dtype=np.float64))
            self.__dict__["_log2_contexts"] = xs
        return np.interp(np.log2(context_tokens), xs, per_ctx)

    def attention_bw_one(self, block_size: int, context_tokens: float) -> float:
        """``attention_bw_at`` of one finite context, equal bit for bit to that call on a
        one-element array. A context of whole tokens, at least 1 (the pricers' mean
        contexts, ``floor`` then ``max(1, .)``), is read from chunks of 4,096 consecutive
        contexts, each made by one such call on all of them (numpy's log2 and interp give
        an element the same value whatever the array's length:
        ``tests/cost/test_calibration_lookups.py`` checks every context of the first three
        chunks, and contexts spread over 64 more), so a step's attention is priced without
        a numpy call. Other contexts (a fraction, below 1, or past the chunks kept) go
        through the array call itself and make no chunk."""
        k = int(context_tokens)
        tables = self.__dict__.get("_eff_chunks")
        if tables is None:
            tables = self.__dict__["_eff_chunks"] = {}
        chunks = tables.get(block_size)
        if chunks is None:
            chunks = tables[block_size] = {}
        index = k >> EFF_CHUNK_BITS
        chunk = chunks.get(index)
        if chunk is None or k != context_tokens or k < 1:
            if k != context_tokens or k < 1 or len(chunks) >= EFF_CHUNKS_MAX:
                one = np.array([context_tokens], dtype=np.float64)
                return float(self.attention_bw_at(block_size, one)[0])
            chunk = chunks[index] = self._eff_chunk(block_size, index)
        return chunk[k - (index << EFF_CHUNK_BITS)]

    def _eff_chunk(self, block_size: int, index: int) -> array[float]:
        """``attention_bw_at`` of the contexts ``index << EFF_CHUNK_BITS`` onwards, as an
        ``array('d')`` (8 bytes a context; reading one gives a Python float); context 0,
        which no pricer asks, is computed at 1."""
        lo = index << EFF_CHUNK_BITS
        ctx = np.arange(lo, lo + (1 << EFF_CHUNK_BITS), dtype=np.float64)
        if lo == 0:
            ctx[0] = 1.0
        return array("d", self.attention_bw_at(block_size, ctx).tolist())

    def _per_context(self, block_size: int) -> np.ndarray:
        cache = self.__dict__.setdefault("_per_context_cache", {})
        if block_size not in cache:
            cols = zip(*self.attention_bw_grid, strict=True)
            cache[block_size] = np.array(
                [_log2_interp(block_size, self.attention_block_sizes, col) for col in cols]
            )
        return cache[block_size]

    def decode_bw_efficiency(self, batch: int) -> float:
        """Fraction of reference HBM bandwidth reached streaming weights at this batch."""
        return _log2_interp(batch, self.decode_batches, self.decode_bw_curve)

    def gemm_efficiency(self, tokens: int) -> float:
        """Fraction of dense peak (MFU) reached by the linear layers for this many tokens."""
        return _log2_interp(tokens, self.gemm_tokens, self.gemm_curve)

    def copy_fit(self, direction: str = "h2d") -> CopyFit:
        fits = dict(self.copy_fits)
        if direction not in fits:
            raise UnknownNameError("copy direction", direction, list(fits))
        return fits[direction]

    def copy_time_s(self, n_bytes: int, direction: str = "h2d") -> float:
        """Seconds for one pinned transfer of ``n_bytes``; 0 bytes cost nothing (no call)."""
        if n_bytes < 0:
            raise ValueError(f"n_bytes must be >= 0, got {n_bytes}")
        if n_bytes == 0:
            return 0.0
        fit = self.copy_fit(direction)
        return fit.overhead_s + n_bytes / fit.bw_bytes_per_s

    def copy_bw_bytes_per_s(self, direction: str = "h2d") -> float:
        """Asymptotic pinned bandwidth of one direction (large transfers)."""
        return self.copy_fit(direction).bw_bytes_per_s

    @property
    def measured_figures(self) -> dict[str, float]:
        return dict(self.measured)

    @classmethod
    def uniform(
        cls,
        *,
        attention: float = 1.0,
        decode: float = 1.0,
        gemm: float = 1.0,
        copy_bw_bytes_per_s: float = 54e9,
        copy_overhead_s: float = 0.0,
        step_overhead_s: float = 0.0,
        device: str = "uniform",
        reference_hbm_bw_bytes_per_s: float = 1.0,
        reference_peak_flops_per_s: float = 1.0,
    ) -> Calibration:
        """Flat curves (handy in tests): every query returns the given constant."""
        fit = CopyFit(copy_overhead_s, copy_bw_bytes_per_s)
        return cls(
            device=device, driver="", torch_version="", date="1970-01-01", source="synthetic",
            step_overhead_s=step_overhead_s, attention_block_sizes=(16,),
            attention_context_tokens=(1,), attention_bw_grid=((attention,),),
            decode_batches=(1,), decode_bw_curve=(decode,), gemm_tokens=(1,),
            gemm_curve=(gemm,), copy_fits=(("h2d", fit), ("d2h", fit)),
            reference_hbm_bw_bytes_per_s=reference_hbm_bw_bytes_per_s,
            reference_peak_flops_per_s=reference_peak_flops_per_s,
        )  # fmt: skip


def calibration_from_spec(spec: CalibrationFile | CalibrationFileV2, path: str | None = None) -> Calibration:
    """Build the immutable ``Calibration`` from a validated file (either version)."""
    if isinstance(spec, CalibrationFileV2):
        return _from_v2(spec, path)
    ref = spec.reference
    return Calibration(
        device=spec.device, driver=spec.driver, torch_version=spec.torch_version,
        date=spec.date, source=spec.source, step_overhead_s=spec.step_overhead_s,
        attention_block_sizes=tuple(spec.attention.block_sizes),
        attention_context_tokens=tuple(spec.attention.context_tokens),
        attention_bw_grid=tuple(tuple(r) for r in spec.attention.bw_efficiency),
        decode_batches=tuple(spec.decode.x), decode_bw_curve=tuple(spec.decode.efficiency),
        gemm_tokens=tuple(spec.gemm.x), gemm_curve=tuple(spec.gemm.efficiency),
        copy_fits=_copy_fits(spec.copy_fits),
        reference_hbm_bw_bytes_per_s=ref.hbm_bw_bytes_per_s,
        reference_peak_flops_per_s=ref.peak_flops_per_s,
        reference_host_link_bw_bytes_per_s=ref.host_link_bw_bytes_per_s,
        reference_basis=ref.basis, notes=spec.notes, measured=tuple(sorted(spec.measured.items())), path=path,
        cross_validation=spec.cross_validation,
    )  # fmt: skip


def _copy_fits(spec: dict | None) -> tuple[tuple[str, CopyFit], ...]:
    if spec is None:
        return ()
    return tuple((d, CopyFit(spec[d].overhead_s, spec[d].bw_bytes_per_s)) for d in COPY_DIRECTIONS)


def _kernel_fit(spec: KernelFitSpec | None) -> KernelFit | None:
    if spec is None:
        return None
    return KernelFit(spec.kernel_floor_s, spec.bw_efficiency, spec.flops_efficiency)


def _from_v2(spec: CalibrationFileV2, path: str | None) -> Calibration:
    """Version 2: absent v1 curves become flat curves at the linear fallback's efficiencies."""
    ref, lin = spec.reference, spec.linear
    bw = lin.fallback.bw_efficiency if lin else 1.0
    fl = lin.fallback.flops_efficiency if lin else 1.0
    att = spec.attention or AttentionSpec(block_sizes=[16], context_tokens=[1], bw_efficiency=[[bw]])
    dec = spec.decode or CurveSpec(x=[1], efficiency=[bw])
    gem = spec.gemm or CurveSpec(x=[1], efficiency=[fl])
    tables = tuple(GemmTable(s.k, s.n, tuple(s.tokens), tuple(s.time_s), tuple(s.models))
                   for s in lin.shapes) if lin else ()  # fmt: skip
    allreduce = ()
    if spec.allreduce is not None:
        allreduce = tuple(
            (tp, AllReduceFit(f.latency_s, f.bus_bw_bytes_per_s, tuple(f.size_bytes), tuple(f.time_s)))
            for tp, f in sorted(spec.allreduce.by_tp.items())
        )
    return Calibration(
        device=spec.device, driver=spec.driver, torch_version=spec.torch_version,
        date=spec.date, source=spec.source, step_overhead_s=spec.step_overhead_s,
        attention_block_sizes=tuple(att.block_sizes), attention_context_tokens=tuple(att.context_tokens),
        attention_bw_grid=tuple(tuple(r) for r in att.bw_efficiency),
        decode_batches=tuple(dec.x), decode_bw_curve=tuple(dec.efficiency),
        gemm_tokens=tuple(gem.x), gemm_curve=tuple(gem.efficiency),
        copy_fits=_copy_fits(spec.copy_fits),
        reference_hbm_bw_bytes_per_s=ref.hbm_bw_bytes_per_s,
        reference_peak_flops_per_s=ref.peak_flops_per_s,
        reference_host_link_bw_bytes_per_s=ref.host_link_bw_bytes_per_s,
        reference_basis=ref.basis, notes=spec.notes, measured=tuple(sorted(spec.measured.items())),
        path=path, schema_version=2,
        origin=tuple(spec.origin.model_dump().items()) if spec.origin else (),
        linear_tables=tables, linear_fallback=_kernel_fit(lin.fallback) if lin else None,
        elementwise_fit=_kernel_fit(spec.elementwise), embedding_fit=_kernel_fit(spec.embedding),
        allreduce_by_tp=allreduce, not_measured=tuple(spec.not_measured.items()),
        sections=tuple(n for n in V2_SECTIONS if spec.section(n) is not None),
        kernel_tables=_kernel_tables(spec, path), cross_validation=spec.cross_validation,
    )  # fmt: skip


def _kernel_tables(spec: CalibrationFileV2, path: str | None) -> tuple[tuple[str, ModelTables], ...]:
    if not spec.kernel_tables:
        return ()
    out = []
    for name, tables in spec.kernel_tables.items():
        try:
            out.append((name, tables.build()))
        except ValueError as exc:  # a grid hole no rule fills: the file's fault, one line
            raise ConfigError(f"{path or '<calibration>'}: kernel_tables.{name}: {exc}") from None
    return tuple(out)


SCHEMAS = {1: CalibrationFile, 2: CalibrationFileV2}


def validate_mapping(data: Any, source: str = "<calibration>", lines=None) -> CalibrationFile | CalibrationFileV2:
    """Validate parsed YAML (either schema version); a problem becomes one ``ConfigError`` line."""
    if not isinstance(data, dict):
        raise ConfigError("a calibration file must be a mapping of fields", location=source)
    version = data.get("schema_version")
    if version not in SCHEMAS or isinstance(version, bool):
        where = f"{source}:{(lines or {}).get(('schema_version',), '')}".rstrip(":")
        raise ConfigError(f"{where}: schema_version: must be one of 1, 2 (got {version!r})")
    try:
        return SCHEMAS[version].model_validate(data)
    except ValidationError as exc:
        msgs = format_validation_error(exc, source, lines or {}).splitlines()
        more = f" (and {len(msgs) - 1} more)" if len(msgs) > 1 else ""
        raise ConfigError(msgs[0] + more) from None


# -- finding files ------------------------------------------------------------------------


def default_search_dirs() -> list[Path]:
    """User folders first (each ``$KVSIM_PROFILES`` entry + /calibration), then the shipped one."""
    env = os.environ.get(ENV_VAR, "")
    dirs = [Path(p) / "calibration" for p in env.split(os.pathsep) if p]
    # the shipped folder wherever the install put it (package data in a wheel)
    dirs.append(builtin_profiles_dir() / "calibration")
    return dirs


def available_calibrations(search_dirs: list[Path] | None = None) -> dict[str, Path]:
    """name -> file for every calibration found (earlier folders shadow later ones)."""
    found: dict[str, Path] = {}
    for d in default_search_dirs() if search_dirs is None else search_dirs:
        if Path(d).is_dir():
            for f in sorted(Path(d).glob("*.yaml")):
                found.setdefault(f.stem, f)
    return found


def _looks_like_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or os.sep in name or "/" in name


def load_calibration(name_or_path: str, search_dirs: list[Path] | None = None) -> Calibration:
    """Load a calibration by file path or by name (``<name>.yaml`` in the search folders)."""
    if _looks_like_path(str(name_or_path)) or Path(name_or_path).is_file():
        path = Path(name_or_path)
    else:
        found = available_calibrations(search_dirs)
        if name_or_path not in found:
            raise UnknownNameError("calibration", name_or_path, list(found))
        path = found[name_or_path]
    try:  # keyed by content, so an edited file is read again
        raw = read_bytes_bounded(path, 1 << 24)  # a regular file only: never /dev/zero
        key = (str(path.resolve()), len(raw), hash(raw)) if raw else None
    except (OSError, ConfigError):
        key = None  # load_yaml reports the problem
    if key is not None and key in _LOADED:
        return _LOADED[key]  # immutable: a run's resolve and cost model share one load
    data, lines = load_shipped_yaml(path)
    spec = validate_mapping(data, str(path), lines)
    cal = calibration_from_spec(spec, str(path))
    if key is not None:
        if len(_LOADED) >= 16:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = cal
    return cal


_LOADED: dict[tuple, Calibration] = {}  # (file, size, content hash) -> calibration


def as_mapping(cal: Calibration) -> Mapping[str, Any]:
    """The file form of a calibration (for round trips and for writing files)."""
    if cal.schema_version == 2:
        return _as_mapping_v2(cal)
    return {
        "schema_version": 1, "device": cal.device, "driver": cal.driver,
        "torch_version": cal.torch_version, "date": cal.date, "source": cal.source,
        "notes": cal.notes, "reference": _reference(cal), "step_overhead_s": cal.step_overhead_s,
        **_v1_sections(cal), "measured": dict(cal.measured),
    } | _cross_validation(cal)  # fmt: skip


def _cross_validation(cal: Calibration) -> dict:
    cv = cal.cross_validation
    return {} if cv is None else {"cross_validation": cv.model_dump(exclude_none=True)}


def _reference(cal: Calibration) -> dict:
    return {
        "hbm_bw_bytes_per_s": cal.reference_hbm_bw_bytes_per_s,
        "peak_flops_per_s": cal.reference_peak_flops_per_s,
        "host_link_bw_bytes_per_s": cal.reference_host_link_bw_bytes_per_s,
        "basis": cal.reference_basis,
    }


def _v1_sections(cal: Calibration) -> dict:
    return {
        "attention": {
            "block_sizes": list(cal.attention_block_sizes),
            "context_tokens": list(cal.attention_context_tokens),
            "bw_efficiency": [list(r) for r in cal.attention_bw_grid],
        },
        "decode": {"x": list(cal.decode_batches), "efficiency": list(cal.decode_bw_curve)},
        "gemm": {"x": list(cal.gemm_tokens), "efficiency": list(cal.gemm_curve)},
        "copy": {d: {"overhead_s": f.overhead_s, "bw_bytes_per_s": f.bw_bytes_per_s}
                 for d, f in cal.copy_fits},
    }  # fmt: skip


def _fit_mapping(fit: KernelFit, flops: bool) -> dict:
    out = {"kernel_floor_s": fit.kernel_floor_s, "bw_efficiency": fit.bw_efficiency}
    return {**out, "flops_efficiency": fit.flops_efficiency} if flops else out


def _as_mapping_v2(cal: Calibration) -> dict:
    out: dict[str, Any] = {
        "schema_version": 2, "device": cal.device, "driver": cal.driver,
        "torch_version": cal.torch_version, "date": cal.date, "source": cal.source,
    }  # fmt: skip
    if cal.origin:
        out["origin"] = dict(cal.origin)
    out.update(notes=cal.notes, reference=_reference(cal), step_overhead_s=cal.step_overhead_s)
    if cal.not_measured:
        out["not_measured"] = dict(cal.not_measured)
    v1 = _v1_sections(cal)
    out.update({name: v1[name] for name in ("attention", "decode", "gemm", "copy") if name in cal.sections})
    if cal.linear_fallback is not None:
        out["linear"] = {
            "fallback": _fit_mapping(cal.linear_fallback, flops=True),
            "shapes": [{"k": t.k, "n": t.n, "models": list(t.models), "tokens": list(t.tokens),
                        "time_s": list(t.time_s)} for t in cal.linear_tables],
        }  # fmt: skip
    for name, fit in (("elementwise", cal.elementwise_fit), ("embedding", cal.embedding_fit)):
        if fit is not None:
            out[name] = _fit_mapping(fit, flops=False)
    if cal.allreduce_by_tp:
        out["allreduce"] = {"by_tp": {tp: {
            "latency_s": f.latency_s, "bus_bw_bytes_per_s": f.bus_bw_bytes_per_s,
            "size_bytes": list(f.size_bytes), "time_s": list(f.time_s)}
            for tp, f in cal.allreduce_by_tp}}  # fmt: skip
    if cal.kernel_tables:
        from sim.cost.table_schema import tables_mapping

        out["kernel_tables"] = {name: tables_mapping(t) for name, t in cal.kernel_tables}
    out["measured"] = dict(cal.measured)
    return out | _cross_validation(cal)
