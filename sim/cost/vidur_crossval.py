"""Cross-validated error of a Vidur-fitted calibration (``kvsim calibrate --vidur``).

Responsibility: refit the schema-2 calibration of one GPU (``vidur_fit.build_mapping``)
without one group of measured operator rows at a time and price the rows left out with
it, as the simulator does (``operator_table`` here, the ``calibrated``
predictor: measured GEMM tables where a shape was measured, the fitted roofline where
not). Two splits:

  leave one model out        each Vidur model in turn (its shapes the others share stay
                             measured; the rest falls back to the fitted roofline);
  leave one token range out  each regime in turn (<= 64 tokens, 65-511, >= 512): the
                             tables stop at the range's edge and the rest is extrapolated.

Every row of the training groups is fitted on (the held-back flag of ``vidur_data`` is
for the in-sample check of the shipped file); every row of the group left out is
predicted. Errors are ``predicted / measured - 1`` per (model, TP, tokens, operator
group: linear, element-wise, embedding); per split: the median |error| and the error
largest in magnitude (signed). The result is the calibration's ``cross_validation``
section (``sim.cost.calibration.CrossValidationSpec``), with the fitted domain.

``operator_table`` (one row per (model, TP, tokens, group): measured and predicted
seconds) is also the table ``kernels_validation/vidur_compare.py`` reports from;
``kernels_validation/crossval.py`` re-exports this module.

Invariant: read-only on its inputs; deterministic (the fits have no randomness).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from sim.cost import CostConfig, CostModel, StepWork, vidur_fit
from sim.cost.calibration import Calibration, calibration_from_spec, validate_mapping
from sim.cost.groups import GroupPricer
from sim.cost.vidur_data import (
    ALL_OPS,
    LINEAR_OPS,
    MODEL_PROFILES,
    Geometry,
    VidurData,
    split_allreduce,
    split_operators,
)
from sim.profiles import load_accelerator
from sim.profiles.schema import AcceleratorProfile, ModelProfile

GPU_PROFILES = {"a100": "a100-80gb", "h100": "h100-sxm-80gb"}
MEMORY_BOUND_MAX_TOKENS = 64
COMPUTE_BOUND_MIN_TOKENS = 512

#: the token ranges left out in turn (vidur_compare's regimes)
TOKEN_RANGES = {
    "<= 64 tokens": (1, MEMORY_BOUND_MAX_TOKENS),
    "65-511 tokens": (MEMORY_BOUND_MAX_TOKENS + 1, COMPUTE_BOUND_MIN_TOKENS - 1),
    ">= 512 tokens": (COMPUTE_BOUND_MIN_TOKENS, 10**9),
}
QUANTITY = "per-layer operator-group time (linear, element-wise, embedding)"


def layer_profile(name: str, g: Geometry) -> ModelProfile:
    """A one-layer model profile with Vidur's geometry (so group times are per layer)."""
    hd = g.head_dim
    per_layer = (g.d_model * (g.n_head + 2 * g.n_kv_head) * hd + g.n_head * hd * g.d_model
                 + (3 if g.gated_mlp else 2) * g.d_model * g.d_ff)  # fmt: skip
    return ModelProfile(
        name=name, attention="mha" if g.n_kv_head == g.n_head else "gqa", num_layers=1,
        num_q_heads=g.n_head, num_kv_heads=g.n_kv_head, head_dim=hd, d_model=g.d_model,
        params_total=per_layer, intermediate_size=g.d_ff, vocab_size=g.vocab_size,
        gated_mlp=g.gated_mlp,
    )  # fmt: skip


@dataclass
class Pricers:
    """The four predictors of one (GPU, model, TP)."""

    legacy: CostModel
    groups: dict[str, GroupPricer]


def pricers(prof: ModelProfile, acc: AcceleratorProfile, tp: int, cal: Calibration) -> Pricers:
    legacy = CostModel(prof, acc, tp, 1, CostConfig(
        step_pricing="roofline_max", kv_read=False, attention_flops=False, allreduce=False))  # fmt: skip
    sheet = CostConfig(step_pricing="per_group", mfu_prefill=1.0, mfu_decode=1.0)
    group_cfg = CostConfig(step_pricing="per_group")
    no_tables = replace(cal, linear_tables=())
    return Pricers(legacy, {
        "datasheet": GroupPricer(prof, acc, tp, sheet, None),
        "fitted": GroupPricer(prof, acc, tp, group_cfg, no_tables),
        "calibrated": GroupPricer(prof, acc, tp, group_cfg, cal),
    })  # fmt: skip


def _regime(tokens: int) -> str:
    if tokens <= MEMORY_BOUND_MAX_TOKENS:
        return "memory-bound"
    return "compute-bound" if tokens >= COMPUTE_BOUND_MIN_TOKENS else "middle"


def operator_table(data: VidurData, gpu: str, cal: Calibration) -> pd.DataFrame:
    """One row per (model, tp, tokens, group): measured and predicted seconds, held flag."""
    acc = load_accelerator(GPU_PROFILES[gpu])
    ops = data.operators[data.operators["gpu"] == gpu]
    wide = ops.pivot_table(index=["model", "tp", "tokens"], columns="op",
                                             values=["time_s", "held", "outlier"], aggfunc="first",
                           dropna=False)  # fmt: skip
    rows = []
    for (model, tp), g in wide.groupby(level=[0, 1]):
        prof = layer_profile(model, data.geometry[(gpu, model)])
        pr = pricers(prof, acc, int(tp), cal)
        for (_, _, n), r in g.iterrows():
            n = int(n)
            measured = {
                "linear": sum(r[("time_s", op)] for op in LINEAR_OPS),
                "elementwise": sum(r[("time_s", op)] for op in ALL_OPS
                                   if op not in LINEAR_OPS and op != "emb"),
                "embedding": r[("time_s", "emb")],
            }  # fmt: skip
            pred = {name: p.fixed(n, 0, True) for name, p in pr.groups.items()}
            legacy = pr.legacy.iteration_time(StepWork(prefill_chunks=((n, 0),))).total_s
            given = r[("outlier", "emb")]  # from a subset file, else NaN
            for group, meas in measured.items():
                row = {"gpu": gpu, "model": model, "tp": int(tp), "tokens": n, "group": group,
                       "held": bool(r[("held", "emb")]), "measured_s": float(meas),
                       "outlier": bool(given) if group == "linear" and given == given else False}  # fmt: skip
                attr = {"linear": "linear_s", "elementwise": "elementwise_s",
                        "embedding": "embedding_s"}[group]  # fmt: skip
                for name, terms in pred.items():
                    row[f"{name}_s"] = getattr(terms, attr)
                row["sim-cost_s"] = legacy if group == "linear" else np.nan
                rows.append(row)
    out = pd.DataFrame(rows)
    out["regime"] = out["tokens"].map(_regime)
    return out



def _subset(data: VidurData, gpu: str, keep: pd.Series) -> VidurData:
    """``data``'s rows of ``gpu`` selected by ``keep``, every one of them fitted on."""
    ops = data.operators[(data.operators["gpu"] == gpu) & keep].copy()
    ops["held"] = False
    allreduce = data.allreduce.assign(held=False)  # not cross-validated: all of it fitted
    return VidurData(ops, allreduce, data.geometry)


def held_out_errors(data: VidurData, gpu: str, train: pd.Series, date: str) -> np.ndarray:
    """Relative errors of the rows not in ``train`` under a calibration fitted on ``train``."""
    mapping = vidur_fit.build_mapping(_subset(data, gpu, train), gpu, date)
    cal = calibration_from_spec(validate_mapping(mapping, f"<cross-validation {gpu}>"))
    test = _subset(data, gpu, ~train)
    table = operator_table(test, gpu, cal)
    err = (table["calibrated_s"] / table["measured_s"] - 1.0).to_numpy(dtype=float)
    return err[np.isfinite(err)]  # the pivot's (model, TP, tokens) combinations never measured


def split_errors(errors: dict[str, np.ndarray]) -> dict:
    err = np.concatenate(list(errors.values()))
    return {
        "median_rel_error": float(np.median(np.abs(err))),
        "worst_rel_error": float(err[np.argmax(np.abs(err))]),
        "points": int(err.size),
        "held_out": list(errors),
    }


_split = split_errors  # its old name (kernels_validation/crossval.py, tests)


def cross_validation(data: VidurData, gpu: str, date: str) -> dict:
    """The ``cross_validation`` section of ``gpu``'s calibration (module docstring)."""
    ops = data.operators
    mine = ops["gpu"] == gpu
    models = sorted(ops.loc[mine, "model"].unique())
    by_model = {m: held_out_errors(data, gpu, ops["model"] != m, date)
                for m in models if len(models) > 1}  # fmt: skip
    by_range = {}
    for name, (lo, hi) in TOKEN_RANGES.items():
        inside = ops["tokens"].between(lo, hi)
        if (mine & inside).any() and (mine & ~inside).any():
            by_range[name] = held_out_errors(data, gpu, ~inside, date)
    out: dict = {"quantity": QUANTITY}
    if by_model:
        out["leave_one_model_out"] = split_errors(by_model)
    if by_range:
        out["leave_one_token_range_out"] = split_errors(by_range)
    profiles = sorted({MODEL_PROFILES[m] for m in models if MODEL_PROFILES.get(m)})
    out["domain"] = {
        "accelerator": vidur_fit.GPUS[gpu][0],
        "models": profiles,
        "max_tokens": int(ops.loc[mine, "tokens"].max()),
        "tp": sorted(int(t) for t in ops.loc[mine, "tp"].unique()),
    }
    return out


def vidur_calibration(data: VidurData, gpu: str, date: str, *, cross_validate: bool) -> dict:
    """The schema-2 calibration of ``gpu`` (``vidur_fit``), with its ``cross_validation``
    section when asked; the ``gpu_key`` entry tells ``write_calibration`` how to remake it.

    Data whose rows of ``gpu`` are all held back (the project's shipped subset is Vidur's
    held-back half) are split again, alternate rows fitted, and the notes say so.
    """
    data, resplit = _fittable(data, gpu)
    mapping = vidur_fit.build_mapping(data, gpu, date)
    if resplit:
        mapping["notes"] += ("; FITTED ON THE PROJECT'S SUBSET (Vidur's held-back half, split "
                             "again): not the shipped calibration")  # fmt: skip
    if cross_validate:
        mapping["cross_validation"] = cross_validation(data, gpu, date)
    return {**mapping, "gpu_key": gpu}


def _fittable(data: VidurData, gpu: str) -> tuple[VidurData, bool]:
    """``data`` unchanged if some rows of ``gpu`` are fitted on, else re-split (and True)."""
    ops, ar = data.operators, data.allreduce
    if (~ops.loc[ops["gpu"] == gpu, "held"]).any() or not len(ops):
        return data, False
    ops, ar = ops.copy(), ar.copy()
    ops["held"] = split_operators(ops).astype(bool)
    ar["held"] = split_allreduce(ar).astype(bool) if len(ar) else ar["held"]
    return VidurData(ops, ar, data.geometry), True
