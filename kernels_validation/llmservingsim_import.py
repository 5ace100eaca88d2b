"""Import LLMServingSim's measured vLLM kernel tables into a version-2 calibration file.

A thin wrapper of ``sim.cost.llmservingsim`` (``kvsim calibrate --llmservingsim DIR`` does
the same, with ``--cross-validate``); kept for the shipped files' remake lines.

Responsibility: read ``kernels/<GPU>/<org>/<model>/bf16/tp<N>/`` of the LLMServingSim
performance data (casys-kaist/LLMServingSim, MIT; README in the data folder):
``dense.csv`` (layer, tokens, time_us), ``per_sequence.csv`` (layer, sequences, time_us),
``attention.csv`` (prefill_chunk, kv_prefill, n_decode, kv_decode, time_us),
``moe.csv`` (tokens, activated_experts, time_us) and, where ``meta.yaml`` has the skew fit
enabled, ``skew_fit.csv`` (alpha by bucket: pc, n_label, skew_rate_label, kv_big_label,
kp_label) with the fit's ``bucket_axes`` and pooled ``alpha_default``, and write
``hardware_profiles/calibration/<accelerator>-llmservingsim.yaml`` with a
``kernel_tables`` section per model (``sim.cost.table_schema``), selected by a scenario's
``cost.calibration``.

What is kept: every dense and per-sequence point; the attention grid on its doubling
axes (prefill chunk 0, 16..2048; history and context 0, 16..16384; decodes 0, 1..256),
which every table has complete (the RTX PRO 6000 tables add points on a x1.5 grid: they
are held back and only used to check the interpolation, ``--check``); the expert grid;
the skew fit's alpha as a grid over (pc, the buckets of the four other axes), ``nan``
where the fit has no bucket (a profile with ``skew_fit.enabled: false`` gets none: upstream
then applies no correction).
Nothing is rescaled or fitted. The per-step host overhead and the all-reduce are not in
these tables (the profiler runs one GPU, eagerly): the overhead comes from ``--overhead-s``
(measured from a dev run, docs/validation.md), the all-reduce from the accelerator
profile.

Usage::

    python kernels_validation/llmservingsim_import.py DATA/kernels/RTX4090 \
        --accelerator rtx-4090-24gb --overhead-s 0.0 --out hardware_profiles/calibration/...

Invariant: reads CSV with pandas only; nothing here imports torch; the file it writes
loads with ``sim.cost.calibration.load_calibration`` (checked before it returns).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import yaml

from sim.cost.llmservingsim import *  # noqa: F403  (the one implementation)
from sim.cost.llmservingsim import (
    ACCELERATORS,
    MODELS,
    SOURCE,
    LlmServingSimDataError,
    build,
)


def write(mapping: dict, out: Path, argv: list[str]) -> None:
    header = [
        "# Measured vLLM 0.19 kernel tables (LLMServingSim profiler), imported unchanged.",
        f"# Source: {SOURCE['repository']} @ {SOURCE['commit']} ({SOURCE['licence']} licence),",
        f"#   {SOURCE['path']}.",
        f"# Written by kernels_validation/llmservingsim_import.py {' '.join(argv)}",
        f"# on {dt.date.today().isoformat()}; see docs/validation.md.",
    ]
    body = yaml.safe_dump(mapping, sort_keys=False, width=10**9, allow_unicode=False)
    out.write_text("\n".join(header) + "\n" + body)
    from sim.cost.calibration import load_calibration

    load_calibration(str(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_dir", type=Path, help="kernels/<GPU> folder of the LLMServingSim data")
    ap.add_argument("--accelerator", required=True, choices=sorted(ACCELERATORS))
    ap.add_argument("--overhead-s", type=float, default=0.0, help="per-step host overhead (s)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if not args.gpu_dir.is_dir():
        print(f"error: {args.gpu_dir}: not a folder", file=sys.stderr)
        return 2
    try:
        mapping, _ = build(args.gpu_dir, args.accelerator, args.overhead_s)
    except LlmServingSimDataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not mapping["kernel_tables"]:
        print(f"error: {args.gpu_dir}: no model this importer knows ({', '.join(MODELS)})", file=sys.stderr)
        return 2
    write(mapping, args.out, sys.argv[1:] if argv is None else argv)
    print(f"wrote {args.out} ({', '.join(mapping['kernel_tables'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
