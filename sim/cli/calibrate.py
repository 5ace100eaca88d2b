"""``kvsim calibrate RESULTS --out FILE``: a calibration file from measured kernel tables,
``kvsim calibrate [DATA] --vidur GPU|DIR [--cross-validate] --out FILE`` from the Vidur
operator profiles, or ``kvsim calibrate --llmservingsim DIR [--cross-validate] --out FILE``
from LLMServingSim's measured vLLM kernel tables.

Invariant: thin: the fits are ``sim.cost.calibrate`` (``read_run``, ``build_mapping``,
``write_calibration``), ``sim.cost.vidur_crossval`` (``vidur_calibration``) and
``sim.cost.llmservingsim`` (``llmservingsim_calibration``); the file is written only under the path the user names, renamed
into place once it loads back; an existing file is replaced only with ``--force``; bad
input is a one-line error (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

HELP = """Fit a calibration file (sim/cost/calibration.py's schema) from a results folder
written by kernels_validation/run_all.sh (env.json and its CSVs: paged attention, copies,
GEMMs, layer steps). A scenario uses it with cost.calibration: FILE. --cross-validate
also stores the held-out error of its step times: the step overhead (the one figure fitted
on bench_layer's steps) refitted without each token range in turn (<= 64, 65-511, >= 512
tokens), median and worst relative error, and the fitted domain.

With --vidur GPU (a100, h100) the data are the Vidur authors' operator profiles instead:
the folder DATA (Vidur's data/profiling layout), or without DATA the subset this project
ships (workloads/data/vidur_profiling); --vidur DIR names the folder itself (one GPU in
it). --cross-validate also stores the held-out error (leave one model out, leave one
token range out: median and worst relative error) and the fitted domain in the file.

With --llmservingsim DIR the data are LLMServingSim's measured vLLM kernel tables: DIR is
the kernels/<GPU> folder of its profiler output (<org>/<model>/bf16/meta.yaml and
tp<N>/*.csv); the accelerator comes from meta.yaml's GPU (or --accelerator), the per-step
host overhead from --overhead-s (default 0). --cross-validate stores the error of the
tables' interpolation on token ranges held out in turn (leave one model out does not apply:
kernel tables price only the models measured).

  kvsim calibrate kernels_validation/results/my-h200-run --cross-validate --out my-h200.yaml
  kvsim calibrate --vidur h100 --cross-validate --out h100-vidur.yaml
  kvsim calibrate --llmservingsim DATA/kernels/RTX4090 --cross-validate --out rtx4090.yaml
"""
SHIPPED_VIDUR = Path(__file__).resolve().parents[2] / "workloads" / "data" / "vidur_profiling"


def register(app: typer.Typer) -> None:
    """Add ``calibrate`` to the app."""
    app.command("calibrate", help=HELP)(calibrate)


def calibrate(
    out: Annotated[Path, typer.Option("--out", help="The calibration file to write (.yaml).")],
    results: Annotated[
        Path | None,
        typer.Argument(help="A folder written by run_all.sh (or, with --vidur GPU, Vidur data)."),
    ] = None,
    accelerator: Annotated[
        str | None,
        typer.Option("--accelerator", help="Accelerator profile of the reference figures."),
    ] = None,
    source: Annotated[
        str | None, typer.Option("--source", help="gpu, cpu or synthetic (default: env.json).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
    vidur: Annotated[
        str | None,
        typer.Option("--vidur", metavar="GPU|DIR", help="Fit the Vidur operator profiles of "
                     "this GPU (a100, h100) or of the one GPU in this folder."),
    ] = None,
    cross_validate: Annotated[
        bool,
        typer.Option("--cross-validate",
                     help="Store the held-out error (and the fitted domain) in the file."),
    ] = False,
    llmservingsim: Annotated[
        Path | None,
        typer.Option("--llmservingsim", metavar="DIR", help="Import the LLMServingSim kernel "
                     "tables of the one GPU in this folder (its kernels/<GPU>)."),
    ] = None,
    overhead_s: Annotated[
        float | None,
        typer.Option("--overhead-s", help="With --llmservingsim: per-step host overhead (s)."),
    ] = None,
    date: Annotated[
        str | None, typer.Option("--date", help="With --vidur: the file's date (default today, UTC).")
    ] = None,
) -> None:
    """Fit and write the calibration."""
    from sim.cost.calibrate import build_mapping, read_run, write_calibration
    from sim.errors import KvsimError

    _check_out(out, force)
    if llmservingsim is not None:
        if vidur is not None or results is not None or source is not None or date is not None:
            raise KvsimError("--llmservingsim DIR takes no DATA, --vidur, --source or --date "
                             "(the folder has them)")
        mapping = _llmservingsim_mapping(llmservingsim, accelerator, overhead_s, cross_validate)
        write_calibration(mapping, out)
        typer.echo(f"wrote {out}: {mapping['device']} (public-measurement), tables of "
                   f"{', '.join(mapping['kernel_tables'])}" + _held_out(mapping))
        return
    if overhead_s is not None:
        raise KvsimError("--overhead-s goes with --llmservingsim DIR")
    if vidur is not None:
        if accelerator is not None or source is not None:
            raise KvsimError("--vidur takes no --accelerator or --source (the data name the GPU)")
        mapping = _vidur_mapping(results, vidur, cross_validate, date)
        write_calibration(mapping, out)
        typer.echo(f"wrote {out}: {mapping['device']} (public-measurement)" + _held_out(mapping))
        return
    if results is None:
        raise KvsimError("name a results folder (run_all.sh writes one) or pass --vidur GPU")
    if source not in (None, "gpu", "cpu", "synthetic"):
        raise KvsimError(f"--source {source!r}: valid choices: gpu, cpu, synthetic")
    if not results.is_dir():
        raise KvsimError(f"{results}: not a folder (run_all.sh writes one)")
    mapping = build_mapping(read_run(results), accelerator, source, cross_validate)
    write_calibration(mapping, out)
    typer.echo(f"wrote {out}: {mapping['device']} ({mapping['source']}), {mapping['notes']}"
               + _held_out(mapping))


def _held_out(mapping: dict) -> str:
    """``; held-out error SPLIT: median M, worst W`` for the splits the mapping stores."""
    cv = mapping.get("cross_validation", {})
    errs = [f"{k}: median {v['median_rel_error']:.1%}, worst {v['worst_rel_error']:+.1%}"
            for k, v in cv.items() if isinstance(v, dict) and "median_rel_error" in v]  # fmt: skip
    return f"; held-out error {'; '.join(errs)}" if errs else ""


def _llmservingsim_mapping(
    folder: Path, accelerator: str | None, overhead_s: float | None, cross_validate: bool
) -> dict:
    """Read LLMServingSim's kernel tables of one GPU (``--llmservingsim DIR``)."""
    import math

    from sim.cost.llmservingsim import llmservingsim_calibration
    from sim.errors import KvsimError

    if not folder.is_dir():
        raise KvsimError(f"--llmservingsim {str(folder)!r}: not a folder (its kernels/<GPU>)")
    if overhead_s is not None and not (math.isfinite(overhead_s) and overhead_s >= 0):
        raise KvsimError(f"--overhead-s {overhead_s}: expected seconds >= 0")
    return llmservingsim_calibration(folder, accelerator, overhead_s or 0.0,
                                     cross_validate=cross_validate)  # fmt: skip


def _check_out(out: Path, force: bool) -> None:
    from sim.errors import KvsimError

    if out.suffix not in (".yaml", ".yml"):
        raise KvsimError(f"--out {str(out)!r}: a calibration file ends in .yaml or .yml")
    if out.exists() and not force:
        raise KvsimError(f"--out {str(out)!r} exists; pass --force to replace it")


def _vidur_mapping(results: Path | None, vidur: str, cross_validate: bool, date: str | None):
    """Read the Vidur data (``--vidur GPU [DATA]`` or ``--vidur DIR``) and fit one GPU."""
    import datetime as dt

    from sim.cost.vidur_crossval import vidur_calibration
    from sim.cost.vidur_data import VidurDataError, read_vidur
    from sim.cost.vidur_fit import GPUS
    from sim.errors import KvsimError

    valid = ", ".join(GPUS)
    if vidur in GPUS:
        folder = results if results is not None else SHIPPED_VIDUR
    elif Path(vidur).is_dir() and results is None:
        folder = Path(vidur)
    else:
        raise KvsimError(f"--vidur {vidur!r}: not a folder nor a GPU (valid: {valid})"
                         + ("" if results is None else " (with DATA, name the GPU)"))
    if date is not None and not _is_iso_date(date):
        raise KvsimError(f"--date {date!r}: expected YYYY-MM-DD")
    try:
        data = read_vidur(folder)
    except VidurDataError as exc:
        raise KvsimError(str(exc)) from None
    present = sorted(set(data.operators["gpu"]) & set(GPUS))
    gpu = vidur if vidur in GPUS else (present[0] if len(present) == 1 else None)
    if gpu is None or gpu not in present:
        raise KvsimError(f"{folder}: operator profiles of {', '.join(present) or 'no known GPU'}"
                         f" (valid: {valid}); name one with --vidur GPU and the folder as DATA")
    day = date or dt.datetime.now(dt.UTC).date().isoformat()
    return vidur_calibration(data, gpu, day, cross_validate=cross_validate)


def _is_iso_date(text: str) -> bool:
    import datetime as dt

    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10
