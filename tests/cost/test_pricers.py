"""Every step pricer meets the one pricer interface (``sim.cost.pricer``): a run of k steps
priced at once equals its k steps priced one by one, bit for bit, and a run of one step is
the step (any batch, prefill chunks and copies included). One property test runs every
pricer: ``roofline_max`` (datasheet and a version-1 calibration), ``per_group`` (datasheet
and a Vidur calibration), ``kernel_tables`` (dense with the skew correction, and MoE), hybrid
models under each (sliding window, chunked local, Mamba state layers), and
the expert-parallel ``LockstepPricer`` (experts priced apart, and inside each rank's
roofline), each with async scheduling on and off."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost import CostConfig, CostModel, StepWork
from sim.cost.expert_parallel import LockstepPricer
from sim.cost.pricer import StepPricer, advanced, prefill_share, prefill_share_s
from sim.profiles import load_accelerator, load_model
from sim.profiles.schema import ModelProfile, SlidingWindowSpec

H100, PRO6000 = load_accelerator("h100-sxm-80gb"), load_accelerator("rtx-pro-6000-server-96gb")

#: name -> (model, accelerator, TP, cost config)
MODELS = {
    "roofline": ("llama-3-70b", H100, 8, {"step_overhead_s": 2e-3}),
    "roofline-v1-calibration": ("llama-3-8b", H100, 1, {"calibration": "synthetic-example"}),
    "per_group": ("llama-3-8b", H100, 2, {"step_pricing": "per_group", "kernel_floor_s": 3e-6,
                                          "step_overhead_s": 1e-3}),
    "per_group-vidur": ("llama-3-8b", H100, 1, {"calibration": "h100-sxm-80gb-vidur"}),
    "kernel_tables-skew": ("qwen3-32b", PRO6000, 2, {"calibration": "rtx-pro-6000-server-96gb-llmservingsim",
                                                      "skew_correction": True}),
    "kernel_tables-moe": ("qwen3-30b-a3b", PRO6000, 1, {"calibration": "rtx-pro-6000-server-96gb-llmservingsim"}),
    # hybrid models (sim.sizing.attention_work): sliding, chunked local and state layers
    "roofline-sliding": ("gpt-oss-20b", H100, 1, {"step_overhead_s": 1e-3}),
    "per_group-sliding": ("gemma-3-27b", H100, 2, {"step_pricing": "per_group", "kernel_floor_s": 3e-6}),
    "roofline-chunked": ("llama-4-scout-17b-16e", H100, 1, {}),
    "per_group-vidur-mamba": ("nemotron-h-8b", H100, 1, {"calibration": "h100-sxm-80gb-vidur"}),
}  # fmt: skip
#: a kernel-table model made hybrid: its table looked up at each group's span
HYBRID_TABLES = ("qwen3-32b", PRO6000, 2, {"calibration": "rtx-pro-6000-server-96gb-llmservingsim"})
#: name -> (the cost model of MODELS, ranks, CUDA-graph tokens)
LOCKSTEP = {
    "lockstep-experts-apart": ("kernel_tables-moe", 3, 512),
    "lockstep-roofline-eager": ("roofline-moe", 2, 4),
}


@functools.cache
def cost_model(name: str, async_on: bool) -> CostModel:
    if name == "roofline-moe":
        model, accel, tp, cfg = "qwen3-30b-a3b", H100, 1, {"step_overhead_s": 1e-3}
    elif name == "kernel_tables-sliding":
        model, accel, tp, cfg = HYBRID_TABLES
    else:
        model, accel, tp, cfg = MODELS[name]
    profile = load_model(model)
    if name == "kernel_tables-sliding":  # one layer in two slides over 1,000 tokens
        window = SlidingWindowSpec(window_tokens=1000, pattern=["sliding", "full"])
        profile = ModelProfile.model_validate({**profile.model_dump(), "sliding_window": window.model_dump()})
    m = CostModel(profile, accel, tp, 1, CostConfig(**cfg))
    m.async_scheduling = async_on
    return m


@functools.cache
def pricer(name: str, async_on: bool) -> StepPricer:
    if name in LOCKSTEP:
        base, ranks, graph = LOCKSTEP[name]
        return LockstepPricer(cost_model(base, async_on), ranks, cudagraph_max_tokens=graph)
    return cost_model(name, async_on)


def test_the_lockstep_pricers_split_as_named():
    assert pricer("lockstep-experts-apart", False).split
    assert not pricer("lockstep-roofline-eager", False).split
    assert cost_model("kernel_tables-skew", False).pricing == "kernel_tables"
    assert cost_model("per_group-vidur", False).pricing == "per_group"
    assert cost_model("kernel_tables-sliding", False).pricing == "kernel_tables"
    assert cost_model("kernel_tables-sliding", False).attention_work is not None


@st.composite
def decode_works(draw) -> StepWork:
    """A batch of decodes of unequal contexts (the skew correction's longest and shortest)."""
    hist = draw(st.lists(st.integers(0, 40_000), min_size=1, max_size=40))
    return StepWork(len(hist), sum(hist), (), 0.0, 0, max(hist), min(hist))


def total(p: StepPricer, work) -> float:
    return p.price(work).total_s


def step(work, i: int):
    if isinstance(work, list):
        return [None if w is None else advanced(w, i) for w in work]
    return advanced(work, i)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from([*MODELS, *LOCKSTEP, "kernel_tables-sliding"]),
    async_on=st.booleans(),
    works=st.lists(st.one_of(st.none(), decode_works()), min_size=3, max_size=3),
    steps=st.integers(1, 25),
)
def test_a_run_of_k_steps_is_its_k_steps_for_every_pricer(name, async_on, works, steps):
    p = pricer(name, async_on)
    if name in LOCKSTEP:
        work = (works + [None] * 3)[: p.R]
        if all(w is None for w in work):
            work[0] = StepWork(1, 10, (), 0.0, 0, 10, 10)
    else:
        work = next((w for w in works if w is not None), StepWork(1, 10, (), 0.0, 0, 10, 10))
    run = p.price_run(work, steps)
    assert run.shape == (steps,) and run.dtype == np.float64
    one_by_one = [total(p, step(work, i)) for i in range(steps)]
    assert run.tolist() == one_by_one
    assert all(t > 0 for t in one_by_one)
    if name not in LOCKSTEP:  # each step's attention seconds, by the same code (issue 25)
        durations, att = p.price_run_attention(work, steps)
        assert durations.tolist() == one_by_one and att.shape == (steps,) and att.dtype == np.float64
        assert att.tolist() == [attention(p.price(step(work, i))) for i in range(steps)]


def attention(cost) -> float:
    """A breakdown's attention seconds: the larger of its KV read and attention FLOPs."""
    return max(cost.kv_read_s, cost.attention_s)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from([*MODELS, "kernel_tables-sliding"]),
    async_on=st.booleans(),
    n_decode=st.integers(0, 30),
    chunks=st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 30_000)), max_size=2),
    copy_bytes=st.sampled_from([0.0, 3e6]),
)
def test_a_run_of_one_step_is_the_step_for_any_batch(name, async_on, n_decode, chunks, copy_bytes):
    p = pricer(name, async_on)
    if n_decode == 0 and not chunks:
        chunks = [(16, 0)]
    hi = 500 + n_decode if n_decode else None
    work = StepWork(n_decode, 500 * n_decode, tuple(chunks), copy_bytes, 0, hi, 500 if n_decode else None)
    assert p.price_run(work, 1).tolist() == [p.price(work).total_s]
    # the seconds alone (no breakdown), as the engine asks for a run's later steps
    assert p.price_s(work) == p.price(work).total_s
    # with the step's attention seconds (a run's prefill steps: sim.engine.node)
    assert p.price_s_attention(work) == (p.price(work).total_s, attention(p.price(work)))
    assert p.price_run_attention(work, 1)[1].tolist() == [attention(p.price(work))]


@functools.cache
def scaled(name: str, scale: float) -> CostModel:
    """The cost model of MODELS with ``cost.step_time_scale`` (capacity's error band)."""
    model, accel, tp, cfg = MODELS[name]
    return CostModel(load_model(model), accel, tp, 1, CostConfig(**cfg, step_time_scale=scale))


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(list(MODELS)),
    n_decode=st.integers(0, 30),
    chunks=st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 30_000)), min_size=1, max_size=3),
    verify=st.sets(st.integers(0, 2)),
    scale=st.sampled_from([1.0, 1.3]),
)
def test_the_prefill_share_from_seconds_is_the_share_from_breakdowns(name, n_decode, chunks, verify, scale):
    """``prefill_share_s`` (the engine's, on ``price_s``) equals ``prefill_share`` on full
    breakdowns, bit for bit, and is the prompt chunks' price over the prompt's plus the
    decodes' and verifies' (each priced alone, copies and allocator calls in neither)."""
    p = scaled(name, scale)
    hi = 500 + n_decode if n_decode else None
    work = StepWork(n_decode, 500 * n_decode, tuple(chunks), 3e6, 2, hi, 500 if n_decode else None)
    verify = sorted(v for v in verify if v < len(chunks))
    share = prefill_share_s(p.price_s, work, verify)
    assert share == prefill_share(p.price, work, verify)
    assert p.price_s_attention(work) == (p.price(work).total_s, attention(p.price(work)))  # scaled too
    prompt = tuple(c for i, c in enumerate(chunks) if i not in verify)
    if not prompt:
        assert share == 0.0
        return
    if not n_decode and len(prompt) == len(chunks):
        assert share == 1.0
        return
    pre = p.price(StepWork(0, 0, prompt)).total_s
    rest = StepWork(n_decode, 500 * n_decode, tuple(chunks[i] for i in verify), 0.0, 0, hi,
                    500 if n_decode else None)  # fmt: skip
    assert share == pre / (pre + p.price(rest).total_s)


@pytest.mark.parametrize("work", [StepWork(1, 0, ((8, 0),)), StepWork(1, 5, (), 1.0), StepWork(1, 5, (), 0.0, 2)])
def test_only_a_batch_of_decodes_repeats(work):
    with pytest.raises(ValueError, match="repeats"):
        pricer("roofline", False).price_run(work, 2)
    with pytest.raises(ValueError, match="at least one step"):
        pricer("roofline", False).price_run(StepWork(1, 5), 0)


def test_a_step_work_is_a_value():
    """``StepWork`` is a slots dataclass (not frozen, for its constructor's speed), still a
    value: equal works are equal and hash alike, and ``advanced`` builds a new work."""
    a, b = StepWork(3, 90, ((16, 4),), 0.0, 0, 40, 20), StepWork(3, 90, ((16, 4),), 0.0, 0, 40, 20)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != StepWork(3, 91, ((16, 4),), 0.0, 0, 40, 20)
    later = advanced(a, 2)
    assert later is not a and a == b  # the first step is left as it was
    assert (later.decode_history_tokens, later.decode_max_history_tokens, later.decode_min_history_tokens) == (96, 42, 22)
    assert not hasattr(a, "__dict__")  # slots: no per-instance dictionary


@pytest.mark.parametrize(
    ("name", "distinct", "overlap_moves"),
    [("per_group-vidur", 6, True), ("roofline", 6, True), ("kernel_tables-skew", 5, False)],
)
def test_a_step_with_no_decode_is_priced_once_per_shape(name, distinct, overlap_moves):
    """``price_s`` of a step with no decode (the prefill share's prompt part) is memoised by
    what prices it: the same chunks again answer the memo, each of the chunks, history,
    copy bytes, allocator calls and async scheduling (switched between calls, as a run sets
    it) makes its own price, and every answer is the full pricing's (the kernel tables
    read no history without decodes: five distinct prices of six; their steps cost the
    same with async scheduling)."""
    model, accel, tp, cfg = MODELS[name]
    p = CostModel(load_model(model), accel, tp, 1, CostConfig(**{**cfg, "alloc_latency_s": 5e-6, "step_overhead_s": 1e-3}))
    chunks = ((512, 0),)
    works = [StepWork(0, 0, chunks), StepWork(0, 0, ((512, 1024),)), StepWork(0, 0, chunks, 3e6),
             StepWork(0, 0, chunks, 0.0, 4), StepWork(0, 7000, chunks), StepWork(0, 0, (*chunks, (64, 0)))]  # fmt: skip
    seen = []
    for async_on in (False, True, False):
        p.async_scheduling = async_on
        for w in works:
            first, again = p.price_s(w), p.price_s(w)
            assert first == again == p.price(w).total_s
            seen.append(first)
    n = len(works)
    assert len(set(seen[:n])) == distinct
    assert (seen[:n] != seen[n : 2 * n]) == overlap_moves
    assert seen[:n] == seen[2 * n :]
    assert len(p._prompt_s) == 2 * n
    # a step with decodes is not memoised
    p.price_s(StepWork(3, 300, chunks, 0.0, 0, 100, 100))
    assert len(p._prompt_s) == 2 * n
