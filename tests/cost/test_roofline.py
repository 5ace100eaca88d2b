"""The roofline cost model: E20 exactly, every term switchable, fast decode runs equal
step-by-step pricing."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost import CostConfig, CostModel, StepWork
from sim.profiles import load_accelerator, load_model

E20 = CostConfig(
    kv_read=False,
    attention_flops=False,
    allreduce=False,
    weights_bytes=140e9,
    mfu_prefill=0.6,
    mfu_decode=0.5,
)


@pytest.fixture(scope="module")
def e20():
    return CostModel(load_model("chapter-70b"), load_accelerator("e20-accelerator"), 1, 1, E20)


def test_e20_decode_46_7_ms_memory_bound(e20):
    c = e20.iteration_time(StepWork(n_decode=32, decode_history_tokens=32 * 4000))
    assert c.total_s == pytest.approx(0.046667, abs=1e-6)
    assert c.comp_s == pytest.approx(0.0112, abs=1e-9)
    assert c.bound == "memory" and c.mfu == 0.5


def test_e20_monolithic_prefill_1194_7_ms(e20):
    c = e20.iteration_time(StepWork(prefill_chunks=((4096, 0),)))
    assert c.total_s == pytest.approx(1.19467, abs=1e-5)
    assert c.bound == "compute" and c.mfu == 0.6
    assert c.total_s / 0.0466667 == pytest.approx(25.6, abs=0.01)


def test_e20_hybrid_512_plus_32_is_158_7_ms(e20):
    c = e20.iteration_time(StepWork(n_decode=32, prefill_chunks=((512, 0),)))
    assert c.total_s == pytest.approx(0.158667, abs=1e-6)
    assert c.flops_per_gpu == pytest.approx(7.616e13)
    # chunked TTFT: 8 such steps = 1269.3 ms, +6.25 % over monolithic
    assert 8 * c.total_s / 1.1946667 - 1 == pytest.approx(0.0625, abs=1e-4)


def test_e20_balanced_chunk_is_128(e20):
    """t_comp = t_mem with 32 decodes at chunk 128 (E20 derived check)."""
    c = e20.iteration_time(StepWork(n_decode=32, prefill_chunks=((128, 0),)))
    assert c.comp_s == pytest.approx(c.mem_s, rel=1e-12)
    c_more = e20.iteration_time(StepWork(n_decode=32, prefill_chunks=((129, 0),)))
    assert c_more.bound == "compute"


def test_terms_switch_off_one_by_one():
    m, a = load_model("llama-3-70b"), load_accelerator("h100-sxm-80gb")
    work = StepWork(
        n_decode=8,
        decode_history_tokens=8 * 8192,
        prefill_chunks=((512, 1024),),
        copy_bytes=1e9,
        alloc_calls=2,
    )
    full = CostModel(m, a, 8, 1, CostConfig(step_overhead_s=1e-3, alloc_latency_s=1e-4))
    c = full.iteration_time(work)
    assert c.kv_read_s > 0 and c.attention_s > 0 and c.allreduce_s > 0
    assert c.copy_s == pytest.approx(2e9 / 3.35e12) and c.alloc_s == pytest.approx(2e-4)
    assert c.total_s == pytest.approx(
        c.overhead_s + c.alloc_s + max(c.mem_s, c.comp_s) + c.allreduce_s + c.copy_s
    )
    for term, attr in (
        ("kv_read", "kv_read_s"),
        ("attention_flops", "attention_s"),
        ("allreduce", "allreduce_s"),
        ("copies", "copy_s"),
        ("weights", "weights_s"),
        ("gemm_flops", "gemm_s"),
    ):
        off = CostModel(m, a, 8, 1, CostConfig(**{term: False}))
        assert getattr(off.iteration_time(work), attr) == 0.0


def test_kv_read_uses_per_gpu_bytes():
    m, a = load_model("llama-3-70b"), load_accelerator("h100-sxm-80gb")
    cm = CostModel(m, a, 8, 1, CostConfig(weights=False, bw_efficiency=1.0))
    c = cm.iteration_time(StepWork(n_decode=1, decode_history_tokens=9999))
    assert c.kv_read_s == pytest.approx(10_000 * 40_960 / 3.35e12)


def test_moe_uses_active_params():
    m, a = load_model("mixtral-8x7b"), load_accelerator("h100-sxm-80gb")
    cm = CostModel(m, a, 1, 1, CostConfig(attention_flops=False))
    c = cm.iteration_time(StepWork(prefill_chunks=((1000, 0),)))
    assert c.flops_per_gpu == pytest.approx(2 * 12.9e9 * 1000)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 256),
    hist=st.integers(0, 2_000_000),
    steps=st.integers(1, 40),
    tp=st.sampled_from([1, 2, 8]),
    overhead=st.sampled_from([0.0, 2e-3]),
)
def test_decode_run_equals_step_by_step(n, hist, steps, tp, overhead):
    cm = CostModel(
        load_model("llama-3-70b"),
        load_accelerator("h100-sxm-80gb"),
        tp,
        1,
        CostConfig(step_overhead_s=overhead),
    )
    fast = cm.decode_run_times(n, hist, steps)
    slow = np.array([cm.iteration_time(StepWork(n, hist + i * n)).total_s for i in range(steps)])
    np.testing.assert_allclose(fast, slow, rtol=1e-12)


# -- attention FLOPs: causal mask (default) vs F23's full square ---------------------------

LLAMA70 = dict(weights=False, kv_read=False, gemm_flops=False, allreduce=False)


def _attention(mask: str, work: StepWork, tp: int = 1):
    m, a = load_model("llama-3-70b"), load_accelerator("h100-sxm-80gb")
    cm = CostModel(m, a, tp, 1, CostConfig(attention_mask=mask, **LLAMA70))
    per_pair = 4 * m.num_layers * m.num_q_heads * m.head_dim / tp  # 4 L d per (q, k) pair
    return cm.iteration_time(work), per_pair, 0.6 * a.peak_flops_per_s("bf16")


@pytest.mark.parametrize("tp", [1, 8])
def test_causal_chunk_counts_the_lower_triangle_of_its_new_tokens(tp):
    """c new tokens over h cached: c h + c (c + 1) / 2 pairs (the issue's 4 L d c (h + c/2)
    plus the diagonal), not the square c (h + c)."""
    c, h = 512, 1024
    work = StepWork(prefill_chunks=((c, h),))
    cost, per_pair, rate = _attention("causal", work, tp)
    assert cost.flops_per_gpu == per_pair * (c * h + c * (c + 1) // 2)
    assert cost.attention_s == pytest.approx(per_pair * (c * h + c * (c + 1) / 2) / rate, rel=1e-15)
    square, _, _ = _attention("square", work, tp)
    assert square.flops_per_gpu == per_pair * c * (h + c)
    # about half of the new-token square: the gap is c (c - 1) / 2 pairs
    assert square.flops_per_gpu - cost.flops_per_gpu == per_pair * c * (c - 1) // 2


def test_causal_monolithic_prefill_is_about_half_of_f23_and_square_is_f23():
    """A monolithic S-token prefill: F23's attention term is 4 L d S^2 (square); the causal
    kernel does S (S + 1) / 2 pairs."""
    from sim.sizing import prefill_flops

    m, s = load_model("llama-3-70b"), 4096
    assert m.num_q_heads * m.head_dim == m.d_model  # so F23's d_model is the kernel's d
    work = StepWork(prefill_chunks=((s, 0),))
    square, _, _ = _attention("square", work)
    causal, per_pair, _ = _attention("causal", work)
    f23_attention = prefill_flops(1.0, m.num_layers, m.d_model, s) - 2 * s  # params = 1
    assert square.flops_per_gpu == f23_attention == 4 * 80 * 8192 * s**2
    assert causal.flops_per_gpu == per_pair * s * (s + 1) // 2
    assert causal.flops_per_gpu / square.flops_per_gpu == pytest.approx(0.5 + 0.5 / s)


def test_a_one_token_chunk_costs_what_a_decode_costs():
    """The causal count with c = 1 is a decode's h + 1, so a prompt whose prefix is cached
    but one token is priced like a decode step."""
    h = 9_999
    chunk, _, _ = _attention("causal", StepWork(prefill_chunks=((1, h),)))
    decode, _, _ = _attention("causal", StepWork(n_decode=1, decode_history_tokens=h))
    assert chunk.flops_per_gpu == decode.flops_per_gpu


def test_the_mask_leaves_decode_runs_and_e20_alone(e20):
    """Decodes attend h + 1 either way; E20 has no attention term, so its 158.7 ms hybrid
    step is the same under both masks."""
    m, a = load_model("llama-3-70b"), load_accelerator("h100-sxm-80gb")
    runs = [
        CostModel(m, a, 8, 1, CostConfig(attention_mask=k)).decode_run_times(32, 32 * 4000, 5)
        for k in ("causal", "square")
    ]
    np.testing.assert_array_equal(runs[0], runs[1])
    hybrid = StepWork(n_decode=32, prefill_chunks=((512, 0),))
    square = CostModel(
        e20.model, e20.accelerator, 1, 1, E20.model_copy(update={"attention_mask": "square"})
    )
    assert square.iteration_time(hybrid).total_s == e20.iteration_time(hybrid).total_s


def test_a_bad_attention_mask_is_one_line_naming_the_choices():
    from sim.errors import ConfigError
    from sim.scenario import load_scenario

    with pytest.raises(ConfigError) as exc:
        load_scenario(
            {"schema_version": 1, "name": "x", "model": "llama-3-8b",
             "hardware": {"accelerator": "h100-sxm-80gb"},
             "cost": {"attention_mask": "triangle"},
             "workload": {"kind": "requests", "requests": [
                {"count": 1, "at_s": 0.0, "prompt_tokens": 16, "output_tokens": 1}]}}
        )  # fmt: skip
    msg = str(exc.value)
    assert "\n" not in msg and "more problem" not in msg and "cost.attention_mask" in msg
    assert "causal" in msg and "square" in msg
