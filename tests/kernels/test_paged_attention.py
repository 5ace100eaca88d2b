"""Paged attention references vs contiguous SDPA, on fresh random inputs (CPU, torch).

Error bounds (relative, ||out - ref|| / ||ref||, Frobenius):
  float64 reference vs float64 SDPA ............ <= 1e-12
  float32 reference vs float64 SDPA ............ <= 1e-5
  decode vs prefill with a chunk of 1 .......... exactly equal (same arithmetic)
The fused Triton kernel is checked on the GPU by check_correctness.py (and here in
Triton's CPU interpreter when Triton is installed; see test_bench_scripts.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import check_correctness as cc  # noqa: E402
import paged_attention as pa  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

F64, F32 = 1e-12, 1e-5


@st.composite
def cases(draw, prefill: bool = False):
    num_kv = draw(st.sampled_from([1, 2, 4]))
    group = draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([4, 8, 16]))
    block = draw(st.sampled_from([1, 2, 3, 5, 8, 16, 32]))
    lens = draw(st.lists(st.integers(1, 70), min_size=1, max_size=4))
    chunks = [draw(st.integers(1, n)) for n in lens] if prefill else None
    seed = draw(st.integers(0, 2**31 - 1))
    return num_kv * group, num_kv, head_dim, block, lens, chunks, seed


def _inputs(heads, num_kv, head_dim, lens, seed, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q, k, v, lt = cc.random_case(gen, torch.device("cpu"), dtype, len(lens), heads, num_kv,
                                 head_dim, lens)  # fmt: skip
    return q, k, v, lt, gen


@settings(max_examples=40, deadline=None)
@given(cases())
def test_decode_matches_contiguous_sdpa_float64(case):
    heads, num_kv, head_dim, block, lens, _, seed = case
    q, k, v, lt, gen = _inputs(heads, num_kv, head_dim, lens, seed)
    kc, vc, bt = pa.make_paged_cache(k, v, lt, block, spare_blocks=2, pad_value=10**9,
                                     generator=gen)  # fmt: skip
    out = pa.paged_decode_attention(q, kc, vc, bt, lt)
    assert cc.rel_err(out, pa.sdpa_decode(q, k, v, lt)) <= F64
    assert out.shape == q.shape and out.dtype == q.dtype


@settings(max_examples=40, deadline=None)
@given(cases(prefill=True))
def test_chunked_prefill_matches_sdpa_with_f26_mask(case):
    heads, num_kv, head_dim, block, lens, chunks, seed = case
    q, k, v, lt, gen = _inputs(heads, num_kv, head_dim, lens, seed)
    ch = torch.tensor(chunks)
    kc, vc, bt = pa.make_paged_cache(k, v, lt, block, spare_blocks=1, generator=gen)
    qp = torch.randn((len(lens), max(chunks), heads, head_dim), generator=gen, dtype=torch.float64)
    out = pa.paged_prefill_attention(qp, kc, vc, bt, lt - ch, ch)
    for s, (n, c) in enumerate(zip(lens, chunks, strict=True)):
        ref = cc.sdpa_prefill_ref(qp[s, :c], k[s, :n], v[s, :n], n - c, c)
        assert cc.rel_err(out[s, :c], ref) <= F64
        assert torch.count_nonzero(out[s, c:]) == 0  # padded query rows stay zero


@settings(max_examples=20, deadline=None)
@given(cases())
def test_float32_reference_within_bound(case):
    heads, num_kv, head_dim, block, lens, _, seed = case
    q, k, v, lt, gen = _inputs(heads, num_kv, head_dim, lens, seed, torch.float32)
    kc, vc, bt = pa.make_paged_cache(k, v, lt, block, generator=gen)
    out = pa.paged_decode_attention(q, kc, vc, bt, lt)
    ref = pa.sdpa_decode(q.double(), k.double(), v.double(), lt)
    assert out.dtype == torch.float32
    assert cc.rel_err(out, ref) <= F32


@settings(max_examples=20, deadline=None)
@given(cases())
def test_decode_equals_prefill_of_one_token(case):
    heads, num_kv, head_dim, block, lens, _, seed = case
    q, k, v, lt, gen = _inputs(heads, num_kv, head_dim, lens, seed)
    kc, vc, bt = pa.make_paged_cache(k, v, lt, block, generator=gen)
    dec = pa.paged_decode_attention(q, kc, vc, bt, lt)
    one = torch.ones_like(lt)
    pre = pa.paged_prefill_attention(q.unsqueeze(1), kc, vc, bt, lt - 1, one)[:, 0]
    assert torch.equal(dec, pre)


def test_padding_and_foreign_blocks_are_never_read():
    gen = torch.Generator().manual_seed(7)
    q, k, v, lt = cc.random_case(gen, torch.device("cpu"), torch.float64, 3, 4, 2, 8, [5, 16, 1])
    kc, vc, bt = pa.make_paged_cache(k, v, lt, 4, spare_blocks=3, pad_value=-1, generator=gen)
    # the unused tail slots of each sequence's last block and the spare blocks are NaN
    assert torch.isnan(kc).any()
    out = pa.paged_decode_attention(q, kc, vc, bt, lt)
    assert torch.isfinite(out).all()
    # any padding value works, even one that would be an out-of-range index
    for pad in (-(10**9), 10**9, 0):
        bt2 = bt.clone()
        bt2[bt2 == -1] = pad
        assert torch.equal(pa.paged_decode_attention(q, kc, vc, bt2, lt), out)


def test_one_token_context_returns_its_value():
    gen = torch.Generator().manual_seed(3)
    q, k, v, lt = cc.random_case(gen, torch.device("cpu"), torch.float64, 1, 4, 2, 8, [1])
    kc, vc, bt = pa.make_paged_cache(k, v, lt, 16, generator=gen)
    out = pa.paged_decode_attention(q, kc, vc, bt, lt)
    # softmax over one key is 1: each head returns its KV head's value (GQA grouping)
    expect = v[0, 0].repeat_interleave(2, dim=0)
    assert torch.allclose(out[0], expect, rtol=0, atol=1e-15)


def test_chunk_causal_mask_exact():
    m = pa.chunk_causal_mask(2, 3)
    assert m.tolist() == [
        [True, True, True, False, False],
        [True, True, True, True, False],
        [True, True, True, True, True],
    ]


def test_chunk_causal_bias_sees_what_the_mask_sees():
    # bench_layer's prefill over history: the lower-right causal bias (SDPA's flash kernel
    # on a GPU) gives the explicit F26 mask's output, GQA 4 as in Llama-3-8B
    gen = torch.Generator().manual_seed(5)
    for hist, chunk in ((0, 5), (3, 4), (40, 9)):
        q = torch.randn((1, 8, chunk, 16), generator=gen, dtype=torch.float64)
        k = torch.randn((1, 2, hist + chunk, 16), generator=gen, dtype=torch.float64)
        v = torch.randn_like(k)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        want = sdpa(q, k, v, attn_mask=pa.chunk_causal_mask(hist, chunk), enable_gqa=True)
        got = sdpa(q, k, v, attn_mask=pa.chunk_causal_bias(hist, chunk), enable_gqa=True)
        assert torch.allclose(got, want, rtol=0, atol=1e-13)


def test_scale_argument_is_used():
    gen = torch.Generator().manual_seed(5)
    q, k, v, lt = cc.random_case(gen, torch.device("cpu"), torch.float64, 2, 2, 1, 8, [9, 3])
    kc, vc, bt = pa.make_paged_cache(k, v, lt, 2, generator=gen)
    out = pa.paged_decode_attention(q, kc, vc, bt, lt, scale=0.05)
    assert cc.rel_err(out, pa.sdpa_decode(q, k, v, lt, scale=0.05)) <= F64
    assert cc.rel_err(out, pa.sdpa_decode(q, k, v, lt)) > 1e-3


def test_bad_shapes_raise_clear_errors():
    q = torch.zeros(2, 6, 8)
    kc = torch.zeros(4, 4, 4, 8)
    bt = torch.zeros(2, 2, dtype=torch.int32)
    lens = torch.tensor([3, 3])
    with pytest.raises(ValueError, match="not a multiple of num_kv_heads"):
        pa.paged_decode_attention(q, kc, kc, bt, lens)
    q = torch.zeros(2, 8, 8)
    with pytest.raises(ValueError, match="capacity of 8 tokens"):
        pa.paged_decode_attention(q, kc, kc, bt, torch.tensor([3, 9]))
    with pytest.raises(ValueError, match=">= 1 for decode"):
        pa.paged_decode_attention(q, kc, kc, bt, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="must hold integers"):
        pa.paged_decode_attention(q, kc, kc, bt.float(), lens)
    with pytest.raises(ValueError, match="num_blocks, block_size"):
        pa.paged_decode_attention(q, kc[0], kc[0], bt, lens)


def test_fused_kernel_refuses_cpu_tensors_without_interpreter(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    q = torch.zeros(1, 2, 16)
    kc = torch.zeros(1, 16, 1, 16)
    with pytest.raises(RuntimeError, match="needs a CUDA tensor"):
        pa.paged_decode_attention_fused(q, kc, kc, torch.zeros(1, 1, dtype=torch.int32),
                                        torch.tensor([1]))  # fmt: skip
