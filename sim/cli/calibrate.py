"""``kvsim calibrate RESULTS --out FILE``: a calibration file from measured kernel tables.

Invariant: thin: the fit is ``sim.cost.calibrate`` (``read_run``, ``build_mapping``,
``write_calibration``); the file is written only under the path the user names, renamed
into place once it loads back; an existing file is replaced only with ``--force``; bad
input is a one-line error (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

HELP = """Fit a calibration file (sim/cost/calibration.py's schema) from a results folder
written by kernels_validation/run_all.sh (env.json and its CSVs: paged attention, copies,
GEMMs, layer steps). A scenario uses it with cost.calibration: FILE. The Vidur profiles
(with their cross-validated error, --cross-validate) are fitted from a checkout by
kernels_validation/calibrate.py DATA --vidur a100|h100 (docs/kernels_validation.md).

  kvsim calibrate kernels_validation/results/my-h200-run --out my-h200.yaml
"""


def register(app: typer.Typer) -> None:
    """Add ``calibrate`` to the app."""
    app.command("calibrate", help=HELP)(calibrate)


def calibrate(
    results: Annotated[Path, typer.Argument(help="A folder written by run_all.sh.")],
    out: Annotated[Path, typer.Option("--out", help="The calibration file to write (.yaml).")],
    accelerator: Annotated[
        str | None,
        typer.Option("--accelerator", help="Accelerator profile of the reference figures."),
    ] = None,
    source: Annotated[
        str | None, typer.Option("--source", help="gpu, cpu or synthetic (default: env.json).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
) -> None:
    """Fit and write the calibration."""
    from sim.cost.calibrate import build_mapping, read_run, write_calibration
    from sim.errors import KvsimError

    if source not in (None, "gpu", "cpu", "synthetic"):
        raise KvsimError(f"--source {source!r}: valid choices: gpu, cpu, synthetic")
    if out.suffix not in (".yaml", ".yml"):
        raise KvsimError(f"--out {str(out)!r}: a calibration file ends in .yaml or .yml")
    if out.exists() and not force:
        raise KvsimError(f"--out {str(out)!r} exists; pass --force to replace it")
    if not results.is_dir():
        raise KvsimError(f"{results}: not a folder (run_all.sh writes one)")
    mapping = build_mapping(read_run(results), accelerator, source)
    write_calibration(mapping, out)
    typer.echo(f"wrote {out}: {mapping['device']} ({mapping['source']}), {mapping['notes']}")
