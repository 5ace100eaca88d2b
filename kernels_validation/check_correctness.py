"""Numerical checks of the paged-attention implementations, written to correctness.csv.

Responsibility: on whatever device is present, compare (1) the gather-then-attend
references with contiguous ``scaled_dot_product_attention`` in float64, and (2) the fused
Triton kernel (GPU, or Triton's interpreter with ``--interpret``) with the float64
reference, on fresh random inputs per check, with block-table padding that would show up
as NaN or an index error if it were read. Invariant: every row states its relative error
‖out − ref‖ / ‖ref‖, the bound it had to meet and pass/fail/skip; NaN never passes.
Exit status 1 when any check fails. Imports only torch, Triton (lazily) and the stdlib.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402
import paged_attention as pa  # noqa: E402

COLUMNS = [
    "check", "impl", "device", "dtype", "num_seqs", "num_heads", "num_kv_heads", "head_dim",
    "block_size", "max_context", "rel_err", "bound", "status", "note",
]  # fmt: skip

#: relative-error bounds, by the dtype the compared implementation computes in
BOUNDS = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 5e-3}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("nan")
    return float((out - ref).norm() / ref.norm().clamp_min(1e-300))


def random_case(gen, device, dtype, num_seqs, num_heads, num_kv_heads, head_dim, lens):
    """Fresh random q, contiguous K/V and lengths for one check."""
    max_len = max(lens)
    shape = (num_seqs, max_len, num_kv_heads, head_dim)
    k = torch.randn(shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    v = torch.randn(shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    q = torch.randn((num_seqs, num_heads, head_dim), generator=gen, dtype=torch.float64)
    return q.to(device=device, dtype=dtype), k, v, torch.tensor(lens, device=device)


def sdpa_prefill_ref(q, k, v, hist: int, chunk: int):
    """Contiguous SDPA for one sequence's chunk: q [chunk, H, d], k/v [hist+chunk, H_kv, d]."""
    mask = pa.chunk_causal_mask(hist, chunk, device=q.device)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask,
        enable_gqa=q.shape[1] != k.shape[1],
    )  # fmt: skip
    return out.transpose(0, 1)


class Checker:
    def __init__(self, sink: bl.CsvSink, device: torch.device, seed: int):
        self.sink, self.device = sink, device
        self.gen = torch.Generator().manual_seed(seed)
        self.failed = 0

    def record(self, check, impl, dtype, shape, block_size, err, bound, note=""):
        num_seqs, num_heads, num_kv_heads, head_dim, max_context = shape
        if err is None:
            status, err = "skip", float("nan")
        else:
            status = "pass" if math.isfinite(err) and err <= bound else "fail"
        if status == "fail":
            self.failed += 1
        self.sink.write({
            "check": check, "impl": impl, "device": self.device.type,
            "dtype": str(dtype).replace("torch.", ""), "num_seqs": num_seqs,
            "num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim,
            "block_size": block_size, "max_context": max_context, "rel_err": err,
            "bound": bound, "status": status, "note": note,
        })  # fmt: skip
        bl.log(f"{check:28s} {impl:12s} B={block_size:<4} err={err:.2e} <= {bound:.0e}: {status}")

    def decode_reference(self, cfg, block_size):
        """Reference decode vs contiguous SDPA, float64; padding = an out-of-range index."""
        s, h, hkv, d, lens = cfg
        q, k, v, lt = random_case(self.gen, self.device, torch.float64, s, h, hkv, d, lens)
        kc, vc, bt = pa.make_paged_cache(k, v, lt, block_size, spare_blocks=2,
                                         pad_value=10**9, generator=self.gen)  # fmt: skip
        out = pa.paged_decode_attention(q, kc, vc, bt, lt)
        ref = pa.sdpa_decode(q, k, v, lt)
        shape = (s, h, hkv, d, max(lens))
        err = rel_err(out, ref)
        self.record("decode_ref_vs_sdpa", "torch_ref", q.dtype, shape, block_size, err,
                    BOUNDS[torch.float64])  # fmt: skip

    def prefill_reference(self, cfg, block_size, chunk_lens):
        """Reference chunked prefill vs SDPA with the F26 mask, float64; also decode == chunk 1."""
        s, h, hkv, d, lens = cfg
        q, k, v, lt = random_case(self.gen, self.device, torch.float64, s, h, hkv, d, lens)
        chunks = torch.tensor(chunk_lens, device=self.device)
        hist = lt - chunks
        kc, vc, bt = pa.make_paged_cache(k, v, lt, block_size, spare_blocks=1,
                                         generator=self.gen)  # fmt: skip
        max_chunk = max(chunk_lens)
        qp = torch.randn((s, max_chunk, h, d), generator=self.gen, dtype=torch.float64)
        qp = qp.to(self.device)
        out = pa.paged_prefill_attention(qp, kc, vc, bt, hist, chunks)
        ref = torch.zeros_like(out)
        for i, (n, c) in enumerate(zip(lens, chunk_lens, strict=True)):
            ref[i, :c] = sdpa_prefill_ref(qp[i, :c], k[i, :n], v[i, :n], n - c, c)
        shape = (s, h, hkv, d, max(lens))
        self.record("prefill_ref_vs_sdpa", "torch_ref", qp.dtype, shape, block_size,
                    rel_err(out, ref), BOUNDS[torch.float64])  # fmt: skip
        ones = torch.ones_like(lt)
        dec = pa.paged_decode_attention(q, kc, vc, bt, lt)
        pre = pa.paged_prefill_attention(q.unsqueeze(1), kc, vc, bt, lt - 1, ones)[:, 0]
        self.record("decode_eq_prefill_chunk1", "torch_ref", q.dtype, shape, block_size,
                    rel_err(pre, dec), BOUNDS[torch.float64])  # fmt: skip

    def prefill_bias(self, hist: int, chunk: int, dtype):
        """SDPA with the lower-right causal bias (bench_layer's prefill over history: the
        flash kernel on a GPU) vs SDPA with the explicit F26 mask in float64, one Llama-3-8B
        attention layer (32 query heads, 8 KV heads of 128)."""
        h, hkv, d, n = 32, 8, 128, hist + chunk
        g = self.gen
        q = torch.randn((chunk, h, d), generator=g, dtype=torch.float64)
        k = torch.randn((n, hkv, d), generator=g, dtype=torch.float64)
        v = torch.randn((n, hkv, d), generator=g, dtype=torch.float64)
        qd, kd, vd = (t.to(device=self.device, dtype=dtype) for t in (q, k, v))
        # the reference on the same (rounded) inputs, in float64 on the host
        ref = sdpa_prefill_ref(*(t.double().cpu() for t in (qd, kd, vd)), hist, chunk)
        out = F.scaled_dot_product_attention(
            qd.transpose(0, 1)[None], kd.transpose(0, 1)[None], vd.transpose(0, 1)[None],
            attn_mask=pa.chunk_causal_bias(hist, chunk), enable_gqa=True,
        )[0].transpose(0, 1)  # fmt: skip
        self.record("prefill_bias_vs_mask", "sdpa", dtype, (1, h, hkv, d, n), 0,
                    rel_err(out.double().cpu(), ref), BOUNDS[dtype], f"chunk={chunk}")  # fmt: skip

    def fused(self, cfg, block_size, dtype, num_splits=None, enabled=True, note=""):
        """Triton kernel vs the float64 reference on the same (rounded) inputs."""
        s, h, hkv, d, lens = cfg
        shape = (s, h, hkv, d, max(lens))
        if not enabled:
            self.record("decode_fused_vs_ref", "triton", dtype, shape, block_size, None,
                        BOUNDS[dtype], note)  # fmt: skip
            return
        q, k, v, lt = random_case(self.gen, self.device, dtype, s, h, hkv, d, lens)
        # padding points at valid blocks full of NaN: a stray read poisons the output
        kc, vc, bt = pa.make_paged_cache(k, v, lt, block_size, spare_blocks=2, pad_value=-1,
                                         generator=self.gen)  # fmt: skip
        nan_blocks = torch.isnan(kc.float().flatten(1)).all(dim=1).nonzero().flatten()
        bt[bt < 0] = int(nan_blocks[0])
        ref = pa.paged_decode_attention(q.double(), kc.double(), vc.double(), bt, lt)
        out = pa.paged_decode_attention_fused(q, kc, vc, bt, lt, num_splits=num_splits,
                                              poison=True)  # fmt: skip
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        note = note or f"splits={'auto' if num_splits is None else num_splits}"
        self.record("decode_fused_vs_ref", "triton", dtype, shape, block_size,
                    rel_err(out, ref), BOUNDS[dtype], note)  # fmt: skip


DECODE_CFGS = [  # (num_seqs, num_heads, num_kv_heads, head_dim, context lens)
    (3, 8, 8, 32, [1, 17, 40]),
    (4, 8, 2, 64, [5, 33, 64, 100]),
    (2, 16, 2, 64, [129, 7]),
]
#: one layer of Llama-3-8B attention (GQA 4, head_dim 128), mixed lengths
LLAMA_CFG = (4, 32, 8, 128, [1, 100, 1000, 4097])


def fused_plan(device: torch.device, interpret: bool):
    """(cfg, block size, dtype, splits) in priority order; each new shape is a compile."""
    if interpret:  # tiny shapes, no compile cost; see run() for the dtype
        return [(cfg, b, dt, None) for cfg in DECODE_CFGS for b in (1, 7, 16, 128)
                for dt in (torch.float32, torch.float16)] + [
            (cfg, 16, torch.float32, 3) for cfg in DECODE_CFGS]  # fmt: skip
    bf16, f32 = torch.bfloat16, torch.float32
    plan = [(LLAMA_CFG, b, bf16, None) for b in (16, 1, 7, 128)]
    plan += [(LLAMA_CFG, 16, f32, None), (LLAMA_CFG, 16, bf16, 3)]
    plan += [(cfg, b, dt, None) for cfg in DECODE_CFGS for b in (16, 7) for dt in (bf16, f32)]
    return plan


def run(args) -> int:
    device = bl.pick_device(args.device)
    sink = bl.CsvSink(args.out, COLUMNS)
    deadline = bl.Deadline(args.budget_s)
    chk = Checker(sink, device, args.seed)
    for cfg in DECODE_CFGS:
        for block_size in (1, 4, 16, 128):
            chk.decode_reference(cfg, block_size)
        chunk_lens = [max(1, min(n, c)) for n, c in zip(cfg[4], itertools.cycle((1, 9, 16, 40)))]
        chk.prefill_reference(cfg, 16, chunk_lens)
        chk.prefill_reference(cfg, 3, [n for n in cfg[4]])  # whole prompt as one chunk
    skipped = 0
    if device.type == "cuda" or args.interpret:
        # Triton 3.6's interpreter computes bf16 dot products wrongly (seen: errors ~1e9 on
        # a plain bf16 tl.dot), so the interpreter checks fp16; the GPU checks bf16.
        for cfg, block_size, dtype, splits in fused_plan(device, args.interpret):
            if deadline.expired():
                skipped += 1
                continue
            chk.fused(cfg, block_size, dtype, num_splits=splits)
    else:
        for cfg in DECODE_CFGS:
            chk.fused(cfg, 16, torch.bfloat16, enabled=False, note="needs CUDA (or --interpret)")
    # after the fused kernel's checks (its timings rest on them): bench_layer's prefill path
    bias_dtype = torch.bfloat16 if device.type == "cuda" else torch.float64
    for hist, chunk in ((0, 64), (37, 19), (4000, 512)):  # (0, c): the plain causal path
        chk.prefill_bias(hist, chunk, bias_dtype)
    bl.finish(sink, deadline, skipped)
    bl.log(f"correctness: {chk.failed} failed")
    return 1 if chk.failed else 0


def main() -> None:
    p = bl.common_args(__doc__.splitlines()[0])
    p.add_argument("--interpret", action="store_true",
                   help="run the Triton kernel in Triton's CPU interpreter (slow, small cases)")  # fmt: skip
    args = p.parse_args()
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"
        bl.fix_triton_interpreter_for_numpy2()
    torch.manual_seed(args.seed)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
