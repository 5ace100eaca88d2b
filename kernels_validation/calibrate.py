"""Turn a benchmark run's CSVs (or the Vidur profiles) into a calibration file for ``sim.cost``.

A thin wrapper: the run-folder path is ``kvsim calibrate`` (``sim.cost.calibrate``, the one
implementation; its docstring says what is derived), kept here with the checkout's default
output (``hardware_profiles/calibration/<device>.yaml``). With ``--vidur GPU`` the folder
is instead the Vidur authors' public profiling data (``data/profiling``, or the project's
subset) and the file is a ``schema_version: 2`` calibration fitted by ``sim.cost.vidur_fit``
(``source: public-measurement``, with its origin); ``--cross-validate`` adds its held-out
error and fitted domain (``sim.cost.vidur_crossval``); both are also ``kvsim calibrate
--vidur``. On a run folder ``--cross-validate`` stores the held-out error of the step time
(``sim.cost.calibrate.layer_cross_validation``). Invariant: as ``sim.cost.calibrate``: nothing
is written unless it loads back. Runs here, not on the device.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim.cost.calibrate import (  # noqa: E402,F401  (the names this script always had)
    RunData,
    build_mapping,
    copy_fits,
    fit_copy,
    profile_for_device,
    read_run,
    reference_figures,
    write_calibration,
)
from sim.errors import KvsimError  # noqa: E402


def default_out(mapping: dict) -> Path:
    slug = "".join(c if c.isalnum() else "-" for c in mapping["device"].lower()).strip("-")
    slug = "-".join(p for p in slug.split("-") if p)
    root = Path(__file__).resolve().parents[1] / "hardware_profiles" / "calibration"
    return root / f"{slug}.yaml"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="folder written by run_all.sh")
    ap.add_argument("--out", type=Path, help="default: hardware_profiles/calibration/<device>.yaml")
    ap.add_argument("--accelerator", help="accelerator profile giving the reference figures")
    ap.add_argument("--source", choices=["gpu", "cpu", "synthetic"], help="default: from env.json")
    ap.add_argument("--vidur", metavar="GPU", help="results is Vidur profiling data; fit this GPU "
                    "(a100, h100) into a schema-2 calibration (needs --out)")  # fmt: skip
    ap.add_argument("--date", default=None, help="the file's date (default: today, UTC)")
    ap.add_argument("--cross-validate", action="store_true", help="also store the held-out "
                    "error and the fitted domain in the file (a run folder: leave one token "
                    "range of layer.csv's steps out; with --vidur: leave one model out, leave "
                    "one token range out; crossval.py)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.vidur:
        return _main_vidur(args)
    try:
        run = read_run(args.results)
        mapping = build_mapping(run, args.accelerator, args.source, args.cross_validate)
        if args.out is None and mapping["source"] != "gpu":
            raise KvsimError("a non-GPU calibration needs an explicit --out")
        out = args.out or default_out(mapping)
        write_calibration(mapping, out)
    except KvsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


def _main_vidur(args) -> int:
    """``--vidur GPU``: as ``kvsim calibrate DATA --vidur GPU`` (``sim.cost.vidur_crossval``)."""
    import datetime as dt

    from sim.cost.vidur_crossval import vidur_calibration
    from sim.cost.vidur_data import VidurDataError, read_vidur
    from sim.cost.vidur_fit import GPUS

    try:
        if args.vidur not in GPUS:
            raise KvsimError(f"--vidur: unknown GPU {args.vidur!r}; valid: {', '.join(GPUS)}")
        if args.out is None:
            raise KvsimError("--vidur needs --out")
        data = read_vidur(args.results)
        date = args.date or dt.datetime.now(dt.UTC).date().isoformat()
        mapping = vidur_calibration(data, args.vidur, date, cross_validate=args.cross_validate)
        write_calibration(mapping, args.out)
    except (KvsimError, VidurDataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
