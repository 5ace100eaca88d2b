"""Speed of ``kvsim trace-replay`` on the shipped Mooncake sample (3,993 requests), and of
the radix allocator with content on an agent fleet.

Issue 4 asks for the sample at any capacity well under 10 s. Timing uses the wall clock
(this is a benchmark, not simulation logic); each figure is the best of ``--repeat`` runs.

    .venv/bin/python benchmarks/bench_trace_replay.py [--repeat 3]

Prints a table and writes ``benchmarks/results_trace_replay.md`` with machine and date.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

from sim.memory import make_allocator
from sim.prefix.harness import EXAMPLE_SPEC, replay_on_allocator
from sim.prefix.prompt import build_trajectory
from sim.prefix.trace_replay import load_mooncake, replay

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "workloads/data/mooncake/synthetic_trace.jsonl"
RESULTS = Path(__file__).with_name("results_trace_replay.md")

CASES = [  # (block size, cache tokens or None = inf, eviction)
    (512, None, "lru"),
    (512, 10**6, "lru"),
    (512, 10**5, "lru"),
    (512, 512, "lru"),
    (16, None, "lru"),
    (16, 10**6, "lru"),
    (16, 10**5, "lru"),
    (16, 16, "lru"),
    (16, 10**6, "lfu"),
    (16, 10**6, "fifo"),
    (16, 10**6, "priority"),
]


def best_of(repeat: int, fn):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    load_s, trace = best_of(args.repeat, lambda: load_mooncake(SAMPLE))
    rows = [("load + validate the sample", "-", "-", load_s, "-", "-")]
    for bs, cap, ev in CASES:
        secs, r = best_of(args.repeat, lambda bs=bs, cap=cap, ev=ev: replay(trace, bs, cap, ev))
        rows.append(
            (
                f"replay, {ev}",
                bs,
                "inf" if cap is None else f"{cap:,}",
                secs,
                f"{r.hit_rate:.4f}",
                f"{r.evicted_blocks:,}",
            )
        )
    fleet = [build_trajectory(EXAMPLE_SPEC, 20, name=f"agent{i}") for i in range(16)]
    for kind in ("radix", "paged_hash"):

        def run(kind=kind):
            a = make_allocator(kind, pool_bytes=4000 * 16, kv_bytes_per_token=1, block_size=16)
            return replay_on_allocator(fleet, a)

        secs, rep = best_of(args.repeat, run)
        rows.append(
            (
                f"{kind} allocator, 16 agents x 20 calls",
                16,
                "4,000 blocks",
                secs,
                f"{rep.hit_rate():.4f}",
                "-",
            )
        )
    lines = [
        "# Trace replay speed (`benchmarks/bench_trace_replay.py`)",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {platform.platform()}; {platform.machine()}; os.cpu_count()="
        f"{os.cpu_count()}; Python {platform.python_version()}",
        f"- sample: `workloads/data/mooncake/synthetic_trace.jsonl`, {len(trace):,} requests, "
        f"{sum(len(r.hash_ids) for r in trace):,} trace blocks; best of {args.repeat} runs",
        "- target (issue 4): the sample at any capacity well under 10 s",
        "- other helpers were running on the same 2 cores: treat figures as upper bounds",
        "",
        "| what | block size | cache | seconds | hit rate | evicted blocks |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {w} | {b} | {c} | {s:.3f} | {h} | {e} |" for w, b, c, s, h, e in rows]
    text = "\n".join(lines) + "\n"
    RESULTS.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
