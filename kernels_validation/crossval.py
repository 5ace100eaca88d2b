"""Cross-validated error of a Vidur-fitted calibration (here, not on the device).

Responsibility: refit the schema-2 calibration of one GPU (``vidur_fit.build_mapping``)
without one group of measured operator rows at a time and price the rows left out with
it, as the simulator does (``vidur_compare.operator_table``, the ``calibrated``
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

Invariant: read-only on its inputs; deterministic (the fits have no randomness).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import vidur_compare
import vidur_fit
from vidur_data import MODEL_PROFILES, VidurData

from sim.cost.calibration import calibration_from_spec, validate_mapping

#: the token ranges left out in turn (vidur_compare's regimes)
TOKEN_RANGES = {
    "<= 64 tokens": (1, vidur_compare.MEMORY_BOUND_MAX_TOKENS),
    "65-511 tokens": (vidur_compare.MEMORY_BOUND_MAX_TOKENS + 1, vidur_compare.COMPUTE_BOUND_MIN_TOKENS - 1),
    ">= 512 tokens": (vidur_compare.COMPUTE_BOUND_MIN_TOKENS, 10**9),
}
QUANTITY = "per-layer operator-group time (linear, element-wise, embedding)"


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
    table = vidur_compare.operator_table(test, gpu, cal)
    err = (table["calibrated_s"] / table["measured_s"] - 1.0).to_numpy(dtype=float)
    return err[np.isfinite(err)]  # the pivot's (model, TP, tokens) combinations never measured


def _split(errors: dict[str, np.ndarray]) -> dict:
    err = np.concatenate(list(errors.values()))
    return {
        "median_rel_error": float(np.median(np.abs(err))),
        "worst_rel_error": float(err[np.argmax(np.abs(err))]),
        "points": int(err.size),
        "held_out": list(errors),
    }


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
        out["leave_one_model_out"] = _split(by_model)
    if by_range:
        out["leave_one_token_range_out"] = _split(by_range)
    profiles = sorted({MODEL_PROFILES[m] for m in models if MODEL_PROFILES.get(m)})
    out["domain"] = {
        "accelerator": vidur_fit.GPUS[gpu][0],
        "models": profiles,
        "max_tokens": int(ops.loc[mine, "tokens"].max()),
        "tp": sorted(int(t) for t in ops.loc[mine, "tp"].unique()),
    }
    return out
