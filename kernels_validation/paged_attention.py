"""Attention over a paged KV cache: gather-then-attend references and a fused Triton kernel.

Responsibility: decode attention (one new query token per sequence) and chunked-prefill
attention (a chunk of new query tokens after a history) over a KV cache stored in
fixed-size blocks addressed through a block table, in vLLM's layout; plus helpers that
page a contiguous cache and a contiguous SDPA baseline, for tests and benchmarks.

Invariant: sequence ``s`` reads only the cache blocks named by the first
``ceil(len_s / block_size)`` entries of its block-table row, and only the first ``len_s``
token slots of them. The rest of the row is padding and is never used as an index, so it
may hold any value (-1, a huge number, a block full of NaN). This module imports only
torch and the standard library (it runs on the device image); Triton is imported lazily,
only when the fused kernel is called.

Shapes (one layer):
  q (decode)      [num_seqs, num_heads, head_dim]
  q (prefill)     [num_seqs, max_chunk_len, num_heads, head_dim]
  k_cache/v_cache [num_blocks, block_size, num_kv_heads, head_dim]
  block_tables    [num_seqs, max_blocks_per_seq], integer
  context_lens    [num_seqs], tokens in the cache per sequence (>= 1)
GQA: ``num_heads`` is a multiple of ``num_kv_heads``; query head ``h`` uses KV head
``h // (num_heads // num_kv_heads)`` (the grouping of torch SDPA's ``enable_gqa``).
"""

from __future__ import annotations

import importlib
import math

import torch
import torch.nn.functional as F


def _check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, num_heads: int, head_dim: int):
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(
            "k_cache and v_cache must both be [num_blocks, block_size, num_kv_heads, head_dim]"
            f", got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    num_kv_heads = k_cache.shape[2]
    if k_cache.shape[3] != head_dim:
        raise ValueError(f"head_dim of q ({head_dim}) != head_dim of cache ({k_cache.shape[3]})")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    return num_heads // num_kv_heads


def _check_table(block_tables: torch.Tensor, lens: torch.Tensor, num_seqs: int, block_size: int):
    if block_tables.dim() != 2 or block_tables.shape[0] != num_seqs:
        raise ValueError(f"block_tables must be [num_seqs={num_seqs}, max_blocks_per_seq]")
    if lens.shape != (num_seqs,):
        raise ValueError(f"lengths must be [num_seqs={num_seqs}], got {tuple(lens.shape)}")
    if block_tables.dtype.is_floating_point:
        raise ValueError("block_tables must hold integers")
    capacity = block_tables.shape[1] * block_size
    if num_seqs and int(lens.max()) > capacity:
        raise ValueError(f"a length exceeds the block table's capacity of {capacity} tokens")


def gather_sequence_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, table_row: torch.Tensor, n_tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``n_tokens`` keys and values of one sequence, contiguous: [n, kv_heads, d]."""
    block_size = k_cache.shape[1]
    n_blocks = -(-n_tokens // block_size)
    blocks = table_row[:n_blocks].to(torch.long)  # only the sequence's own entries
    k = k_cache[blocks].flatten(0, 1)[:n_tokens]
    v = v_cache[blocks].flatten(0, 1)[:n_tokens]
    return k, v


def _math_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group: int,
    scale: float,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """q [t, H, d], k/v [n, H_kv, d], mask [t, n] (True = visible) -> [t, H, d]."""
    acc = _math_dtype(q.dtype)
    k = k.to(acc).repeat_interleave(group, dim=1)
    v = v.to(acc).repeat_interleave(group, dim=1)
    scores = torch.einsum("thd,nhd->htn", q.to(acc), k) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("htn,nhd->thd", probs, v).to(q.dtype)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """Decode attention, gather-then-attend: the correctness reference. -> [seqs, heads, d].

    Each sequence's query attends to all ``context_lens[s]`` cached tokens (the new
    token's own K/V is expected to be in the cache already, as in vLLM). Math runs in
    float64 for float64 inputs and float32 otherwise; the result has q's dtype.
    """
    num_seqs, num_heads, head_dim = q.shape
    group = _check_cache(k_cache, v_cache, num_heads, head_dim)
    _check_table(block_tables, context_lens, num_seqs, k_cache.shape[1])
    if num_seqs and int(context_lens.min()) < 1:
        raise ValueError("every context length must be >= 1 for decode")
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    out = torch.empty_like(q)
    for s in range(num_seqs):
        n = int(context_lens[s])
        k, v = gather_sequence_kv(k_cache, v_cache, block_tables[s], n)
        out[s] = _attend(q[s : s + 1], k, v, group, scale, None)[0]
    return out


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    history_lens: torch.Tensor,
    chunk_lens: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """Chunked-prefill attention over paged history + causal chunk (F26).

    ``q`` [num_seqs, max_chunk_len, num_heads, head_dim] holds each sequence's chunk of
    new query tokens, left-aligned; row ``i < chunk_lens[s]`` is absolute position
    ``history_lens[s] + i``. The cache must already hold the chunk's own K/V after the
    history (positions ``0 .. history + chunk - 1``), as vLLM writes them before attention.
    Query ``i`` sees every history token and chunk tokens ``0..i`` (mask M_k of F26).
    Returns [num_seqs, max_chunk_len, num_heads, head_dim]; padded rows are zero.
    """
    num_seqs, max_chunk, num_heads, head_dim = q.shape
    group = _check_cache(k_cache, v_cache, num_heads, head_dim)
    _check_table(block_tables, history_lens + chunk_lens, num_seqs, k_cache.shape[1])
    if num_seqs and (int(chunk_lens.max()) > max_chunk or int(chunk_lens.min()) < 0):
        raise ValueError(f"chunk lengths must lie in 0..{max_chunk}")
    if num_seqs and int(history_lens.min()) < 0:
        raise ValueError("history lengths must be >= 0")
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    out = torch.zeros_like(q)
    for s in range(num_seqs):
        hist, chunk = int(history_lens[s]), int(chunk_lens[s])
        if chunk == 0:
            continue
        k, v = gather_sequence_kv(k_cache, v_cache, block_tables[s], hist + chunk)
        mask = chunk_causal_mask(hist, chunk, device=q.device)
        out[s, :chunk] = _attend(q[s, :chunk], k, v, group, scale, mask)
    return out


def chunk_causal_mask(history: int, chunk: int, device=None) -> torch.Tensor:
    """[chunk, history + chunk] bool: query i sees keys 0 .. history + i (True = visible)."""
    rows = torch.arange(chunk, device=device)[:, None]
    cols = torch.arange(history + chunk, device=device)[None, :]
    return cols <= history + rows


def chunk_causal_bias(history: int, chunk: int):
    """The visibility of ``chunk_causal_mask`` as torch's lower-right causal bias
    (``torch.nn.attention.bias.causal_lower_right``): SDPA runs it on its flash or
    memory-efficient kernel on a GPU, as serving engines run a chunk over its cached prefix,
    where an explicit boolean mask can keep SDPA on its slower math path. Pass it as
    ``attn_mask`` (with ``is_causal=False``)."""
    from torch.nn.attention.bias import causal_lower_right

    return causal_lower_right(chunk, history + chunk)


def make_paged_cache(
    k: torch.Tensor,
    v: torch.Tensor,
    lens: torch.Tensor,
    block_size: int,
    *,
    spare_blocks: int = 0,
    pad_value: int = -1,
    shuffle: bool = True,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Page contiguous K/V [num_seqs, max_len, kv_heads, d] into (k_cache, v_cache, tables).

    Physical blocks are handed out in a shuffled order (a pool after some churn), unused
    slots and ``spare_blocks`` extra blocks are filled with NaN (or the dtype's max for
    integer dtypes), and each table row is padded with ``pad_value`` past its blocks, so
    any read outside the invariant shows up as NaN or an index error.
    """
    num_seqs, _, kv_heads, head_dim = k.shape
    per_seq = [-(-int(n) // block_size) for n in lens]
    total = sum(per_seq) + spare_blocks
    # block ids stay on the host: they are only used to index from Python
    order = (
        torch.randperm(total, generator=generator) if shuffle else torch.arange(total)
    ).tolist()
    fill = float("nan") if k.dtype.is_floating_point else torch.iinfo(k.dtype).max
    shape = (total, block_size, kv_heads, head_dim)
    k_cache = torch.full(shape, fill, dtype=k.dtype, device=k.device)
    v_cache = torch.full(shape, fill, dtype=v.dtype, device=v.device)
    tables = torch.full((num_seqs, max(per_seq, default=0) or 1), pad_value, dtype=torch.int32)
    next_block = 0
    for s, nb in enumerate(per_seq):
        n = int(lens[s])
        for j in range(nb):
            phys = order[next_block]
            next_block += 1
            tables[s, j] = phys
            lo, hi = j * block_size, min((j + 1) * block_size, n)
            k_cache[phys, : hi - lo] = k[s, lo:hi]
            v_cache[phys, : hi - lo] = v[s, lo:hi]
    return k_cache, v_cache, tables.to(k.device)


def sdpa_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lens: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """Contiguous baseline: SDPA on q [S, H, d] and K/V [S, max_len, H_kv, d] with padding."""
    num_seqs, num_heads, _ = q.shape
    max_len = k.shape[1]
    qt = q.unsqueeze(2)  # [S, H, 1, d]
    kt, vt = k.transpose(1, 2), v.transpose(1, 2)  # [S, H_kv, L, d]
    mask = None
    if num_seqs and int(lens.min()) < max_len:
        mask = (torch.arange(max_len, device=q.device)[None, :] < lens[:, None])[:, None, None]
    out = F.scaled_dot_product_attention(
        qt, kt, vt, attn_mask=mask, scale=scale, enable_gqa=num_heads != k.shape[2]
    )
    return out.squeeze(2)


def paged_decode_attention_fused(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float | None = None,
    **kernel_options,
) -> torch.Tensor:
    """Decode attention with the fused Triton kernel (``triton_paged.py``); GPU only.

    Same contract as ``paged_decode_attention``. Triton is imported here, on first use.
    """
    name = f"{__package__}.triton_paged" if __package__ else "triton_paged"
    mod = importlib.import_module(name)
    return mod.paged_decode_attention_triton(
        q, k_cache, v_cache, block_tables, context_lens, scale, **kernel_options
    )
