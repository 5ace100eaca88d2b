"""Measured calibration curves for the cost model, loaded from ``hardware_profiles/calibration``.

Responsibility: read and validate one calibration file (written by
``kernels_validation/calibrate.py`` from real-kernel benchmarks, or a labelled synthetic
example) and answer the cost model's questions with piecewise-linear interpolation:
achieved fraction of HBM bandwidth for paged decode attention (by block size and context)
and for weight streaming (by batch), fraction of dense peak for prefill GEMMs (by tokens),
pinned host<->device copy time (``overhead + bytes / bandwidth``) and the fixed per-step
overhead. ``host_link_fits`` decides which host link a run's copy engines use: per figure,
the scenario's explicit value, else the calibration's fit of that direction, else the
accelerator profile's bandwidth with no per-transfer overhead.

Invariant: a ``Calibration`` is immutable and valid once built (axes strictly increasing
and positive, every efficiency in (0, 1.5], grids the size of their axes); queries
outside the measured range are clamped to the nearest measured point, never extrapolated.
Axes that span decades (block size, context, batch, tokens) are interpolated linearly in
log2 of the axis. Efficiencies are fractions of the ``reference`` figures stored in the
file (normally the accelerator's datasheet). Bad files raise a one-line ``ConfigError``
(``file:line: field: message``); this module never imports torch.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sim.errors import ConfigError, UnknownNameError
from sim.profiles.registry import builtin_profiles_dir
from sim.yamlio import format_validation_error, load_yaml

ENV_VAR = "KVSIM_PROFILES"
COPY_DIRECTIONS = ("h2d", "d2h")
MAX_EFFICIENCY = 1.5  # above 1 only for cache effects; a typo like 95 for 0.95 fails


# -- file schema (pydantic) ---------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _increasing(values: Sequence[float], what: str) -> None:
    if any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError(f"{what} must be strictly increasing")


Efficiency = Field(gt=0, le=MAX_EFFICIENCY)


class ReferenceSpec(_Strict):
    """The figures efficiencies are fractions of (normally the datasheet)."""

    hbm_bw_bytes_per_s: float = Field(gt=0)
    peak_flops_per_s: float = Field(gt=0)
    host_link_bw_bytes_per_s: float | None = Field(None, gt=0)
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

    overhead_s: float = Field(ge=0)
    bw_bytes_per_s: float = Field(gt=0)


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
    step_overhead_s: float = Field(ge=0)
    attention: AttentionSpec
    decode: CurveSpec  # x = decode batch (sequences)
    gemm: CurveSpec  # x = tokens in the step
    copy_fits: dict[Literal["h2d", "d2h"], CopyFitSpec] = Field(alias="copy")
    measured: dict[str, float] = {}  # informational figures, not used by the cost model

    @field_validator("date", mode="before")
    @classmethod
    def _date(cls, v: Any) -> Any:
        if isinstance(v, dt.date):
            return v.isoformat()
        if isinstance(v, str):
            try:
                dt.date.fromisoformat(v[:10])
            except ValueError:
                raise ValueError("date must be an ISO date, e.g. 2026-11-29") from None
        return v

    @field_validator("copy_fits")
    @classmethod
    def _both_directions(cls, v: dict) -> dict:
        missing = [d for d in COPY_DIRECTIONS if d not in v]
        if missing:
            raise ValueError(f"copy needs both directions; missing: {', '.join(missing)}")
        return v


def _positive_increasing(values: Sequence[int], what: str) -> None:
    if any(x <= 0 for x in values):
        raise ValueError(f"{what} must be positive")
    _increasing(values, what)


def _efficiencies(values: Sequence[float], what: str) -> None:
    for v in values:
        if not (0 < v <= MAX_EFFICIENCY):
            raise ValueError(f"{what} values must lie in (0, {MAX_EFFICIENCY}], got {v}")


# -- the object the cost model uses -------------------------------------------------------


@dataclass(frozen=True)
class CopyFit:
    """``t = overhead_s + bytes / bw_bytes_per_s`` for one direction, pinned memory."""

    overhead_s: float
    bw_bytes_per_s: float


def host_link_fits(
    calibration: Calibration | None,
    profile_bw_bytes_per_s: float,
    *,
    bw_bytes_per_s: float | None = None,
    overhead_s: float | None = None,
) -> dict[str, CopyFit]:
    """The host link of each direction (``h2d``, ``d2h``) for a run's copy engines.

    Precedence, figure by figure: the scenario's explicit ``bw_bytes_per_s`` /
    ``overhead_s`` (one value for both directions) win; else the calibration's pinned copy
    fit of that direction (a measurement of this device); else the accelerator profile's
    bandwidth and no per-transfer overhead.
    """
    fits: dict[str, CopyFit] = {}
    for direction in COPY_DIRECTIONS:
        fit = calibration.copy_fit(direction) if calibration is not None else None
        bw = bw_bytes_per_s or (fit.bw_bytes_per_s if fit else profile_bw_bytes_per_s)
        over = (fit.overhead_s if fit else 0.0) if overhead_s is None else overhead_s
        fits[direction] = CopyFit(over, bw)
    return fits


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
    source: str  # 'gpu', 'synthetic' or 'cpu' (a CPU quick run: plumbing only)
    step_overhead_s: float
    attention_block_sizes: tuple[int, ...]
    attention_context_tokens: tuple[int, ...]
    attention_bw_grid: tuple[tuple[float, ...], ...]  # [block size][context]
    decode_batches: tuple[int, ...]
    decode_bw_curve: tuple[float, ...]
    gemm_tokens: tuple[int, ...]
    gemm_curve: tuple[float, ...]
    copy_fits: tuple[tuple[str, CopyFit], ...]  # (direction, fit)
    reference_hbm_bw_bytes_per_s: float
    reference_peak_flops_per_s: float
    reference_host_link_bw_bytes_per_s: float | None = None
    reference_basis: str = ""
    notes: str = ""
    measured: tuple[tuple[str, float], ...] = ()
    path: str | None = None  # the file it was loaded from

    def attention_bw_efficiency(self, block_size: int, context_tokens: int) -> float:
        """Fraction of reference HBM bandwidth reached by paged decode attention."""
        per_block = [
            _log2_interp(context_tokens, self.attention_context_tokens, row)
            for row in self.attention_bw_grid
        ]
        return _log2_interp(block_size, self.attention_block_sizes, per_block)

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


def calibration_from_spec(spec: CalibrationFile, path: str | None = None) -> Calibration:
    """Build the immutable ``Calibration`` from a validated file."""
    ref = spec.reference
    return Calibration(
        device=spec.device, driver=spec.driver, torch_version=spec.torch_version,
        date=spec.date, source=spec.source, step_overhead_s=spec.step_overhead_s,
        attention_block_sizes=tuple(spec.attention.block_sizes),
        attention_context_tokens=tuple(spec.attention.context_tokens),
        attention_bw_grid=tuple(tuple(r) for r in spec.attention.bw_efficiency),
        decode_batches=tuple(spec.decode.x), decode_bw_curve=tuple(spec.decode.efficiency),
        gemm_tokens=tuple(spec.gemm.x), gemm_curve=tuple(spec.gemm.efficiency),
        copy_fits=tuple(
            (d, CopyFit(spec.copy_fits[d].overhead_s, spec.copy_fits[d].bw_bytes_per_s))
            for d in COPY_DIRECTIONS
        ),
        reference_hbm_bw_bytes_per_s=ref.hbm_bw_bytes_per_s,
        reference_peak_flops_per_s=ref.peak_flops_per_s,
        reference_host_link_bw_bytes_per_s=ref.host_link_bw_bytes_per_s,
        reference_basis=ref.basis, notes=spec.notes, measured=tuple(sorted(spec.measured.items())), path=path,
    )  # fmt: skip


def validate_mapping(data: Any, source: str = "<calibration>", lines=None) -> CalibrationFile:
    """Validate parsed YAML; a problem becomes one ``ConfigError`` line."""
    if not isinstance(data, dict):
        raise ConfigError("a calibration file must be a mapping of fields", location=source)
    try:
        return CalibrationFile.model_validate(data)
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
    data, lines = load_yaml(path)
    spec = validate_mapping(data, str(path), lines)
    return calibration_from_spec(spec, str(path))


def as_mapping(cal: Calibration) -> Mapping[str, Any]:
    """The file form of a calibration (for round trips and for writing files)."""
    return {
        "schema_version": 1, "device": cal.device, "driver": cal.driver,
        "torch_version": cal.torch_version, "date": cal.date, "source": cal.source,
        "notes": cal.notes,
        "reference": {
            "hbm_bw_bytes_per_s": cal.reference_hbm_bw_bytes_per_s,
            "peak_flops_per_s": cal.reference_peak_flops_per_s,
            "host_link_bw_bytes_per_s": cal.reference_host_link_bw_bytes_per_s,
            "basis": cal.reference_basis,
        },
        "step_overhead_s": cal.step_overhead_s,
        "attention": {
            "block_sizes": list(cal.attention_block_sizes),
            "context_tokens": list(cal.attention_context_tokens),
            "bw_efficiency": [list(r) for r in cal.attention_bw_grid],
        },
        "decode": {"x": list(cal.decode_batches), "efficiency": list(cal.decode_bw_curve)},
        "gemm": {"x": list(cal.gemm_tokens), "efficiency": list(cal.gemm_curve)},
        "copy": {d: {"overhead_s": f.overhead_s, "bw_bytes_per_s": f.bw_bytes_per_s}
                 for d, f in cal.copy_fits},
        "measured": dict(cal.measured),
    }  # fmt: skip
