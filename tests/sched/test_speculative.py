"""Speculative decoding (issue 27 item 5): verify steps, lookahead slots, expected-value
acceptance, the drafter's KV and time, the refusal with state-space prefix caching."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from sched_helpers import Ids, end_turn, scheduler

from sim.cost import CostModel, StepWork
from sim.errors import ConfigError
from sim.profiles import load_accelerator, load_model
from sim.run import run_scenario
from sim.scenario import load_scenario, resolve
from sim.sched import FINISHED
from sim.sched.speculative import SpeculativeConfig, accept

K3_A08 = {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.8}


def spec(**kw) -> SpeculativeConfig:
    return SpeculativeConfig(**{**K3_A08, **kw})


def one_request(speculative=None, prompt=100, output=20, **extra) -> dict:
    """One request of ``prompt`` + ``output`` tokens on Llama-3.1-8B / one H200, 1-token blocks."""
    d = {
        "name": "spec_one",
        "model": "llama-3.1-8b",
        "hardware": {"accelerator": "h200-141gb"},
        "allocator": {"kind": "paged", "block_size": 1},
        "workload": {"kind": "chat", "num_requests": 1, "arrival": {"kind": "fixed"},
                     "lengths": {"kind": "parametric", "prompt_tokens": prompt,
                                 "output_tokens": output}},
        "engine": {"check_invariants": True},
        **extra,
    }  # fmt: skip
    if speculative is not None:
        d["speculative"] = speculative
    return d


# ----------------------------------------------------------------------- arithmetic
def test_expected_accepted_is_the_sum_of_powers():
    s = spec()
    assert s.expected_accepted(3) == pytest.approx(0.8 + 0.64 + 0.512)
    assert s.expected_tokens_per_step() == pytest.approx(2.952)
    assert spec(acceptance_rate=0.0).expected_tokens_per_step() == 1.0
    assert spec(acceptance_rate=1.0).expected_tokens_per_step() == 4.0


@given(a=st.floats(0, 1), k=st.integers(1, 8), steps=st.integers(1, 200))
def test_accepted_tokens_track_the_expected_value(a, k, steps):
    """After n verifies of k drafts the accepted total is floor(n E(k)) (within the
    tolerance), each step takes 0..k, and the credit stays in [0, 1)."""
    e = spec(acceptance_rate=a, num_speculative_tokens=k).expected_accepted(k)
    credit, total = 0.0, 0
    for _ in range(steps):
        taken, credit = accept(credit, e, k)
        assert 0 <= taken <= k and 0.0 <= credit < 1.0
        total += taken
    assert abs(total - steps * e) < 1.0 + 1e-6


def test_the_section_is_validated():
    with pytest.raises(ValidationError, match="draft_model needs draft_model"):
        SpeculativeConfig(method="draft_model", num_speculative_tokens=2, acceptance_rate=0.5)
    with pytest.raises(ValidationError, match="only for method draft_model"):
        spec(method="eagle", draft_model="llama-3.1-8b")
    with pytest.raises(ValidationError):
        spec(method="medusa")
    with pytest.raises(ValidationError):
        spec(acceptance_rate=1.5)
    with pytest.raises(ValidationError):
        spec(num_speculative_tokens=0)
    assert spec().lookahead_tokens == 0 and spec(method="eagle").lookahead_tokens == 3
    # vLLM's Scheduler: num_lookahead_tokens = k for use_eagle() (eagle, mtp) and
    # uses_draft_model() alike
    draft = spec(method="draft_model", draft_model="llama-3.2-1b", num_speculative_tokens=5)
    assert draft.lookahead_tokens == 5 == spec(method="mtp", num_speculative_tokens=5).lookahead_tokens
    assert spec(method="mtp").drafter_steps == 3 and spec().drafter_steps == 0


# ----------------------------------------------------------------------- scheduler
def test_hand_computed_verify_timeline():
    """One request, prompt 10, 20 output tokens, k = 3, a = 0.8 (E = 1.952): the prefill
    samples token 1; each verify runs 1 + 3 tokens and emits 1 + floor of the running
    expected sum: credits 1.952, 2.904, 2.856, ... -> 1, 2, 2, 2, 2, 2 accepted, the last
    verify cut at the output limit (2 of 3)."""
    s = scheduler(pool_tokens=4096)
    s.speculative = spec()
    r = Ids().req(10, 20)
    s.add(r)
    tokens, scheduled, held = [], [], []
    while r.status != FINISHED:
        plan = s.schedule()
        scheduled.append(plan.scheduled[0][1])
        before = r.num_output
        s.commit(plan)
        s.check_invariants()
        s.kv.check_invariants()
        tokens.append(r.num_output - before)
        held.append(s.kv.resident_tokens(r.seq_id))
    assert scheduled == [10, 4, 4, 4, 4, 4, 4, 4]
    assert tokens == [1, 2, 3, 3, 3, 3, 3, 2]
    # slots: computed + 1 + 3 before each verify (ngram: no lookahead); never freed
    assert held == [10, 14, 16, 19, 22, 25, 28, 31]
    assert r.num_computed == 10 + 20 - 1


def test_eagle_reserves_lookahead_slots_and_a_held_turn_stops_at_its_end():
    ids = Ids()
    s = scheduler(pool_tokens=4096)
    s.speculative = spec(method="eagle")
    last = ids.req(10, 20)
    s.add(last)
    s.commit(s.schedule())  # prefill
    s.commit(s.schedule())  # first verify: 10 + 1 + 3 + 3 lookahead slots
    assert s.kv.resident_tokens(last.seq_id) == 17
    s2 = scheduler(pool_tokens=4096)
    s2.speculative = spec(method="eagle", acceptance_rate=1.0)
    held = ids.req(10, 6, last_turn=False)
    s2.add(held)
    while held.status != FINISHED:
        s2.commit(s2.schedule())
    end_turn(s2.kv, held)
    # the sequence kept for the next turn is exactly its tokens (prompt + output - 1)
    assert s2.kv.resident_tokens(held.seq_id) == 10 + 6 - 1


def test_the_context_window_cuts_drafts():
    """vLLM keeps positions below max_model_len: d = min(k, max_model_len - 2 - computed).
    Window 16, prompt 10 (output cut to 6): verify 1 runs 3 drafts (credit 1.952 -> 1
    accepted), verify 2 only 2 (E(2) = 1.44, credit 2.392 -> 2), ending at the window."""
    s = scheduler(pool_tokens=4096, max_model_len=16)
    s.speculative = spec()
    r = Ids().req(10, 20)
    assert s.add(r) and r.output_limit == 6
    scheduled, tokens = [], []
    while r.status != FINISHED:
        plan = s.schedule()
        scheduled.append(plan.scheduled[0][1])
        before = r.num_output
        s.commit(plan)
        tokens.append(r.num_output - before)
    assert scheduled == [10, 4, 3] and tokens == [1, 2, 3]
    assert r.finish_reason == "length" and r.num_computed == 15


def test_the_budget_cuts_drafts():
    s = scheduler(pool_tokens=4096, max_num_batched_tokens=2)
    s.speculative = spec(num_speculative_tokens=4)
    r = Ids().req(2, 10)
    s.add(r)
    s.commit(s.schedule())
    plan = s.schedule()
    assert plan.scheduled == [(r, 2)] and plan.verify_seqs == 1 and plan.verify_tokens == 2
    assert s.commit(plan).drafts == 1


# ----------------------------------------------------------------------- engine
def test_tpot_and_step_times_of_the_hand_computed_timeline():
    """The run of the timeline above (prompt 100): 8 steps, each verify priced as the
    target's chunk of 4 tokens over its history (100, 102, 105, ..., 117), ngram adding
    no drafter time; TPOT = the 7 verifies over 19 tokens."""
    res = run_scenario(one_request(K3_A08))
    s = res.summary
    assert s["steps"] == 8 and s["output_tokens"] == 20
    assert s["spec_verify_steps"] == 7 and s["spec_drafts_verified"] == 21
    assert s["spec_accepted_tokens_per_step"] == pytest.approx(12 / 7)
    assert s["spec_tokens_per_step"] == pytest.approx(19 / 7)
    assert s["spec_wasted_tokens"] == 21 - 12
    cost = CostModel(load_model("llama-3.1-8b"), load_accelerator("h200-141gb"))
    hist = [100, 102, 105, 108, 111, 114, 117]
    verify = [cost.price(StepWork(prefill_chunks=((4, h),))).total_s for h in hist]
    steps = res.steps
    assert steps.duration_s.iloc[1:].tolist() == pytest.approx(verify, rel=1e-12)
    assert steps.n_decode.iloc[1:].tolist() == [1] * 7
    assert steps.prefill_tokens.tolist() == [100] + [0] * 7
    req = res.requests.iloc[0]
    tpot = (req.finish_s - req.first_token_s) / 19
    assert tpot == pytest.approx(sum(verify) / 19, rel=1e-12)


def test_lookahead_and_drafter_kv_show_in_peak_memory():
    base = run_scenario(one_request()).summary
    ngram = run_scenario(one_request(K3_A08)).summary
    eagle = run_scenario(one_request({**K3_A08, "method": "eagle"})).summary
    bpt = base["kv_bytes_per_token"]  # Llama-3.1-8B bf16: 2 x 32 x 8 x 128 x 2 B
    assert bpt == 131072
    assert base["peak_allocated_bytes"] == 119 * bpt  # 100 + 20 - 1 tokens
    # the last verify holds computed 117 + 1 + 3 drafts
    assert ngram["peak_allocated_bytes"] == 121 * bpt
    # eagle: one more attention layer per token, and 3 lookahead slots
    assert eagle["kv_bytes_per_token"] == bpt + bpt / 32
    assert eagle["spec_draft_kv_bytes_per_token"] == bpt / 32
    assert eagle["peak_allocated_bytes"] == 124 * (bpt + bpt / 32)
    assert eagle["spec_draft_kv_peak_bytes"] == 124 * bpt / 32
    assert "spec_wasted_tokens" not in base  # absent section: no spec keys


def test_drafter_passes_are_priced_on_verify_steps():
    ngram = run_scenario(one_request(K3_A08)).steps.duration_s.to_numpy()
    eagle = run_scenario(one_request({**K3_A08, "method": "eagle"})).steps.duration_s.to_numpy()
    assert eagle[0] == ngram[0]  # the prefill: no drafter priced
    assert (eagle[1:] > ngram[1:]).all()


def test_deterministic_and_seed_free():
    a = run_scenario(one_request({**K3_A08, "method": "mtp"}, seed=1)).summary
    b = run_scenario(one_request({**K3_A08, "method": "mtp"}, seed=1)).summary
    c = run_scenario(one_request({**K3_A08, "method": "mtp"}, seed=9)).summary
    for key in ("spec_wasted_tokens", "spec_accepted_tokens_per_step", "sim_time_s", "steps"):
        assert a[key] == b[key] == c[key]


def test_state_space_prefix_caching_is_refused_with_the_vllm_issue():
    sc = one_request(K3_A08, prompt=100, output=4)
    sc.update(model="qwen3-next-80b-a3b", allocator={"kind": "paged_hash", "block_size": 16},
              hardware={"accelerator": "h200-141gb", "kv_pool_bytes_per_gpu": 1e10})
    with pytest.raises(ConfigError) as exc:
        run_scenario(sc)
    msg = str(exc.value)
    assert "26201" in msg and "qwen3-next-80b-a3b" in msg and "\n" not in msg
    assert msg.startswith("<scenario>")


def test_an_unknown_draft_model_is_a_located_error():
    sc = one_request({**K3_A08, "method": "draft_model", "draft_model": "no-such-model"})
    with pytest.raises(ConfigError, match=r"speculative\.draft_model: draft model: unknown"):
        run_scenario(sc)


def test_no_speculation_at_zero_acceptance_costs_only_time():
    base = run_scenario(one_request()).summary
    zero = run_scenario(one_request({**K3_A08, "acceptance_rate": 0.0})).summary
    assert zero["output_tokens"] == base["output_tokens"] == 20
    assert zero["steps"] == 20 and zero["spec_wasted_tokens"] == 19 * 3
    assert math.isclose(zero["spec_accepted_tokens_per_step"], 0.0)


def test_agents_generate_the_same_tokens_with_and_without_speculation():
    """Three agent trajectories (held KV over tool pauses, forks, a radix cache): speculation
    changes when tokens come, never which: the same output and prompt tokens computed
    (the held sequences are exactly their tokens, so the next turns' prefixes match)."""
    kw = {"workload.num_trajectories": 3, "workload.arrival.concurrency": 3}
    path = str(Path(__file__).resolve().parents[2] / "workloads" / "agent_swarm.yaml")
    a = run_scenario(path, **kw).summary
    b = run_scenario(path, **kw, speculative={**K3_A08, "method": "eagle"}).summary
    for key in ("output_tokens", "prefill_tokens", "requests_completed", "trajectories_completed"):
        assert a[key] == b[key], key
    assert b["trajectories_completed"] == 3 and b["steps"] < a["steps"]


def test_an_eagle_head_pads_gpt_oss_sliding_layers_as_vllm_groups_them():
    """gpt-oss-20b + EAGLE: vLLM groups the head's layer with the 12 full ones (13), so the
    12 sliding layers hold blocks as 13; ngram adds no layer; the summary's bytes per token
    (F1, real layers) and the drafter's share are unchanged by the padding."""
    def resolved(method):
        sc = one_request({**K3_A08, "method": method}, model="gpt-oss-20b",
                         hardware={"accelerator": "h200-141gb", "kv_pool_bytes_per_gpu": 1e10})  # fmt: skip
        return resolve(load_scenario(sc))

    per_layer = 2 * 8 * 64 * 2
    eagle, ngram = resolved("eagle"), resolved("ngram")
    assert [g.bytes_per_token for g in ngram.kv_groups.side] == [12 * per_layer]
    assert [g.bytes_per_token for g in eagle.kv_groups.side] == [13 * per_layer]
    assert eagle.draft_kv_bytes_per_token_per_gpu == per_layer
    assert eagle.kv_bytes_per_token == ngram.kv_bytes_per_token + per_layer


#: (model, drafter method, allocator kinds run, the drafter's KV bytes per token): one per
#: shipped hybrid profile. F1 for one layer, bf16 (2 B): 2 x H_kv x d_head x 2; gpt-oss
#: 2 x 8 x 64 x 2 = 2,048; gemma-3-27b 2 x 16 x 128 x 2 = 8,192; llama-4-scout and
#: nemotron-h-8b 2 x 8 x 128 x 2 = 4,096; qwen3-next 2 x 2 x 256 x 2 = 2,048. The models
#: with state layers run on paged only (a prefix cache with a drafter is refused, #26201).
HYBRID_DRAFTERS = [
    ("gpt-oss-20b", "eagle", ("paged", "radix", "paged_hash"), 2048),
    ("gpt-oss-120b", "eagle", ("paged", "radix"), 2048),
    ("gemma-3-27b", "eagle", ("paged", "radix"), 8192),
    ("llama-4-scout-17b-16e", "eagle", ("paged", "radix"), 4096),
    ("qwen3-next-80b-a3b", "mtp", ("paged",), 2048),
    ("nemotron-h-8b", "mtp", ("paged",), 4096),
]


def _hybrid_run(model: str, spec_: dict, kind: str) -> dict:
    hw = {"accelerator": "h200-141gb", "kv_pool_bytes_per_gpu": 2e10}
    sc = one_request(spec_, model=model, hardware=hw, allocator={"kind": kind, "block_size": 1})
    return run_scenario(sc).summary


@pytest.mark.parametrize("draft_model", [False, True], ids=["head", "draft_model"])
@pytest.mark.parametrize(("model", "method", "kinds", "head_bpt"), HYBRID_DRAFTERS,
                         ids=[h[0] for h in HYBRID_DRAFTERS])  # fmt: skip
def test_speculative_decoding_runs_on_every_hybrid_profile(model, method, kinds, head_bpt, draft_model):
    """The drafter rides on a hybrid model's block table (it used to crash the allocator's
    build: its bytes were in the allocator's bytes per token but not the groups' table).

    One request of 100 + 20 tokens, k 3, acceptance 0.8 (as
    ``test_lookahead_and_drafter_kv_show_in_peak_memory``): the peak holds 117 computed +
    1 + 3 drafts + 3 lookahead slots = 124 table tokens, so the drafter's peak is
    124 x its bytes per token at block size 1; a model with state layers runs at the
    block size vLLM's page unification raised (``block_size_tokens``: 544 for
    qwen3-next-80b-a3b, 528 for nemotron-h-8b at TP 1), one block: B x its bytes per
    token. A draft model (llama-3.1-8b, 32 x 2 x 8 x 128 x 2 = 131,072 B per token) alike."""
    spec_ = {**K3_A08, "method": "draft_model", "draft_model": "llama-3.1-8b"} if draft_model \
        else {**K3_A08, "method": method}  # fmt: skip
    bpt = 131072 if draft_model else head_bpt
    for kind in kinds:
        s = _hybrid_run(model, spec_, kind)
        block = s.get("block_size_tokens", 1)
        tokens = -(-124 // block) * block
        assert s["requests_completed"] == 1 and s["output_tokens"] == 20, kind
        assert s["spec_draft_kv_bytes_per_token"] == bpt
        assert s["peak_allocated_bytes_by_group"]["draft"] == tokens * bpt, kind
        assert s["spec_draft_kv_peak_bytes"] == tokens * bpt, kind
    if "block_size_tokens" in s:  # the state models' raised blocks, as stated above
        assert s["block_size_tokens"] == {"qwen3-next-80b-a3b": 544, "nemotron-h-8b": 528}[model]


def test_the_drafter_rides_on_a_hybrid_models_block_table():
    """gpt-oss-20b + EAGLE at TP 1: the block table is 12 full layers + the head's, 13 x
    2,048 = 26,624 B per token, what the allocator charges; validate says so too."""
    sc = one_request({**K3_A08, "method": "eagle"}, model="gpt-oss-20b",
                     hardware={"accelerator": "h200-141gb", "kv_pool_bytes_per_gpu": 1e10})  # fmt: skip
    r = resolve(load_scenario(sc))
    assert r.kv_groups.table_bytes_per_token == r.allocator_kv_bytes_per_token == 13 * 2048
    assert r.kv_groups.all_bytes_per_token == 25 * 2048  # F1's 24 real layers + the head
    from sim.scenario.resolve import make_allocator_for

    assert make_allocator_for(r).kv_bytes_per_token == 13 * 2048


def test_the_drafters_weights_come_out_of_the_kv_pool():
    """vLLM loads the drafter beside the target before it sizes the KV cache. Llama-3.1-70B
    at fp8 (70.55e9 B) on one H200 (0.9 x 150,754,820,096 B): no drafter, pool
    135,679,338,086.4 - 70.55e9 = 65,129,338,086.4 B; a llama-3.1-8b draft model (8.03e9 x
    2 B = 16.06e9 B) leaves 49,069,338,086.4 B; an EAGLE head, one decoder layer's share of
    the target, 70.55e9 / 80 = 881,875,000 B, leaves 64,247,463,086.4 B; ngram none."""
    def pool(speculative):
        sc = one_request(speculative, model={"profile": "llama-3.1-70b",
                                             "overrides": {"weight_dtype": "fp8"}},
                         hardware={"accelerator": "h200-141gb", "gpu_memory_utilization": 0.9})  # fmt: skip
        return resolve(load_scenario(sc))

    plain = pool(None)
    assert plain.pool_bytes == pytest.approx(65_129_338_086.4, abs=1)
    draft = pool({**K3_A08, "method": "draft_model", "draft_model": "llama-3.1-8b"})
    assert draft.pool_bytes == pytest.approx(plain.pool_bytes - 16.06e9, abs=1)
    assert draft.weights_bytes_per_gpu == pytest.approx(70.55e9 + 16.06e9, abs=1)
    eagle = pool({**K3_A08, "method": "eagle"})
    assert eagle.pool_bytes == pytest.approx(64_247_463_086.4, abs=1)
    assert pool(K3_A08).pool_bytes == plain.pool_bytes
    # over TP 2 each GPU holds half of the draft model
    sc = one_request({**K3_A08, "method": "draft_model", "draft_model": "llama-3.1-8b"},
                     model="llama-3.1-70b", hardware={"accelerator": "h200-141gb", "tp": 2})
    tp2 = resolve(load_scenario(sc))
    assert tp2.weights_bytes_per_gpu == pytest.approx((70.55e9 * 2 + 16.06e9) / 2, abs=1)


def test_itl_is_per_verify_step_and_tpot_per_token():
    """101 output tokens at k = 3, a = 0.8 (E = 1.952): the prefill emits the first, then
    34 verifies emit the other 100 (34 bonus + floor(34 x 1.952) = 66 accepted). itl_s
    pools one gap per verify (34 gaps), TPOT divides the same span by 100 tokens: their
    means differ by 100 / 34 = spec_tokens_per_step, and the CLI prints both."""
    from sim.report.text import summary_rows

    res = run_scenario(one_request({**K3_A08, "method": "eagle"}, output=101))
    s = res.summary
    req = res.requests.iloc[0]
    span = req.finish_s - req.first_token_s
    assert s["spec_verify_steps"] == 34
    assert s["spec_tokens_per_step"] == pytest.approx(100 / 34, rel=1e-12)
    assert s["itl_s"]["mean"] == pytest.approx(span / 34, rel=1e-9)
    assert s["spec_tpot_s"]["mean"] == pytest.approx(span / 100, rel=1e-12)
    assert req.itl_mean_s == s["spec_tpot_s"]["mean"]  # the requests table's is per token
    rows = {label: value for label, value, _ in summary_rows(s)}
    assert "ITL (per verify step, as vLLM's ITL) mean / p50 / p90 / p99" in rows
    assert rows["tokens/s per stream (1 / TPOT mean)"] == f"{100 / span:,.0f}"
    assert rows["speculative: tokens per verify step (accepted + 1)"] == "2.941 (1.941 accepted)"
    plain = {label for label, _, _ in summary_rows(run_scenario(one_request()).summary)}
    assert "ITL mean / p50 / p90 / p99" in plain
    assert not any(label.startswith(("TPOT", "speculative")) for label in plain)
