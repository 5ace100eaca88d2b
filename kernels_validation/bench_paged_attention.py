"""Benchmark: decode attention time and achieved bandwidth vs block size, context and batch.

Responsibility: time one layer of decode attention over a paged KV cache for block sizes
1..128, several context lengths and batch sizes, against contiguous baselines (the same
kernel with one block per sequence, and torch SDPA on a contiguous [S, H_kv, L, d] cache),
and write one CSV row per case. On a GPU the paged case runs the fused Triton kernel; on a
CPU (``--quick``) it runs the gather-then-attend reference, which checks the plumbing only.

Invariant: ``bytes_moved`` counts what the kernel must read or write at least once (K and
V of every context token, q, the output and the block-table entries), so
``achieved_bw_bytes_per_s = bytes_moved / time_s_median`` is comparable across block
sizes; repeats cycle through enough distinct caches (``rotations``) that they do not run
from L2. Imports only torch, Triton (lazily) and the standard library.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402
import paged_attention as pa  # noqa: E402

COLUMNS = [
    "sweep", "impl", "device", "dtype", "num_seqs", "num_heads", "num_kv_heads", "head_dim",
    "block_size", "context_tokens", "kv_bytes", "bytes_moved", "rotations",
    "time_s_median", "time_s_p10", "time_s_p90", "reps", "achieved_bw_bytes_per_s",
]  # fmt: skip
BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True)
class Case:
    sweep: str
    impl: str  # paged | contiguous_same_kernel | sdpa_contiguous
    num_seqs: int
    context: int
    block_size: int


@dataclass(frozen=True)
class Shape:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype


def plan(quick: bool) -> list[Case]:
    """Cases in priority order: a timeout keeps the most important ones."""
    total_tokens = 256 if quick else 262_144  # 262k tokens x 8 KV heads x 128 x 2 B = 1 GiB K+V
    contexts = (32, 128) if quick else (4096, 16384, 1024, 65536)
    cases: list[Case] = []
    for ctx in contexts:
        seqs = max(1, total_tokens // ctx)
        cases += [Case("block_context", "paged", seqs, ctx, b) for b in BLOCK_SIZES]
        cases.append(Case("block_context", "contiguous_same_kernel", seqs, ctx, ctx))
        cases.append(Case("block_context", "sdpa_contiguous", seqs, ctx, ctx))
    batch_ctx = 64 if quick else 4096
    for seqs in (1, 4) if quick else (1, 2, 4, 8, 16, 32, 128, 256):
        cases.append(Case("batch", "paged", seqs, batch_ctx, 16))
        cases.append(Case("batch", "sdpa_contiguous", seqs, batch_ctx, batch_ctx))
    return cases


def use_fused(device: torch.device) -> bool:
    """The Triton kernel on a GPU, or in Triton's CPU interpreter when asked for (tests)."""
    return device.type == "cuda" or bl.env_flag("TRITON_INTERPRET")


def _impl_name(impl: str, device: torch.device) -> str:
    if impl == "sdpa_contiguous":
        return impl
    kernel = "triton" if use_fused(device) else "torch_gather_ref"
    return f"{kernel}_{'paged' if impl == 'paged' else 'contiguous'}"


def build_paged(case: Case, shape: Shape, rotations: int, device, gen):
    """Random paged caches and ``rotations`` block tables over disjoint, shuffled blocks."""
    per_seq = -(-case.context // case.block_size)
    n_blocks = per_seq * case.num_seqs * rotations
    cache_shape = (n_blocks, case.block_size, shape.num_kv_heads, shape.head_dim)
    k = torch.randn(cache_shape, dtype=shape.dtype, device=device, generator=gen)
    v = torch.randn(cache_shape, dtype=shape.dtype, device=device, generator=gen)
    if case.impl == "paged":
        order = bl.host_randperm(n_blocks, device, seed=n_blocks)
    else:  # one block per sequence, in order: the contiguous layout, same kernel
        order = torch.arange(n_blocks, device=device)
    tables = order.to(torch.int32).reshape(rotations, case.num_seqs, per_seq)
    return k, v, tables


def make_call(case: Case, shape: Shape, device: torch.device, gen):
    """A no-argument callable that runs one decode-attention call, rotating its inputs."""
    kv_bytes = 2 * case.num_seqs * case.context * shape.num_kv_heads * shape.head_dim
    kv_bytes *= shape.dtype.itemsize
    rotations = bl.rotation_count(kv_bytes, device)
    q = torch.randn((case.num_seqs, shape.num_heads, shape.head_dim), dtype=shape.dtype,
                    device=device, generator=gen)  # fmt: skip
    lens = torch.full((case.num_seqs,), case.context, dtype=torch.int32, device=device)
    state = {"i": 0}
    if case.impl == "sdpa_contiguous":
        kv_shape = (rotations, case.num_seqs, shape.num_kv_heads, case.context, shape.head_dim)
        ks = torch.randn(kv_shape, dtype=shape.dtype, device=device, generator=gen)
        vs = torch.randn(kv_shape, dtype=shape.dtype, device=device, generator=gen)
        qt = q.unsqueeze(2)
        gqa = shape.num_heads != shape.num_kv_heads

        def call():
            r = state["i"] = (state["i"] + 1) % rotations
            return torch.nn.functional.scaled_dot_product_attention(
                qt, ks[r], vs[r], enable_gqa=gqa
            )

        return call, kv_bytes, rotations
    kc, vc, tables = build_paged(case, shape, rotations, device, gen)
    fused = use_fused(device)

    def call():
        r = state["i"] = (state["i"] + 1) % rotations
        if fused:
            return pa.paged_decode_attention_fused(q, kc, vc, tables[r], lens,
                                                   max_context_len=case.context)  # fmt: skip
        return pa.paged_decode_attention(q, kc, vc, tables[r], lens)

    return call, kv_bytes, rotations


def run_case(case: Case, shape: Shape, device, gen, quick: bool) -> dict:
    call, kv_bytes, rotations = make_call(case, shape, device, gen)
    timing = bl.time_fn(call, device, warmup=1 if quick else 3, reps=3 if quick else 30,
                        max_time_s=0.1 if quick else 1.0)  # fmt: skip
    per_seq_blocks = -(-case.context // case.block_size)
    qo_bytes = 2 * case.num_seqs * shape.num_heads * shape.head_dim * shape.dtype.itemsize
    table_bytes = 4 * case.num_seqs * per_seq_blocks if case.impl != "sdpa_contiguous" else 0
    moved = kv_bytes + qo_bytes + table_bytes
    return {
        "sweep": case.sweep, "impl": _impl_name(case.impl, device), "device": device.type,
        "dtype": str(shape.dtype).replace("torch.", ""), "num_seqs": case.num_seqs,
        "num_heads": shape.num_heads, "num_kv_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim, "block_size": case.block_size,
        "context_tokens": case.context, "kv_bytes": kv_bytes, "bytes_moved": moved,
        "rotations": rotations, **timing.row(), "achieved_bw_bytes_per_s": moved / timing.median_s,
    }  # fmt: skip


def main() -> None:
    args = bl.common_args(__doc__.splitlines()[0]).parse_args()
    device = bl.pick_device(args.device)
    bl.fix_triton_interpreter_for_numpy2()
    if args.quick:
        shape = Shape(4, 2, 64, torch.float32)
    else:  # one layer of Llama-3-8B / -70B attention: 8 KV heads of 128, GQA 4
        shape = Shape(32, 8, 128, torch.bfloat16 if device.type == "cuda" else torch.float32)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    sink = bl.CsvSink(args.out, COLUMNS)
    deadline = bl.Deadline(args.budget_s)
    skipped = 0
    for case in plan(args.quick):
        if deadline.expired():
            skipped += 1
            continue
        row = run_case(case, shape, device, gen, args.quick)
        sink.write(row)
        bl.log(f"{case.sweep:13s} {row['impl']:24s} S={case.num_seqs:<4} L={case.context:<6} "
               f"B={case.block_size:<6} {row['time_s_median'] * 1e6:9.1f} us "
               f"{row['achieved_bw_bytes_per_s'] / 1e9:8.1f} GB/s")  # fmt: skip
        if device.type == "cuda":
            torch.cuda.empty_cache()
    bl.finish(sink, deadline, skipped)


if __name__ == "__main__":
    main()
