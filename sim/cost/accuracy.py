"""How far to trust a run's step times: the ``accuracy`` section of ``summary.json``.

Responsibility: name the evidence behind the cost model a run used, in this order:
1. ``calibration, cross-validated``: the calibration states its held-out error
   (``cross_validation``, written by ``kvsim calibrate``): the median and worst relative
   error of operator times predicted by a calibration fitted without them (leave one model
   out, leave one token range out); a run outside the calibration's fitted domain (another
   model, accelerator, TP degree, or steps above the largest token count measured) is
   extrapolated, and says so (``outside_domain``); what the calibration does not measure
   at all (its ``not_measured`` sections that price step time: attention's KV reads and
   FLOPs, host copies) lies outside that error, and the section names it with its share
   of the run's step time (``not_measured``; ``unmeasured_shares``);
2. ``validation table``: a shipped end-to-end table for the run's accelerator and
   calibration (``hardware_profiles/validation/e2e.yaml``; docs/validation.md): kvsim vs a
   real vLLM run, TTFT / TPOT / latency at mean, median and p90;
3. ``roofline, unvalidated``: nothing measured backs the step times (datasheet figures
   and assumed efficiencies).

Invariant: a pure function of the cost model's calibration, the run's accelerator, model,
TP degree and step budget, the shipped tables, and (after a run) its steps table's cost
terms; errors and shares are fractions (0.05 = 5 %), the worst error signed (kvsim above
the measurement is positive); a share sums every step's own terms, so it is the same
however the engine coalesced steps.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ConfigDict, Field, ValidationError

from sim.config_model import ConfigModel
from sim.errors import ConfigError
from sim.profiles.registry import builtin_profiles_dir, load_shipped_yaml
from sim.yamlio import format_validation_error

BASIS_CALIBRATION = "calibration, cross-validated"
BASIS_VALIDATION = "validation table"
BASIS_ROOFLINE = "roofline, unvalidated"
BASES = (BASIS_CALIBRATION, BASIS_VALIDATION, BASIS_ROOFLINE)
#: the keys of the section, in order (sim/metrics/schema.py declares them)
KEYS = ("basis", "source", "median_rel_error", "worst_rel_error", "outside_domain", "detail",
        "not_measured")  # fmt: skip
#: the step-table cost terms (sim.metrics.schema.STEP_TABLE) of each calibration section
#: that prices step time when ``not_measured``: the attention group's time is the larger
#: of its KV reads and its FLOPs (sim.cost.groups.attention_terms), a copy its one term
UNMEASURED_TERMS = {"attention": ("kv_read_s", "attention_s"), "copy": ("copy_s",)}
#: the steps-table column that holds a section's time summed over each row's steps (every
#: step's own); a section without one is in a row's first step alone (a run's later steps
#: copy nothing), and a steps table older than the column gets the old estimate
UNMEASURED_ROW_SUM = {"attention": "attention_max_s"}
#: what each of them covers, as the accuracy line names it
UNMEASURED_WHAT = {"attention": "attention (KV reads, attention FLOPs)", "copy": "host copies"}
#: a share below this (0.05 %) is left out of the printed line (it stays in the section)
SHARE_SHOWN_MIN = 0.0005
VALIDATION_FILE = ("validation", "e2e.yaml")


class _Strict(ConfigModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ValidationTable(_Strict):
    """One end-to-end validation: (kvsim - vLLM) / vLLM in percent per metric at
    [mean, median, p90]."""

    accelerator: str
    model: str
    calibration: str
    run: str
    scenario: str
    diff_percent: dict[str, list[float]] = Field(min_length=1)


class _ValidationFile(_Strict):
    tables: list[ValidationTable]


@lru_cache(maxsize=4)
def validation_tables(path: Path | None = None) -> tuple[ValidationTable, ...]:
    """The shipped end-to-end validation tables (or the file at ``path``)."""
    p = path or builtin_profiles_dir().joinpath(*VALIDATION_FILE)
    if not p.is_file():
        return ()
    data, lines = load_shipped_yaml(p)  # libyaml for the shipped file (or its committed text)
    try:
        return tuple(_ValidationFile.model_validate(data).tables)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(p), lines).splitlines()[0]) from None


def _calibration_name(cal) -> str | None:
    return None if cal is None or cal.path is None else Path(cal.path).stem


def accuracy_section(
    calibration, *, accelerator: str, model, tp: int, max_step_tokens: int | None, steps=None
) -> dict[str, Any]:
    """The ``accuracy`` object of a run of ``model`` (a ModelProfile) priced with
    ``calibration`` (None: roofline); ``steps``: the run's steps table (None before a run:
    the unmeasured sections are named without their share)."""
    cv = getattr(calibration, "cross_validation", None)
    if cv is not None:
        outside = outside_domain(calibration, accelerator, model, tp, max_step_tokens)
        sections = unmeasured_sections(calibration)
        shares = dict.fromkeys(sections) if steps is None else unmeasured_shares(steps, sections)
        return with_unmeasured(_from_cross_validation(calibration, cv, outside), shares)
    name = _calibration_name(calibration)
    for t in validation_tables():
        if t.accelerator == accelerator and t.calibration == name:
            return _from_table(t, model.name)
    detail = "datasheet figures and assumed efficiencies; no measurement backs the step times"
    if calibration is not None:
        detail = f"calibration {name or calibration.device} states no held-out error"
    return dict(zip(KEYS, (BASIS_ROOFLINE, name, None, None, [], detail, {}), strict=True))


def unmeasured_sections(cal) -> tuple[str, ...]:
    """The sections ``cal`` declares ``not_measured`` that price step time
    (``UNMEASURED_TERMS``), in that order: their time lies outside its held-out error."""
    declared = dict(getattr(cal, "not_measured", ()) or ())
    return tuple(n for n in UNMEASURED_TERMS if n in declared)


def unmeasured_shares(steps, sections) -> dict[str, float | None]:
    """Each of ``sections``' share of a run's step time: over the rows of its ``steps``
    table that ran steps, the section's seconds over the sum of ``duration_s``; None
    without a step. Attention's seconds are the ``attention_max_s`` column (per row, the
    sum over its steps of the larger of each step's ``kv_read_s`` and ``attention_s``);
    a copy's are ``copy_s`` once per row (only a row's first step can copy: a run's later
    steps repeat decodes alone). Both are every step's own, so the share is the same
    however the engine coalesced steps (``engine.exact`` or not, to float rounding); the
    attention group's kernel floors are left out. A steps table older than
    ``attention_max_s`` gets the old estimate, ``n_steps x`` the larger term of a row's
    first step (which overstates a run that opens with a prompt chunk and goes on
    decoding). O(rows), once per run."""
    n = np.asarray(steps["n_steps"], dtype=np.float64)  # ``Columns`` or a DataFrame
    ran = n > 0
    n = n[ran]
    total = float(np.asarray(steps["duration_s"], dtype=np.float64)[ran].sum())
    if not total > 0:
        return dict.fromkeys(sections)
    out: dict[str, float | None] = {}
    for name in sections:
        column = UNMEASURED_ROW_SUM.get(name)
        if column is not None and column in steps:
            seconds = float(np.asarray(steps[column], dtype=np.float64)[ran].sum())
        else:
            terms = np.max([np.asarray(steps[c], dtype=np.float64)[ran]
                            for c in UNMEASURED_TERMS[name]], axis=0)  # fmt: skip
            seconds = float(np.dot(n, terms)) if column is not None else float(terms.sum())
        out[name] = seconds / total
    return out


def with_unmeasured(section: dict[str, Any], shares: dict[str, float | None]) -> dict[str, Any]:
    """``section`` (a ``calibration, cross-validated`` one) with its ``not_measured``
    set to ``shares`` (section -> share of the run's step time, None before a run) and its
    detail naming what the held-out error leaves out (the names only: the detail is the
    same before a run and after it)."""
    if not shares:
        return section
    detail = section["detail"] + "; not measured (roofline-priced, outside the held-out " \
        "error): " + ", ".join(UNMEASURED_WHAT[k] for k in shares)  # fmt: skip
    return {**section, "detail": detail, "not_measured": dict(shares)}


def _from_cross_validation(cal, cv, outside: list[str]) -> dict:
    splits = cv.splits()
    median = max(s.median_rel_error for s in splits.values())
    worst = max((s.worst_rel_error for s in splits.values()), key=abs)
    parts = [f"{k.replace('_', ' ')}: median {s.median_rel_error:.1%}, worst "
             f"{s.worst_rel_error:+.1%} ({s.points:,} points)" for k, s in splits.items()]
    detail = f"held-out {cv.quantity}: " + "; ".join(parts)
    if outside:
        detail += f"; outside the fitted domain: extrapolated, errors up to {worst:+.1%} or more"
    name = _calibration_name(cal) or cal.device
    return dict(zip(KEYS, (BASIS_CALIBRATION, name, median, worst, outside, detail, {}),
                    strict=True))  # fmt: skip


def _shapes_measured(cal, model, tp: int) -> bool:
    """Whether every per-GPU GEMM shape of ``model`` at ``tp`` has a measured table (a
    model of a measured layer geometry under another name, e.g. Llama-3.1 of Llama-3)."""
    from sim.cost.groups import gemm_shapes

    shapes = gemm_shapes(model, tp)
    return bool(shapes) and all(cal.gemm_table(k, n) is not None for k, n in shapes)


def outside_domain(cal, accelerator: str, model, tp: int, max_step_tokens) -> list[str]:
    """What of the run lies outside ``cal``'s fitted domain, one phrase each."""
    domain, out = cal.cross_validation.domain, []
    if domain.accelerator is not None and domain.accelerator != accelerator:
        out.append(f"accelerator {accelerator} (fitted on {domain.accelerator})")
    if domain.tp and tp not in domain.tp:
        out.append(f"TP {tp} (fitted on TP {', '.join(map(str, domain.tp))})")
    if domain.models and model.name not in domain.models and not _shapes_measured(cal, model, tp):
        out.append(f"model {model.name} (fitted on {', '.join(domain.models)})")
    if domain.max_tokens is not None and max_step_tokens is not None:
        if max_step_tokens > domain.max_tokens:
            out.append(f"steps up to {max_step_tokens:,} tokens (measured up to "
                       f"{domain.max_tokens:,})")  # fmt: skip
    return out


def _from_table(t: ValidationTable, model: str) -> dict:
    diffs = np.asarray([v for vals in t.diff_percent.values() for v in vals]) / 100.0
    median = float(np.median(np.abs(diffs)))
    worst = float(diffs[np.argmax(np.abs(diffs))])
    detail = (f"kvsim vs real vLLM ({t.run}): " + ", ".join(
        f"{m} {'/'.join(f'{v:+.1f}' for v in vals)} %" for m, vals in t.diff_percent.items())
        + " (mean/median/p90)")  # fmt: skip
    outside = [] if model == t.model else [f"model {model} (validated on {t.model})"]
    if outside:
        detail += f"; validated on {t.model}, not {model}"
    return dict(zip(KEYS, (BASIS_VALIDATION, t.calibration, median, worst, outside, detail, {}),
                    strict=True))  # fmt: skip


def accuracy_text(section: dict) -> str:
    """One line saying how far to trust a run's step times (so its latencies): the basis,
    the calibration or table it rests on, and its measured error where it has one (the
    median and worst held-out or validated error), else that none is measured. What
    ``kvsim capacity`` prints after ``accuracy:`` and ``kvsim run`` / ``kvsim compare``
    under their tables."""
    source = f" ({section['source']})" if section.get("source") else ""
    median, worst = section.get("median_rel_error"), section.get("worst_rel_error")
    if median is None or worst is None:
        return f"{section['basis']}{source} (no measured error)"
    return f"{section['basis']}{source}: median {median:.1%}, worst {worst:+.1%}" \
        + unmeasured_text(section)


def unmeasured_text(section: dict) -> str:
    """``; not measured: attention (35.5% of this run's step time)`` for a calibration's
    section that names unmeasured step time (``not_measured``; a share under
    ``SHARE_SHOWN_MIN`` left out, a section without a share yet named alone); '' for none
    (and for a summary older than the key)."""
    shown = [(k, v) for k, v in (section.get("not_measured") or {}).items()
             if v is None or v >= SHARE_SHOWN_MIN]  # fmt: skip
    if not shown:
        return ""
    return "; not measured: " + ", ".join(
        k if v is None else f"{k} ({v:.1%} of this run's step time)" for k, v in shown)


def accuracy_warning(section: dict) -> str | None:
    """The run warning of a calibration used outside its fitted domain (None: inside)."""
    if section["basis"] != BASIS_CALIBRATION or not section["outside_domain"]:
        return None
    return (f"calibration {section['source']} is used outside its fitted domain ("
            + ", ".join(section["outside_domain"]) + f"): expect step-time errors of "
            f"{section['median_rel_error']:.1%} (median held-out) up to "
            f"{section['worst_rel_error']:+.1%} (worst held-out) or more")  # fmt: skip
