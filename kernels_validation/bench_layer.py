"""Benchmark: end-to-end step time of a stack of random-weight transformer layers.

Responsibility: run engine-like steps through ``n_layers`` Llama-style layers (RMSNorm,
fused QKV, RoPE, attention, output projection, SwiGLU MLP; random weights, no embedding
or LM head) of a real geometry, for three step kinds:
  decode   ``decode_seqs`` sequences, one new token each, attention over a paged KV cache
           (the fused Triton kernel on a GPU, the reference on a CPU);
  prefill  one sequence's chunk of ``prefill_chunk_tokens`` after ``prefill_history_tokens``
           of history (SDPA over a contiguous per-sequence KV buffer, causal from the
           bottom right, F26: torch's lower-right causal bias, which SDPA runs on its flash
           kernel on a GPU; ``paged_attention.chunk_causal_bias``);
  hybrid   one prefill chunk and a decode batch in the same step (chunked prefill, E20).
Each row also records the step's shape and its work (weight bytes, KV bytes read and
written, linear and attention FLOPs), so the simulator's prediction for the same step
can be computed later, off the device, from the CSV alone.

Invariant: the work columns are computed from the shapes by the formulas in
``step_work`` and are what a roofline model should charge for the step; on a GPU the step
is captured in a CUDA graph when possible (``cuda_graph`` column), as serving engines do,
so launch overhead is not what we measure. Imports only torch, Triton (lazily) and stdlib.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402
import paged_attention as pa  # noqa: E402

COLUMNS = [
    "geometry", "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "dtype",
    "dtype_bytes", "device", "phase", "prefill_chunk_tokens", "prefill_history_tokens",
    "decode_seqs", "decode_context_tokens", "block_size", "tokens_in_step", "weight_bytes",
    "kv_bytes_read", "kv_bytes_written", "linear_flops", "attention_flops", "cuda_graph",
    "time_s_median", "time_s_p10", "time_s_p90", "reps",
]  # fmt: skip


@dataclass(frozen=True)
class Step:
    """One engine step: an optional prefill chunk and an optional decode batch."""

    chunk: int = 0  # prefill chunk tokens (one sequence)
    history: int = 0  # tokens of that sequence already in the cache
    seqs: int = 0  # decoding sequences
    context: int = 0  # tokens in each decoding sequence's cache, the new one included

    @property
    def phase(self) -> str:
        if self.chunk and self.seqs:
            return "hybrid"
        return "prefill" if self.chunk else "decode"

    @property
    def tokens(self) -> int:
        return self.chunk + self.seqs


def step_work(geo: bl.Geometry, n_layers: int, elem_bytes: int, step: Step) -> dict:
    """What a roofline charges for ``step``: bytes and FLOPs, whole stack."""
    kv_tok = geo.kv_elems_per_token_per_layer() * elem_bytes * n_layers
    attn_pairs = step.seqs * step.context + step.chunk * step.history
    attn_pairs += step.chunk * (step.chunk + 1) // 2  # causal part of the chunk
    return {
        "weight_bytes": geo.linear_params_per_layer() * elem_bytes * n_layers,
        "kv_bytes_read": kv_tok * (step.seqs * step.context + step.history + step.chunk),
        "kv_bytes_written": kv_tok * step.tokens,
        "linear_flops": 2 * step.tokens * geo.linear_params_per_layer() * n_layers,
        "attention_flops": 4 * geo.n_heads * geo.head_dim * attn_pairs * n_layers,
    }


def plan(quick: bool) -> list[Step]:
    """Steps in priority order: a timeout keeps the most important ones."""
    if quick:
        return [Step(seqs=2, context=64), Step(chunk=32), Step(chunk=16, history=48),
                Step(chunk=16, seqs=2, context=64), Step(seqs=4, context=32)]  # fmt: skip
    return [
        Step(seqs=1, context=1024),
        Step(seqs=32, context=4096),
        Step(chunk=512),
        Step(chunk=2048),
        Step(chunk=512, seqs=32, context=4096),
        Step(seqs=128, context=1024),
        Step(chunk=2048, history=8192),
        Step(seqs=1, context=8192),
        Step(seqs=8, context=4096),
        Step(seqs=64, context=4096),
        Step(seqs=256, context=1024),
        Step(chunk=8192),
        Step(chunk=512, history=4096),
        Step(chunk=2048, history=32768),
        Step(chunk=2048, history=4096, seqs=64, context=1024),
    ]


class Stack:
    """Random weights for ``n_layers`` layers; a step's caches are built per step."""

    def __init__(self, geo: bl.Geometry, n_layers: int, dtype, device, gen):
        self.geo, self.n_layers, self.dtype, self.device = geo, n_layers, dtype, device
        self.layers = []
        for _ in range(n_layers):
            ws = {}
            for op, (k, n) in geo.linear_shapes().items():
                ws[op] = torch.randn((n, k), dtype=dtype, device=device, generator=gen)
                ws[op].mul_(k**-0.5)
            ws["norm1"] = torch.ones(geo.d_model, dtype=dtype, device=device)
            ws["norm2"] = torch.ones(geo.d_model, dtype=dtype, device=device)
            self.layers.append(ws)


def rope_tables(positions: torch.Tensor, head_dim: int, dtype):
    """cos/sin [T, 1, head_dim/2] for rotate-half RoPE (theta 500000, as Llama 3)."""
    half = head_dim // 2
    inv = 500000.0 ** (-torch.arange(half, device=positions.device, dtype=torch.float32) / half)
    ang = positions.to(torch.float32)[:, None] * inv[None, :]
    return ang.cos().to(dtype)[:, None, :], ang.sin().to(dtype)[:, None, :]


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


class StepRunner:
    """Caches, inputs and the forward pass for one ``Step`` through a ``Stack``."""

    def __init__(self, stack: Stack, step: Step, block_size: int, fused: bool, gen):
        self.stack, self.step, self.fused = stack, step, fused
        geo, dev, dt = stack.geo, stack.device, stack.dtype
        self.x = torch.randn((step.tokens, geo.d_model), dtype=dt, device=dev, generator=gen)
        pos = [step.history + i for i in range(step.chunk)] + [step.context - 1] * step.seqs
        self.cos, self.sin = rope_tables(torch.tensor(pos, device=dev), geo.head_dim, dt)
        self.attn = torch.empty((step.tokens, geo.n_heads, geo.head_dim), dtype=dt, device=dev)
        kv_shape = (geo.n_kv_heads, geo.head_dim)
        self.pre_k = self.pre_v = []
        self.mask = None
        if step.chunk:
            n = step.history + step.chunk
            self.pre_k = [torch.randn((n, *kv_shape), dtype=dt, device=dev, generator=gen)
                          for _ in range(stack.n_layers)]  # fmt: skip
            self.pre_v = [torch.randn_like(k) for k in self.pre_k]
            if step.history:
                self.mask = pa.chunk_causal_bias(step.history, step.chunk)
        self.dec_k = self.dec_v = []
        if step.seqs:
            per_seq = -(-step.context // block_size)
            n_blocks = per_seq * step.seqs
            order = bl.host_randperm(n_blocks, dev, seed=n_blocks).to(torch.int32)
            self.tables = order.reshape(step.seqs, per_seq)
            self.lens = torch.full((step.seqs,), step.context, dtype=torch.int32, device=dev)
            last = step.context - 1
            self.slots = (self.tables[:, last // block_size].long() * block_size
                          + last % block_size)  # fmt: skip
            shape = (n_blocks, block_size, *kv_shape)
            self.dec_k = [torch.randn(shape, dtype=dt, device=dev, generator=gen)
                          for _ in range(stack.n_layers)]  # fmt: skip
            self.dec_v = [torch.randn_like(k) for k in self.dec_k]

    def attention(self, i: int, q, k, v) -> torch.Tensor:
        st, geo = self.step, self.stack.geo
        c = st.chunk
        if c:
            kb, vb = self.pre_k[i], self.pre_v[i]
            kb[st.history :].copy_(k[:c])
            vb[st.history :].copy_(v[:c])
            out = F.scaled_dot_product_attention(  # [1, heads, tokens, d] layout
                q[:c].transpose(0, 1)[None], kb.transpose(0, 1)[None], vb.transpose(0, 1)[None],
                attn_mask=self.mask, is_causal=self.mask is None, enable_gqa=True,
            )  # fmt: skip
            self.attn[:c].copy_(out[0].transpose(0, 1))
        if st.seqs:
            kc, vc = self.dec_k[i], self.dec_v[i]
            kc.view(-1, geo.n_kv_heads, geo.head_dim).index_copy_(0, self.slots, k[c:])
            vc.view(-1, geo.n_kv_heads, geo.head_dim).index_copy_(0, self.slots, v[c:])
            if self.fused:
                out = pa.paged_decode_attention_fused(q[c:], kc, vc, self.tables, self.lens,
                                                      max_context_len=st.context)  # fmt: skip
            else:
                out = pa.paged_decode_attention(q[c:], kc, vc, self.tables, self.lens)
            self.attn[c:].copy_(out)
        return self.attn.flatten(1)

    def forward(self) -> torch.Tensor:
        geo = self.stack.geo
        hq, hkv, d = geo.n_heads * geo.head_dim, geo.n_kv_heads * geo.head_dim, geo.head_dim
        x = self.x
        for i, ws in enumerate(self.stack.layers):
            qkv = F.linear(rms_norm(x, ws["norm1"]), ws["qkv"])
            q = qkv[:, :hq].reshape(-1, geo.n_heads, d)
            k = qkv[:, hq : hq + hkv].reshape(-1, geo.n_kv_heads, d)
            v = qkv[:, hq + hkv :].reshape(-1, geo.n_kv_heads, d)
            q, k = rope(q, self.cos, self.sin), rope(k, self.cos, self.sin)
            x = x + F.linear(self.attention(i, q, k, v), ws["o"])
            gate, up = F.linear(rms_norm(x, ws["norm2"]), ws["gate_up"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, ws["down"])
        return x


def as_graph(fn, device):
    """Capture ``fn`` in a CUDA graph (after warm-up on a side stream); None if it fails."""
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph.replay
    except Exception as exc:  # noqa: BLE001 - fall back to eager and say so in the log
        bl.log(f"CUDA graph capture failed ({type(exc).__name__}: {exc}); timing eagerly")
        torch.cuda.synchronize(device)
        return None


def run_step(stack, step, block_size, device, gen, quick, graphs) -> dict:
    fused = device.type == "cuda" or bl.env_flag("TRITON_INTERPRET")
    runner = StepRunner(stack, step, block_size, fused, gen)
    call, used_graph = runner.forward, False
    if graphs and device.type == "cuda":
        replay = as_graph(runner.forward, device)
        if replay is not None:
            call, used_graph = replay, True
    t = bl.time_fn(call, device, warmup=1 if quick else 3, reps=3 if quick else 15,
                   max_time_s=0.3 if quick else 1.0)  # fmt: skip
    geo, elem = stack.geo, stack.dtype.itemsize
    return {
        "geometry": geo.name, "n_layers": stack.n_layers, "d_model": geo.d_model,
        "n_heads": geo.n_heads, "n_kv_heads": geo.n_kv_heads, "head_dim": geo.head_dim,
        "d_ff": geo.d_ff, "dtype": str(stack.dtype).replace("torch.", ""), "dtype_bytes": elem,
        "device": device.type, "phase": step.phase, "prefill_chunk_tokens": step.chunk,
        "prefill_history_tokens": step.history, "decode_seqs": step.seqs,
        "decode_context_tokens": step.context, "block_size": block_size,
        "tokens_in_step": step.tokens, **step_work(geo, stack.n_layers, elem, step),
        "cuda_graph": used_graph, **t.row(),
    }  # fmt: skip


def main() -> None:
    p = bl.common_args(__doc__.splitlines()[0])
    p.add_argument("--geometry", default=None, help="default: tiny (quick) or llama-3-8b")
    p.add_argument("--layers", type=int, default=None, help="default: all of the geometry's")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--no-graphs", action="store_true", help="time eagerly on a GPU")
    args = p.parse_args()
    device = bl.pick_device(args.device)
    bl.fix_triton_interpreter_for_numpy2()
    geo = bl.GEOMETRIES[args.geometry or ("tiny" if args.quick else "llama-3-8b")]
    dtype = torch.bfloat16 if device.type == "cuda" and not args.quick else torch.float32
    gen = torch.Generator(device=device).manual_seed(args.seed)
    stack = Stack(geo, args.layers or geo.n_layers, dtype, device, gen)
    sink = bl.CsvSink(args.out, COLUMNS)
    deadline = bl.Deadline(args.budget_s)
    skipped = 0
    for step in plan(args.quick):
        if deadline.expired():
            skipped += 1
            continue
        row = run_step(stack, step, args.block_size, device, gen, args.quick, not args.no_graphs)
        sink.write(row)
        bl.log(f"{row['phase']:8s} chunk={step.chunk:<5} hist={step.history:<6} "
               f"seqs={step.seqs:<4} ctx={step.context:<5} graph={row['cuda_graph']!s:5} "
               f"{row['time_s_median'] * 1e3:9.3f} ms")  # fmt: skip
        if device.type == "cuda":
            torch.cuda.empty_cache()
    bl.finish(sink, deadline, skipped)


if __name__ == "__main__":
    main()
