"""Peak memory of ``kvsim trace-replay --format claude-code`` over the 487 shipped sessions.

Issue 27/28 follow-up: loading the sessions once expanded every run of block ids into
Python ints (~2.3 GB resident); they are now kept as runs (``BlockRuns``). Each case runs
the CLI in a child process and reads that child's peak resident set (``os.wait4``'s
``ru_maxrss``, KB on Linux), the figure ``/usr/bin/time -v`` prints as "Maximum resident
set size". Wall time is printed too (this is a benchmark, not simulation logic) but depends
on what else the machine runs.

    .venv/bin/python benchmarks/bench_session_memory.py [--source DIR] [--out FILE]

``--source`` runs another checkout's ``sim`` (for a before/after comparison); the table is
printed, and written to ``--out`` when given.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SESSIONS = ROOT / "workloads/data/claude_code/sessions_all.jsonl.gz"

CASES = [  # extra trace-replay flags
    ["--cache-tokens", "2e6", "--concurrency", "16"],
    ["--cache-tokens", "inf"],
]


def peak_rss_kb(source: Path, flags: list[str]) -> tuple[int, float, bytes]:
    """(peak resident KB, wall s, stdout) of one trace-replay in a child process."""
    cmd = [sys.executable, "-m", "sim.cli", "trace-replay", str(SESSIONS),
           "--format", "claude-code", "--json", *flags]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(source))
    t0 = time.perf_counter()
    # cwd = source: ``python -m`` puts the working folder first on sys.path
    proc = subprocess.Popen(cmd, cwd=source, env=env, stdout=subprocess.PIPE)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"{' '.join(cmd)}: exit status {status}")
    return usage.ru_maxrss, time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=ROOT, help="checkout whose sim/ runs")
    ap.add_argument("--out", type=Path, help="also write the table here")
    args = ap.parse_args()
    lines = [
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {platform.platform()}; os.cpu_count()={os.cpu_count()}; "
        f"Python {platform.python_version()}",
        f"- source: {args.source}",
        "",
        "| flags | peak RSS (KB) | wall s |",
        "|---|---:|---:|",
    ]
    for flags in CASES:
        kb, wall, _ = peak_rss_kb(args.source, flags)
        lines.append(f"| `{' '.join(flags)}` | {kb:,} | {wall:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
