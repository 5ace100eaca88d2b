"""Fused paged decode attention in Triton (split-K, "flash-decoding" style).

Responsibility: read each sequence's K/V straight from the paged cache through the block
table, once, and compute decode attention without materialising a gathered copy. One
program handles one (sequence, KV head, context split): all query heads of the GQA group
share the K/V tiles it loads. Per-split partial results (unnormalised output, running max,
running sum) are merged in torch afterwards with the log-sum-exp rule of F26.

Invariant: a program loads only token positions ``< context_lens[s]`` and only the
block-table entries of those positions (all other loads are masked off), so padding in a
block-table row is never dereferenced. Imported only when the fused kernel is called (the
device image has Triton; the CPU test venv may not). With ``TRITON_INTERPRET=1`` it runs
on CPU tensors in Triton's interpreter, which is how it is tested without a GPU.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl


@triton.jit
def _paged_decode_split_kernel(
    q_ptr, k_ptr, v_ptr, bt_ptr, lens_ptr, acc_ptr, m_ptr, l_ptr,
    scale, partition_tokens,
    stride_qs, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_bts,
    stride_as, stride_ah, stride_ap, stride_ag,
    stride_ms, stride_mh, stride_mp,
    GROUP: tl.constexpr, G_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    ctx = tl.load(lens_ptr + seq)
    start = split * partition_tokens
    end = tl.minimum(start + partition_tokens, ctx)

    g = tl.arange(0, G_PAD)
    d = tl.arange(0, HEAD_DIM)
    g_ok = g < GROUP
    heads = kvh * GROUP + g
    q = tl.load(
        q_ptr + seq * stride_qs + heads[:, None] * stride_qh + d[None, :],
        mask=g_ok[:, None], other=0.0,
    )  # fmt: skip
    m_i = tl.full([G_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, HEAD_DIM], tl.float32)
    for t0 in range(start, end, BLOCK_N):
        t = t0 + tl.arange(0, BLOCK_N)
        ok = t < end
        phys = tl.load(bt_ptr + seq * stride_bts + t // BLOCK_SIZE, mask=ok, other=0)
        phys = phys.to(tl.int64)
        slot = (t % BLOCK_SIZE).to(tl.int64)
        k = tl.load(
            k_ptr + phys[:, None] * stride_kb + slot[:, None] * stride_kt + kvh * stride_kh
            + d[None, :], mask=ok[:, None], other=0.0,
        )  # fmt: skip
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale
        qk = tl.where(ok[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_ptr + phys[:, None] * stride_vb + slot[:, None] * stride_vt + kvh * stride_vh
            + d[None, :], mask=ok[:, None], other=0.0,
        )  # fmt: skip
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    base = seq * stride_ms + kvh * stride_mh + split * stride_mp
    tl.store(m_ptr + base + g, m_i)
    tl.store(l_ptr + base + g, l_i)
    a_base = seq * stride_as + kvh * stride_ah + split * stride_ap
    tl.store(acc_ptr + a_base + g[:, None] * stride_ag + d[None, :], acc)


def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # interpreter on a CPU: any small number


def plan_splits(
    num_seqs: int,
    num_kv_heads: int,
    max_context: int,
    sm_count: int,
    block_n: int,
    num_splits: int | None = None,
) -> tuple[int, int]:
    """(splits, tokens per split): enough programs to fill ~2 waves of the SMs."""
    tiles = max(1, math.ceil(max_context / block_n))
    if num_splits is None:
        num_splits = math.ceil(2 * sm_count / max(1, num_seqs * num_kv_heads))
    num_splits = max(1, min(num_splits, tiles))
    partition = math.ceil(tiles / num_splits) * block_n
    return math.ceil(max_context / partition), partition


def paged_decode_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float | None = None,
    *,
    max_context_len: int | None = None,
    num_splits: int | None = None,
    block_n: int = 64,
    num_warps: int = 4,
    num_stages: int = 2,
    poison: bool = False,
) -> torch.Tensor:
    """Fused paged decode attention; same contract as ``paged_decode_attention``.

    ``max_context_len`` defaults to the block table's capacity (no host sync, so the call
    can be captured in a CUDA graph); splits past a sequence's length do no work.
    float32 inputs use IEEE dot products (exact-ish, for checks); bf16/fp16 use the tensor
    cores with float32 accumulation. ``poison`` fills the partial buffers with NaN first,
    so a check can see that every element was written.
    """
    if not q.is_cuda and os.environ.get("TRITON_INTERPRET", "") != "1":
        raise RuntimeError("the Triton kernel needs a CUDA tensor (or TRITON_INTERPRET=1)")
    num_seqs, num_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads, hd = k_cache.shape
    if hd != head_dim or num_heads % num_kv_heads or head_dim & (head_dim - 1) or head_dim < 16:
        raise ValueError("need head_dim equal in q and cache, a power of 2 >= 16, GQA grouping")
    if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError("q and the caches must be contiguous in head_dim")
    group = num_heads // num_kv_heads
    g_pad = max(16, triton.next_power_of_2(group))
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    if max_context_len is None:
        max_context_len = block_tables.shape[1] * block_size
    splits, partition = plan_splits(
        num_seqs, num_kv_heads, max_context_len, _sm_count(q.device), block_n, num_splits
    )
    acc = torch.empty(
        (num_seqs, num_kv_heads, splits, g_pad, head_dim), dtype=torch.float32, device=q.device
    )
    m = torch.empty((num_seqs, num_kv_heads, splits, g_pad), dtype=torch.float32, device=q.device)
    lsum = torch.empty_like(m)
    if poison:
        for buf in (acc, m, lsum):
            buf.fill_(float("nan"))
    lens = context_lens.to(device=q.device, dtype=torch.int32)
    tables = block_tables.to(device=q.device, dtype=torch.int32)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    _paged_decode_split_kernel[(num_seqs, num_kv_heads, splits)](
        q, k_cache, v_cache, tables, lens, acc, m, lsum,
        scale, partition,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        tables.stride(0),
        acc.stride(0), acc.stride(1), acc.stride(2), acc.stride(3),
        m.stride(0), m.stride(1), m.stride(2),
        GROUP=group, G_PAD=g_pad, HEAD_DIM=head_dim, BLOCK_SIZE=block_size, BLOCK_N=block_n,
        DOT_PRECISION=precision, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return _merge_splits(acc, m, lsum, group, num_heads, q.dtype)


def _merge_splits(acc, m, lsum, group: int, num_heads: int, dtype: torch.dtype) -> torch.Tensor:
    """Log-sum-exp merge of the per-split partials -> [num_seqs, num_heads, head_dim]."""
    m_max = m.amax(dim=2, keepdim=True)
    m_max = torch.where(torch.isfinite(m_max), m_max, torch.zeros_like(m_max))
    w = torch.exp(m - m_max)  # empty splits have m = -inf -> weight 0
    denom = (w * lsum).sum(dim=2)
    out = (w.unsqueeze(-1) * acc).sum(dim=2) / denom.unsqueeze(-1)
    num_seqs, num_kv_heads = out.shape[:2]
    out = out[:, :, :group].reshape(num_seqs, num_heads, -1)
    return out.to(dtype)
