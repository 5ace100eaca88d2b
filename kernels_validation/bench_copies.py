"""Benchmark: host<->device copies (pinned vs pageable, sizes, blocks, both ways, overlap).

Responsibility: measure what the offload tier's cost model needs (rules 3.12-3.13):
  single    one transfer, h2d and d2h, pinned and pageable, 4 KiB (less than a block) to GBs;
  blocks    N block-sized copies (one cudaMemcpyAsync each) vs one device gather/scatter
            plus one transfer of the same bytes;
  bidir     h2d and d2h at once on two streams (full-duplex link?);
  overlap   a copy on a side stream while a large bf16 GEMM runs (does either slow down?);
  d2d       a device-to-device copy: the measured HBM ceiling (bytes read + written).
Invariant: every time is GPU time between CUDA events on the stream(s) that did the work
(host clock on a CPU), and ``bw_bytes_per_s`` is bytes moved / median time; one CSV row
per case, flushed at once. On a CPU (``--quick``) "device" buffers are host tensors, so
only the plumbing is checked. Imports only torch and the standard library.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402

COLUMNS = [
    "test", "direction", "memory", "size_bytes", "n_transfers", "device",
    "time_s_median", "time_s_p10", "time_s_p90", "reps", "bw_bytes_per_s",
    "alone_s", "slowdown", "note",
]  # fmt: skip
BLOCK_BYTES = 64 * bl.KiB  # 16 tokens x 8 KV heads x 128 x 2 (K,V) x 2 B: one Llama-3-8B block


class Bench:
    def __init__(self, args):
        self.device = bl.pick_device(args.device)
        self.cuda = self.device.type == "cuda"
        self.quick = args.quick
        self.sink = bl.CsvSink(args.out, COLUMNS)
        self.deadline = bl.Deadline(args.budget_s)
        self.skipped = 0
        self.max_time_s = 0.05 if args.quick else 0.4

    def write(self, test, direction, memory, size, n, timing: bl.Timing, moved: int,
              alone_s=float("nan"), slowdown=float("nan"), note=""):  # fmt: skip
        self.sink.write({
            "test": test, "direction": direction, "memory": memory, "size_bytes": size,
            "n_transfers": n, "device": self.device.type, **timing.row(),
            "bw_bytes_per_s": moved / timing.median_s, "alone_s": alone_s,
            "slowdown": slowdown, "note": note,
        })  # fmt: skip
        bl.log(f"{test:8s} {direction:5s} {memory:8s} {size:>12,d} B x{n:<5} "
               f"{timing.median_s * 1e6:10.1f} us {moved / timing.median_s / 1e9:7.2f} GB/s")  # fmt: skip

    def over(self) -> bool:
        if self.deadline.expired():
            self.skipped += 1
            return True
        return False

    def host(self, n_bytes: int, pinned: bool) -> torch.Tensor:
        buf = torch.empty(n_bytes, dtype=torch.uint8, pin_memory=pinned)
        buf.fill_(1)  # touch every page: a first-touch fault is not what we measure
        return buf

    def dev(self, n_bytes: int) -> torch.Tensor:
        buf = torch.empty(n_bytes, dtype=torch.uint8, device=self.device)
        buf.fill_(2)
        return buf

    def time(self, fn: Callable[[], object], reps: int = 20) -> bl.Timing:
        return bl.time_fn(fn, self.device, warmup=2, reps=reps, max_time_s=self.max_time_s)


def single(b: Bench) -> None:
    """One transfer of each size, each direction and host memory kind."""
    top = 4 * bl.MiB if b.quick else 2 * bl.GiB
    sizes = [4 * bl.KiB * 4**i for i in range(12) if 4 * bl.KiB * 4**i <= top]
    if not b.quick:
        sizes.append(2 * bl.GiB)
    kinds = ["pinned", "pageable"] if b.cuda else ["pageable"]
    dev = b.dev(sizes[-1])
    for kind in kinds:
        limit = sizes[-1] if kind == "pinned" else min(sizes[-1], 1 * bl.GiB)
        host = b.host(limit, pinned=kind == "pinned")
        for size in [s for s in sizes if s <= limit]:
            for direction in ("h2d", "d2h"):
                if b.over():
                    continue
                h, d = host[:size], dev[:size]
                if direction == "h2d":
                    t = b.time(lambda d=d, h=h: d.copy_(h, non_blocking=True))
                else:
                    t = b.time(lambda d=d, h=h: h.copy_(d, non_blocking=True))
                b.write("single", direction, kind, size, 1, t, size)
        del host


def blocks(b: Bench) -> None:
    """N block-sized copies vs one gathered copy, scattered blocks of a device pool."""
    n_blocks = 32 if b.quick else 2048
    pool = b.dev(4 * n_blocks * BLOCK_BYTES).view(4 * n_blocks, BLOCK_BYTES)
    idx = bl.host_randperm(4 * n_blocks, b.device, seed=n_blocks)[:n_blocks]
    idx_list = idx.tolist()
    host = b.host(n_blocks * BLOCK_BYTES, pinned=b.cuda).view(n_blocks, BLOCK_BYTES)
    staging = b.dev(n_blocks * BLOCK_BYTES).view(n_blocks, BLOCK_BYTES)
    nb = b.cuda
    total = n_blocks * BLOCK_BYTES
    memory = "pinned" if b.cuda else "pageable"

    def many_d2h():
        for i, j in enumerate(idx_list):
            host[i].copy_(pool[j], non_blocking=nb)

    def gathered_d2h():
        torch.index_select(pool, 0, idx, out=staging)
        host.copy_(staging, non_blocking=nb)

    def many_h2d():
        for i, j in enumerate(idx_list):
            pool[j].copy_(host[i], non_blocking=nb)

    def gathered_h2d():
        staging.copy_(host, non_blocking=nb)
        pool.index_copy_(0, idx, staging)

    for name, fn, direction, n in (
        ("many", many_d2h, "d2h", n_blocks), ("gathered", gathered_d2h, "d2h", 1),
        ("many", many_h2d, "h2d", n_blocks), ("gathered", gathered_h2d, "h2d", 1),
    ):  # fmt: skip
        if b.over():
            continue
        t = b.time(fn, reps=3 if b.quick else 10)
        b.write("blocks", direction, memory, total, n, t, total,
                note=f"{name}: {n_blocks} blocks of {BLOCK_BYTES} B")  # fmt: skip


def _events_elapsed_s(start, end) -> float:
    return start.elapsed_time(end) / 1e3


def bidir(b: Bench) -> None:
    """h2d and d2h of equal size at once, on two streams."""
    if not b.cuda:
        bl.log("bidir: skipped (needs CUDA streams)")
        return
    for size in (64 * bl.MiB, 512 * bl.MiB):
        if b.over():
            continue
        h_in, h_out = b.host(size, True), b.host(size, True)
        d_in, d_out = b.dev(size), b.dev(size)
        s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
        samples = []
        for _ in range(6):
            e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            e0.record()
            s1.wait_event(e0)
            s2.wait_event(e0)
            with torch.cuda.stream(s1):
                d_in.copy_(h_in, non_blocking=True)
                e1.record(s1)
            with torch.cuda.stream(s2):
                h_out.copy_(d_out, non_blocking=True)
                e2.record(s2)
            torch.cuda.synchronize()
            samples.append(max(_events_elapsed_s(e0, e1), _events_elapsed_s(e0, e2)))
        t = bl.summarize(samples[1:])  # the first is a warm-up
        b.write("bidir", "both", "pinned", size, 2, t, 2 * size,
                note="bw counts both directions")  # fmt: skip
        del h_in, h_out, d_in, d_out


def _gemm_operands(device):
    n = 8192
    a = torch.randn((n, n), dtype=torch.bfloat16, device=device)
    w = torch.randn((n, n), dtype=torch.bfloat16, device=device)
    return a, w, torch.empty((n, n), dtype=torch.bfloat16, device=device)


def _run_overlapped(gemm, copy, copy_stream, with_gemm: bool, with_copy: bool):
    """Start the GEMMs (default stream) and the copy (side stream) together; their times."""
    e0 = torch.cuda.Event(enable_timing=True)
    g_end = torch.cuda.Event(enable_timing=True)
    c_end = torch.cuda.Event(enable_timing=True)
    e0.record()
    copy_stream.wait_event(e0)
    if with_copy:
        with torch.cuda.stream(copy_stream):
            copy()
    c_end.record(copy_stream)
    if with_gemm:
        gemm()
    g_end.record()
    torch.cuda.synchronize()
    return _events_elapsed_s(e0, g_end), _events_elapsed_s(e0, c_end)


def overlap(b: Bench) -> None:
    """A 1 GiB pinned copy on a side stream against back-to-back 8192^3 bf16 GEMMs."""
    if not b.cuda:
        bl.log("overlap: skipped (needs CUDA streams)")
        return
    if b.over():
        return
    a, w, prod = _gemm_operands(b.device)
    size = 1 * bl.GiB
    host, dev = b.host(size, True), b.dev(size)
    copy_stream = torch.cuda.Stream()
    one = bl.time_fn(lambda: torch.matmul(a, w, out=prod), b.device, reps=5)
    for direction in ("h2d", "d2h"):
        if b.over():
            continue
        if direction == "h2d":

            def copy():
                dev.copy_(host, non_blocking=True)
        else:

            def copy():
                host.copy_(dev, non_blocking=True)

        copy_alone = statistics.median(
            _run_overlapped(None, copy, copy_stream, False, True)[1] for _ in range(3)
        )
        n_gemm = max(4, round(1.2 * copy_alone / one.median_s))

        def gemm(n_gemm=n_gemm):
            for _ in range(n_gemm):
                torch.matmul(a, w, out=prod)

        gemm_alone = [_run_overlapped(gemm, None, copy_stream, True, False)[0] for _ in range(3)]
        both = [_run_overlapped(gemm, copy, copy_stream, True, True) for _ in range(3)]
        g_alone = statistics.median(gemm_alone)
        g_both = bl.summarize([g_s for g_s, _ in both])
        c_both = bl.summarize([c_s for _, c_s in both])
        flops = 2 * 8192**3 * n_gemm
        b.write("overlap", direction, "pinned", size, 1, c_both, size, alone_s=copy_alone,
                slowdown=c_both.median_s / copy_alone, note="copy time, GEMMs running")  # fmt: skip
        b.write("overlap_gemm", direction, "device", 0, n_gemm, g_both, flops, alone_s=g_alone,
                slowdown=g_both.median_s / g_alone,
                note="bw column = GEMM FLOP/s; GEMM time, copy running")  # fmt: skip


def d2d(b: Bench) -> None:
    """The measured memory ceiling: copy within device memory, bytes read + written."""
    if b.over():
        return
    size = 4 * bl.MiB if b.quick else 1 * bl.GiB
    src, dst = b.dev(size), b.dev(size)
    t = b.time(lambda: dst.copy_(src), reps=20)
    b.write("d2d", "d2d", "device", size, 1, t, 2 * size, note="bw counts read + write")


def main() -> None:
    args = bl.common_args(__doc__.splitlines()[0]).parse_args()
    b = Bench(args)
    for step in (d2d, single, blocks, bidir, overlap):
        step(b)
        if b.cuda:
            torch.cuda.empty_cache()
    bl.finish(b.sink, b.deadline, b.skipped)


if __name__ == "__main__":
    main()
