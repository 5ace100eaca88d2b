"""Predicted vs measured step times: how far a cost model is from ``bench_layer`` results.

Responsibility: read a ``layer.csv`` written by ``bench_layer.py`` into ``StepShape``s,
price each step with one or more predictors (any callable ``StepShape -> seconds``), and
report per-step relative error plus the median and worst absolute error. Three
predictors ship here:
  roofline    datasheet only: max(bytes / HBM bandwidth, FLOPs / dense peak) (F24 with
              efficiency 1), from the ``reference`` figures of a calibration file;
  calibrated  the same terms with the calibration's measured efficiencies + step overhead;
  sim-cost    ``sim.cost.CostModel`` on a model profile built from the CSV's geometry
              (with or without the calibration), i.e. the simulator's own prediction.
With ``--vidur DATA`` it instead compares per operator group against the Vidur authors'
public profiles (``vidur_compare.py``) and writes ``results/vidur-profiles/``.
Invariant: relative error is ``(predicted - measured) / measured``; the summary's median
and worst are of its absolute value, over the rows given. Runs here (not on the device):
may use numpy, pandas and ``sim``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from sim.cost.calibrate import (  # noqa: F401  (StepShape, read_steps: this module's names)
    Predictor,
    StepShape,
    calibrated_predictor,
    read_steps,
)
from sim.cost.calibration import Calibration, load_calibration
from sim.errors import KvsimError


def roofline_predictor(cal: Calibration) -> Predictor:
    """F24 with efficiency 1: max(HBM bytes / bandwidth, FLOPs / peak), datasheet figures."""

    def predict(s: StepShape) -> float:
        mem_s = (s.weight_bytes + s.kv_bytes_read) / cal.reference_hbm_bw_bytes_per_s
        comp_s = (s.linear_flops + s.attention_flops) / cal.reference_peak_flops_per_s
        return max(mem_s, comp_s)

    return predict


_SIM_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def sim_cost_predictor(cal: Calibration, *, calibrated: bool) -> Predictor:
    """The simulator's ``CostModel`` for a model profile built from the CSV's geometry.

    The profile's parameters are the stack's linear weights (bench_layer has no embedding
    or LM head); the accelerator's figures are the calibration's reference figures. With
    ``calibrated`` the cost model loads the calibration file itself (opt-in, as scenarios
    do); without, it runs with efficiency 1 and no overhead (its pure roofline).
    """
    from sim.cost import CostConfig, CostModel, StepWork
    from sim.profiles.schema import AcceleratorProfile, HostLink, ModelProfile

    accel = AcceleratorProfile(
        name="calibration-reference", vendor="n/a", memory_bytes=1, memory_vendor_figure="n/a",
        memory_vendor_unit="GB", hbm_bw_bytes_per_s=cal.reference_hbm_bw_bytes_per_s,
        peak_bf16_flops_per_s=cal.reference_peak_flops_per_s,
        host_link=HostLink(kind="pcie", bw_bytes_per_s_per_direction=(
            cal.reference_host_link_bw_bytes_per_s or 1.0)),
    )  # fmt: skip
    models: dict[tuple, CostModel] = {}

    def model_for(s: StepShape) -> CostModel:
        key = (s.geometry, s.n_layers, s.dtype, s.block_size)
        if key not in models:
            dtype = _SIM_DTYPES.get(s.dtype, "bf16")
            params = s.weight_bytes / s.dtype_bytes
            prof = ModelProfile(
                name=s.geometry, attention="gqa", num_layers=s.n_layers, num_q_heads=s.n_heads,
                num_kv_heads=s.n_kv_heads, head_dim=s.head_dim, d_model=s.d_model,
                params_total=params, kv_dtype=dtype, weight_dtype=dtype,
            )  # fmt: skip
            cfg = CostConfig(
                mfu_prefill=1.0, mfu_decode=1.0, bw_efficiency=1.0, activation_dtype=dtype,
                calibration=cal.path if calibrated else None, block_size=s.block_size,
            )  # fmt: skip
            models[key] = CostModel(prof, accel, config=cfg)
        return models[key]

    def predict(s: StepShape) -> float:
        work = StepWork(
            n_decode=s.decode_seqs,
            decode_history_tokens=s.decode_seqs * max(0, s.decode_context_tokens - 1),
            prefill_chunks=((s.prefill_chunk_tokens, s.prefill_history_tokens),)
            if s.prefill_chunk_tokens else (),
        )  # fmt: skip
        return model_for(s).iteration_time(work).total_s

    return predict


def compare(shapes: list[StepShape], measured_s: np.ndarray,
            predictors: Mapping[str, Predictor]) -> pd.DataFrame:  # fmt: skip
    """One row per step: measured seconds, and per predictor its seconds and rel. error."""
    out = pd.DataFrame({"step": [s.label for s in shapes], "measured_s": measured_s})
    for name, fn in predictors.items():
        pred = np.array([fn(s) for s in shapes], dtype=float)
        out[f"{name}_s"] = pred
        out[f"{name}_rel_err"] = (pred - measured_s) / measured_s
    return out


def summarize(table: pd.DataFrame, name: str) -> dict:
    """Median and worst |relative error| of one predictor, and the worst step."""
    err = table[f"{name}_rel_err"].abs()
    worst = int(err.idxmax())
    return {
        "predictor": name,
        "median_abs_rel_err": float(err.median()),
        "worst_abs_rel_err": float(err.iloc[worst]),
        "worst_step": table["step"].iloc[worst],
        "within_10pct": int((err <= 0.10).sum()),
        "steps": len(err),
    }


def to_markdown(table: pd.DataFrame, names: list[str], title: str) -> str:
    """A Markdown report: per-step table, then one summary line per predictor."""
    head = "| step | measured ms | " + " | ".join(f"{n} ms | {n} err" for n in names) + " |"
    sep = "|---|---:|" + "---:|---:|" * len(names)
    lines = [f"# {title}", "", head, sep]
    for _, r in table.iterrows():
        cells = [f"{r[f'{n}_s'] * 1e3:.3f} | {r[f'{n}_rel_err'] * 100:+.1f}%" for n in names]
        lines.append(f"| {r['step']} | {r['measured_s'] * 1e3:.3f} | " + " | ".join(cells) + " |")
    lines += ["", "| predictor | median abs error | worst abs error | worst step | within 10% |",
              "|---|---:|---:|---|---:|"]  # fmt: skip
    for n in names:
        s = summarize(table, n)
        lines.append(
            f"| {n} | {s['median_abs_rel_err'] * 100:.1f}% | {s['worst_abs_rel_err'] * 100:.1f}%"
            f" | {s['worst_step']} | {s['within_10pct']}/{s['steps']} |"
        )
    return "\n".join(lines) + "\n"


def build_predictors(cal: Calibration, names: list[str]) -> dict[str, Predictor]:
    makers = {
        "roofline": lambda: roofline_predictor(cal),
        "calibrated": lambda: calibrated_predictor(cal),
        "sim-cost": lambda: sim_cost_predictor(cal, calibrated=False),
        "sim-cost-calibrated": lambda: sim_cost_predictor(cal, calibrated=True),
    }
    unknown = [n for n in names if n not in makers]
    if unknown:
        raise KvsimError(f"unknown predictor {unknown[0]!r}; valid: {', '.join(makers)}")
    return {n: makers[n]() for n in names}


def main_vidur(data_dir: Path, out: Path | None, gpus: list[str] | None) -> int:
    """``--vidur DATA``: predicted vs measured per operator group (``vidur_compare``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import vidur_compare
    import vidur_data

    try:
        data = vidur_data.read_vidur(data_dir)
        out = out or Path(__file__).resolve().parent / "results" / "vidur-profiles"
        reports = vidur_compare.write_reports(data, out, gpus)
    except (KvsimError, vidur_data.VidurDataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for rep in reports:
        print(vidur_compare.to_markdown(rep).split("## TP all-reduce")[0], end="")
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layer_csv", type=Path, nargs="?", help="a bench_layer CSV (not with --vidur)")
    ap.add_argument("--vidur", type=Path, metavar="DATA",
                    help="compare per operator group against Vidur profiling data (its "
                         "data/profiling folder or workloads/data/vidur_profiling)")  # fmt: skip
    ap.add_argument("--gpu", action="append", help="with --vidur: a100, h100 (repeatable)")
    ap.add_argument("--calibration", help="calibration name or YAML path (not with --vidur)")
    ap.add_argument("--predictor", action="append", default=None,
                    help="roofline, calibrated, sim-cost, sim-cost-calibrated (repeatable)")  # fmt: skip
    ap.add_argument("--out", type=Path, help="write the Markdown report here too (with --vidur: "
                    "the results folder; default kernels_validation/results/vidur-profiles)")
    ap.add_argument("--title", default="Predicted vs measured step times")
    args = ap.parse_args(argv)
    if args.vidur is not None:
        return main_vidur(args.vidur, args.out, args.gpu)
    if args.layer_csv is None or args.calibration is None:
        ap.error("a layer CSV and --calibration are needed (or --vidur DATA)")
    try:
        cal = load_calibration(args.calibration)
        shapes, measured = read_steps(args.layer_csv)
        names = args.predictor or ["roofline", "calibrated", "sim-cost-calibrated"]
        table = compare(shapes, measured, build_predictors(cal, names))
    except KvsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return emit(to_markdown(table, names, args.title), args.out)


def emit(text: str, out: Path | None) -> int:
    """A report's Markdown to ``out`` (when given) and to stdout; exit status 0 (the
    here-side comparison scripts end this way)."""
    if out:
        out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
