"""Lockstep pricing of data-parallel MoE ranks (sim/cost/expert_parallel.py) from the tiny
hand-made kernel tables of test_kernel_tables: padding to the largest batch, the expert
layer at the global token count (T / S tokens over the local experts), the dispatch and combine collectives over the accelerator's link, the
dummy batch, async scheduling, a one-rank group equal to its engine, the roofline
fallback."""

from __future__ import annotations

import pytest
from test_kernel_tables import TINY_MOE, US, tiny_cost

from sim.cost import StepWork
from sim.cost.expert_parallel import DUMMY_WORK, LockstepPricer

#: the RTX PRO 6000 profile's link (PCIe, no NVLink): 20 us + bytes / 16 GB/s per call
LAT, BW = 20e-6, 16e9
DECODE = StepWork(n_decode=1, decode_history_tokens=15)
CHUNK8 = StepWork(prefill_chunks=((8, 0),))


def moe_at(tokens: float, experts: float) -> float:
    """The tiny table (tokens 1, 17 x experts 2, 8: 40, 40 (filled), 60, 120 us), by hand."""
    wt = min(max((tokens - 1) / 16, 0.0), 1.0)
    we = min(max((experts - 2) / 6, 0.0), 1.0)
    lo = 40.0
    hi = 60 + we * 60
    return (lo + wt * (hi - lo)) * US


def collective(n_max: int, ranks: int = 2) -> float:
    return LAT + (ranks - 1) * n_max * 64 * 2 / BW


def test_padding_runs_the_dense_operators_at_the_largest_batch(tmp_path):
    """A 1-token decode padded to 8 tokens: the dense tables at 8 instead of 1 (7/16 of
    the way between the measured 1 and 17), every layer and the step operators."""
    m = tiny_cost(tmp_path, model=TINY_MOE)
    layer1 = 2 * 1 + 10 + 5
    layer8 = 2 * (1 + 2 * 7 / 16) + (10 + 20 * 7 / 16) + (5 + 10 * 7 / 16)
    steps = (1 + 7 / 16 - 1) + (1 + 2 * 7 / 16 - 1)  # embedding, final norm
    extra = (2 * (layer8 - layer1) + steps) * US
    assert m.gpu_terms(DECODE, 8)[0] - m.gpu_terms(DECODE)[0] == pytest.approx(extra, rel=1e-12)
    # the LM head stays at the rank's own sequences: padding to 1 changes nothing
    assert m.gpu_terms(DECODE, 1) == m.gpu_terms(DECODE)


def test_a_decode_beside_a_prefill_chunk_ep2_by_hand(tmp_path):
    """Rank 0 decodes 1 sequence, rank 1 prefills 8 tokens: n_max 8, T 16 global tokens;
    each GPU holds 4 of the 8 experts and computes T k / S = 16 pairs, i.e. the table at
    8 tokens over 4 (1 - (3/4)^16) active local experts; 2 L collectives of 8 padded
    tokens + one sync latency; the step ends together at host + max(rank) + experts +
    collectives."""
    m = tiny_cost(tmp_path, model=TINY_MOE)
    p = LockstepPricer(m, 2)
    out = p.price([DECODE, CHUNK8])
    local = 4 * (1 - 0.75**16)
    moe = 2 * moe_at(8, local)
    comm = 4 * collective(8) + LAT
    rank = [m.gpu_terms(DECODE, 8)[0], m.gpu_terms(CHUNK8, 8)[0]]
    assert out.n_max == 8 and out.padded and out.global_tokens == 16 and out.dummy == (False, False)
    assert out.padding_tokens == 7  # the decode's 1 token padded to 8
    assert out.moe_s == pytest.approx(moe, rel=1e-12)
    assert out.comm_s == pytest.approx(comm, rel=1e-12)
    assert out.total_s == pytest.approx(1e-3 + max(rank) + moe + comm, rel=1e-12)
    for r, c in enumerate(out.costs):  # every rank sees the same step, its own breakdown
        assert c.total_s == out.total_s
        assert c.extra["lockstep"] and c.extra["moe_s"] == out.moe_s
        assert c.extra["lockstep_wait_s"] == pytest.approx(max(rank) - rank[r], abs=1e-15)
    assert out.costs[0].n_tokens == 1 and out.costs[1].n_tokens == 8


def test_a_rank_without_work_runs_the_one_token_dummy_batch(tmp_path):
    m = tiny_cost(tmp_path, model=TINY_MOE)
    out = LockstepPricer(m, 2).price([CHUNK8, None])
    assert out.dummy == (False, True)
    assert out.rank_gpu_s[1] == pytest.approx(m.gpu_terms(DUMMY_WORK, 8)[0], rel=1e-12)
    assert out.costs[1].n_tokens == 1 and out.costs[1].extra["dummy"]
    # two idle ranks never step (the engine does not ask), but the price is defined
    both = LockstepPricer(m, 2).price([None, None])
    assert both.n_max == 1 and both.dummy == (True, True)


def test_one_rank_without_collectives_is_its_engine(tmp_path):
    """R = 1: no collective, the experts at n tokens over all E: the single engine's price."""
    m = tiny_cost(tmp_path, model=TINY_MOE)
    p = LockstepPricer(m, 1)
    for w in (DECODE, CHUNK8, StepWork(n_decode=3, decode_history_tokens=40, prefill_chunks=((5, 16),))):
        assert p.price([w]).total_s == pytest.approx(m.iteration_time(w).total_s, rel=1e-12)
        assert p.price([w]).comm_s == 0.0


def test_async_scheduling_hides_the_host_behind_the_common_step(tmp_path):
    m = tiny_cost(tmp_path, model=TINY_MOE)
    sync = LockstepPricer(m, 2).price([DECODE, CHUNK8]).total_s
    m.async_scheduling = True
    out = LockstepPricer(m, 2).price([DECODE, CHUNK8])
    assert out.total_s == pytest.approx(max(1e-3, sync - 1e-3), rel=1e-12)


def test_more_ranks_move_more_bytes_per_collective(tmp_path):
    m = tiny_cost(tmp_path, model=TINY_MOE)
    out = LockstepPricer(m, 4).price([CHUNK8, DECODE, None, None])
    # the profile states its PCIe line at 2 GPUs only: 4 ranks use that link (nearest)
    assert out.comm_s == pytest.approx(4 * collective(8, ranks=4) + LAT, rel=1e-12)
    assert out.padding_tokens == 0 + 7 + 8 + 8
    assert out.global_tokens == 32  # each GPU: 2 of 8 experts, T k / S = 16 pairs = 8 tokens
    assert out.moe_s == pytest.approx(2 * moe_at(8, 2 * (1 - 0.75**32)), rel=1e-12)


def test_a_roofline_pricing_keeps_each_ranks_own_price_and_adds_the_collectives(tmp_path):
    m = tiny_cost(tmp_path, model=TINY_MOE, step_pricing="roofline_max")
    out = LockstepPricer(m, 2).price([DECODE, CHUNK8])
    own = [m.iteration_time(w).total_s - m.iteration_time(w).overhead_s for w in (DECODE, CHUNK8)]
    assert out.moe_s is None  # inside each rank's own price
    assert out.total_s == pytest.approx(1e-3 + max(own) + 4 * collective(8) + LAT, rel=1e-12)


def test_wrong_number_of_works_is_refused(tmp_path):
    with pytest.raises(ValueError, match="3 works for 2 ranks"):
        LockstepPricer(tiny_cost(tmp_path, model=TINY_MOE), 2).price([DECODE] * 3)


def test_a_rank_streams_its_share_of_the_routed_experts():
    """DeepSeek-V3 (FP8) as one of 8 expert-parallel ranks: the roofline's weights are the
    dense part plus 1/8 of the routed experts, estimated from the totals as (671 - 37) B
    x 256 / 248 = 654.5 B (the architecture's 58 MoE layers x 256 x 3 x 7168 x 2048 =
    654.3 B)."""
    from sim.cost import CostModel
    from sim.profiles import load_accelerator, load_model

    m = load_model("deepseek-v3")
    w_exp = (671e9 - 37e9) * 256 / 248
    assert m.routed_expert_params == pytest.approx(w_exp, rel=1e-12)
    assert m.routed_expert_params == pytest.approx(58 * 256 * 3 * 7168 * 2048, rel=1e-3)
    h200 = load_accelerator("h200-141gb")
    one = CostModel(m, h200, 1)
    rank = CostModel(m, h200, 1, expert_shards=8)
    assert one.weight_bytes_per_gpu == 671e9  # FP8: a byte per parameter
    assert rank.weight_bytes_per_gpu == pytest.approx(671e9 - w_exp + w_exp / 8, rel=1e-12)
    work = StepWork(n_decode=64, decode_history_tokens=64 * 2000)
    assert rank.iteration_time(work).weights_s < one.iteration_time(work).weights_s / 6


def test_a_step_beyond_the_cuda_graphs_runs_unpadded(tmp_path):
    """cudagraph_max_tokens 4 < the 8-token chunk: an eager step, each rank at its own
    tokens, T = 8 + 1 = 9 through the experts (T / S = 4.5 tokens per GPU over 4 (1 -
    (3/4)^9) local experts), collectives of the most one rank receives: 9 - 1 = 8."""
    m = tiny_cost(tmp_path, model=TINY_MOE)
    out = LockstepPricer(m, 2, cudagraph_max_tokens=4).price([DECODE, CHUNK8])
    assert not out.padded and out.global_tokens == 9 and out.padding_tokens == 0
    assert out.rank_gpu_s == (m.gpu_terms(DECODE)[0], m.gpu_terms(CHUNK8)[0])
    assert out.moe_s == pytest.approx(2 * moe_at(4.5, 4 * (1 - 0.75**9)), rel=1e-12)
    assert out.comm_s == pytest.approx(4 * (LAT + 8 * 64 * 2 / BW) + LAT, rel=1e-12)
    dummy = LockstepPricer(m, 2, cudagraph_max_tokens=0).price([CHUNK8, None])
    assert dummy.global_tokens == 9 and dummy.padding_tokens == 1  # the dummy's one token


def test_the_roofline_re_spreads_the_experts_flops_over_the_ranks(tmp_path):
    """No expert table: a 2,048-token chunk beside a dummy, eager. Its routed experts'
    FLOPs (f = 0.5 of its GEMM FLOPs: 0.8 M routed parameters x 2 / 8 of 0.4 M active)
    run at T / R = 2,049 / 2 tokens per GPU instead of 2,048."""
    model = TINY_MOE.model_copy(update={"params_active": 0.4e6})
    assert model.routed_expert_params == pytest.approx(0.8e6)
    m = tiny_cost(tmp_path, model=model, step_pricing="roofline_max")
    big = StepWork(prefill_chunks=((2048, 0),))
    p = LockstepPricer(m, 2, cudagraph_max_tokens=0)
    assert p.expert_flop_share == pytest.approx(0.5)
    c = m.iteration_time(big)
    assert c.comp_s > c.mem_s  # compute-bound: the re-spread shows
    comp = c.comp_s + c.gemm_s * 0.5 * (2049 / (2 * 2048) - 1)
    out = p.price([big, None])
    expected = c.total_s - c.overhead_s - c.comp_s + max(c.mem_s, comp)
    assert out.rank_gpu_s[0] == pytest.approx(expected, rel=1e-12)
    assert out.rank_gpu_s[0] < c.total_s - c.overhead_s


@pytest.mark.parametrize("pricing", ["kernel_tables", "roofline_max"])
@pytest.mark.parametrize("async_on", [False, True])
@pytest.mark.parametrize("cudagraph", [512, 2])
def test_a_decode_run_is_each_steps_price_bit_for_bit(tmp_path, pricing, async_on, cudagraph):
    """The engine's group runs take their step durations from ``decode_run``: they must
    equal ``price`` of each step exactly (rank-seconds waited too), for decoding ranks
    of unequal sizes and contexts beside a dummy, padded and eager."""
    from sim.cost.expert_parallel import DecodeRank

    model = TINY_MOE.model_copy(update={"params_active": 0.4e6})
    m = tiny_cost(tmp_path, model=model, step_pricing=pricing, skew_correction=True)
    m.async_scheduling = async_on
    p = LockstepPricer(m, 3, cudagraph_max_tokens=cudagraph)
    ranks = [DecodeRank(3, 3 * 40 + 7, 60, 20), None, DecodeRank(1, 33, 33, 33)]
    durations, wait = p.decode_run(ranks, 7)
    for i in range(7):
        works = [None if r is None else StepWork(r.n_decode, r.history_tokens + i * r.n_decode,
                 decode_max_history_tokens=r.max_history_tokens + i,
                 decode_min_history_tokens=r.min_history_tokens + i) for r in ranks]  # fmt: skip
        one = p.price(works)
        assert durations[i] == one.total_s and wait[i] == one.wait_s, i


@pytest.mark.parametrize("works", [[DECODE, CHUNK8], [CHUNK8, None], [DECODE, DECODE]])
def test_step_time_scale_scales_a_lockstep_step_and_its_runs(tmp_path, works):
    """Capacity's error band (``cost.step_time_scale``) moves a data-parallel group's steps
    as it moves one engine's (``CostModel.price``: the total times the scale, its parts
    not): a lockstep step at scale 1.3 is 1.3 times the step at 1.0, and a run of decode
    steps is the same product step by step."""
    plain = LockstepPricer(tiny_cost(tmp_path, model=TINY_MOE), 2)
    scaled = LockstepPricer(tiny_cost(tmp_path, model=TINY_MOE, step_time_scale=1.3), 2)
    one, more = plain.price(works), scaled.price(works)
    assert more.total_s == one.total_s * 1.3
    assert [c.total_s for c in more.costs] == [one.total_s * 1.3] * 2
    assert more.moe_s == one.moe_s and more.comm_s == one.comm_s  # the parts as they are
    if all(w is None or not w.prefill_chunks for w in works):
        run = scaled.price_run(works, 3)
        assert run[0] == more.total_s
        assert run.tolist() == (plain.price_run(works, 3) * 1.3).tolist()
