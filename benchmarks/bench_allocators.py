"""Speed of the allocators: block operations per second of the paged kind, ops/s of all.

A block operation is one block taken from or returned to the pool's free queue (issue 3,
target >= 1e6/s for ``paged`` on a 2-core machine). Workloads are generated before timing
from a seeded RNG; timing uses the wall clock (this is a benchmark, not simulation logic).

    .venv/bin/python benchmarks/bench_allocators.py [--quick]

Prints a table and writes ``benchmarks/results_allocators.md`` with machine and date.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import sys
import time
from pathlib import Path

from sim.memory import make_allocator
from sim.memory.replay import random_ops
from sim.units import GiB, KiB

RESULTS = Path(__file__).with_name("results_allocators.md")


def paged_bulk_ops(n_ops: int, seed: int = 0) -> list[tuple]:
    """Agent-like bulk traffic: prompts of 256-8192 tokens, chunked appends (observations
    and decode bursts), some forks, frees when many sequences are live."""
    rng = random.Random(seed)
    ops, live, next_id = [], [], 0
    for _ in range(n_ops):
        r = rng.random()
        if not live or (r < 0.25 and len(live) < 200):
            ops.append(("allocate", next_id, rng.randint(256, 8192)))
            live.append(next_id)
            next_id += 1
        elif r < 0.30:
            ops.append(("fork", rng.choice(live), next_id))
            live.append(next_id)
            next_id += 1
        elif r < 0.55 or len(live) >= 200:
            ops.append(("free", live.pop(rng.randrange(len(live))), 0))
        else:
            ops.append(("append", rng.choice(live), rng.randint(1, 2048)))
    return ops


def run_ops(alloc, ops) -> tuple[int, float]:
    """Apply ops (misses allowed; a missed sequence is skipped later). Return (misses, s)."""
    dead: set = set()
    misses = 0
    allocate, append, fork, free = alloc.allocate, alloc.append, alloc.fork, alloc.free
    t0 = time.perf_counter()
    for op, a, b in ops:
        if op == "allocate":
            if allocate(a, b):
                dead.discard(a)
            else:
                dead.add(a)
                misses += 1
        elif a in dead:  # same rules as sim.memory.replay: a missed sequence is dropped
            if op == "fork":
                dead.add(b)
            elif op == "free":
                dead.discard(a)
        elif op == "append":
            misses += not append(a, b)
        elif op == "fork":
            if fork(a, b):
                dead.discard(b)
            else:
                dead.add(b)
                misses += 1
        else:
            free(a)
    return misses, time.perf_counter() - t0


def bench_paged_bulk(n_ops: int, block_size: int) -> dict:
    alloc = make_allocator(
        "paged", pool_bytes=60 * GiB, kv_bytes_per_token=40 * KiB, block_size=block_size
    )
    ops = paged_bulk_ops(n_ops)
    misses, secs = run_ops(alloc, ops)
    act = alloc.take_activity()
    block_ops = act.blocks_taken + act.blocks_returned
    alloc.check_invariants()
    return {"name": f"paged bulk B={block_size} (60 GiB, 40 KiB/token)", "ops": len(ops),
            "misses": misses, "block_ops": block_ops, "seconds": secs}  # fmt: skip


def bench_paged_decode(n_seqs: int, steps: int) -> dict:
    """One token per sequence per step, as a decode batch does (vLLM's hot path)."""
    alloc = make_allocator("paged", pool_bytes=60 * GiB, kv_bytes_per_token=40 * KiB)
    for s in range(n_seqs):
        alloc.allocate(s, 1000 + s)
    alloc.take_activity()
    append = alloc.append
    seqs = range(n_seqs)
    t0 = time.perf_counter()
    for _ in range(steps):
        for s in seqs:
            append(s, 1)
    secs = time.perf_counter() - t0
    act = alloc.take_activity()
    return {"name": f"paged decode, {n_seqs} seqs x {steps} steps of 1 token",
            "ops": n_seqs * steps, "misses": 0,
            "block_ops": act.blocks_taken + act.blocks_returned, "seconds": secs}  # fmt: skip


def bench_kind(kind: str, n_ops: int, **options) -> dict:
    alloc = make_allocator(kind, pool_bytes=8 * GiB, kv_bytes_per_token=160 * KiB, **options)
    ops = [(o.op, o.seq, o.child if o.op == "fork" else o.tokens) for o in random_ops(n_ops)]
    misses, secs = run_ops(alloc, ops)
    act = alloc.take_activity()
    alloc.check_invariants()
    return {"name": f"{kind} random trace (8 GiB, 160 KiB/token)", "ops": len(ops),
            "misses": misses, "block_ops": act.blocks_taken + act.blocks_returned,
            "seconds": secs}  # fmt: skip


def machine() -> str:
    return (
        f"{platform.platform()}; {platform.processor() or platform.machine()}; "
        f"os.cpu_count()={os.cpu_count()}; Python {platform.python_version()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--no-write", action="store_true", help="do not write the results file")
    args = parser.parse_args(argv)
    scale = 10 if args.quick else 1
    rows = [
        bench_paged_bulk(200_000 // scale, 16),
        bench_paged_bulk(20_000 // scale, 1),
        bench_paged_decode(256, 2_000 // scale),
        *(bench_kind(k, 100_000 // scale, **o) for k, o in (
            ("static", {"max_tokens": 8192}), ("contiguous", {}), ("buddy", {}), ("paged", {}),
        )),
    ]  # fmt: skip
    lines = [
        "# Allocator speed (`benchmarks/bench_allocators.py`)",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {machine()}",
        "- a *block op* is one block taken from or returned to the paged free queue; target "
        ">= 1e6 block ops/s for `paged` (issue 3)",
        "- other helpers were running on the same 2 cores: treat figures as lower bounds",
        "- random traces (`sim.memory.replay.random_ops`): ops on a sequence dropped after a "
        "miss are skipped, so ops/s of a kind with many misses (static) is flattered",
        "- paged bulk: prompts 256-8192 tokens, appends 1-2048, 5 % forks, up to 200 live",
        "",
        "| workload | ops | misses | block ops | seconds | ops/s | block ops/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        bps = f"{r['block_ops'] / r['seconds']:,.0f}" if r["block_ops"] else "-"
        lines.append(
            f"| {r['name']} | {r['ops']:,} | {r['misses']:,} | {r['block_ops']:,} | "
            f"{r['seconds']:.3f} | {r['ops'] / r['seconds']:,.0f} | {bps} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write and not args.quick:
        RESULTS.write_text(text)
        print(f"wrote {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
