"""The vLLM V1 scheduler as a pure object: budgets, order, chunking, preemption, admission."""

from __future__ import annotations

import pytest
from sched_helpers import Ids, end_turn, kv_manager, scheduler

from sim.sched import (
    CANCELLED,
    FINISHED,
    REJECTED,
    RUNNING,
    WAITING,
    Request,
    RunLimit,
    VllmV1Config,
    VllmV1Scheduler,
)


def step(s):
    plan = s.schedule()
    s.check_invariants()
    s.kv.check_invariants()
    return plan, s.commit(plan)


def test_running_first_then_waiting_fcfs_with_token_budget(ids):
    s = scheduler(max_num_batched_tokens=10)
    a, b, c = ids.req(6, 3), ids.req(6, 3), ids.req(2, 3)
    for r in (a, b, c):
        assert s.add(r)
    plan, _ = step(s)
    # a gets 6, b the 4 left (chunked), c nothing: the budget is spent
    assert [(r.req_id, n) for r, n in plan.scheduled] == [(1, 6), (2, 4)]
    assert plan.prefill_chunks == [(6, 0), (4, 0)]
    assert a.num_output == 1 and b.num_output == 0 and b.num_computed == 4
    plan, _ = step(s)
    # running first (a decodes, b finishes its prompt), then c is admitted
    assert [(r.req_id, n) for r, n in plan.scheduled] == [(1, 1), (2, 2), (3, 2)]
    assert plan.n_decode == 1 and plan.decode_history_tokens == 6
    assert [r.req_id for r in plan.admitted] == [3]


def test_long_prefill_threshold_caps_chunks(ids):
    s = scheduler(max_num_batched_tokens=100, long_prefill_token_threshold=32)
    r = ids.req(70, 2)
    s.add(r)
    sizes = []
    while r.num_output == 0:
        plan, _ = step(s)
        sizes.append(plan.scheduled[0][1])
    assert sizes == [32, 32, 6]


def test_max_num_seqs_limits_admission(ids):
    s = scheduler(max_num_seqs=2)
    reqs = [ids.req(4, 5) for _ in range(3)]
    for r in reqs:
        s.add(r)
    plan, _ = step(s)
    assert [r.req_id for r in plan.admitted] == [1, 2]
    assert reqs[2].status == WAITING


def test_monolithic_prefill_is_never_split(ids):
    s = scheduler(max_num_batched_tokens=8, chunked_prefill=False)
    d = ids.req(2, 50)
    s.add(d)
    step(s)  # d prefills and starts decoding
    big, small = ids.req(20, 2), ids.req(3, 2)
    s.add(big)
    s.add(small)
    plan, _ = step(s)
    # the decode rides; the first prefill of the step may exceed the budget, whole
    assert [(r.req_id, n) for r, n in plan.scheduled] == [(1, 1), (2, 20)]
    assert small.status == WAITING  # the budget is spent
    plan, _ = step(s)
    assert [(r.req_id, n) for r, n in plan.scheduled] == [(1, 1), (2, 1), (3, 3)]


def test_preempts_most_recently_admitted_and_recomputes(ids):
    # 3 blocks of 4 tokens: a (4 tokens) and b (4 tokens) fill 2 blocks; growth needs more
    s = scheduler(pool_tokens=12, alloc_options={"block_size": 4}, max_num_batched_tokens=64)
    a, b, c = ids.req(4, 5), ids.req(4, 5), ids.req(4, 5)
    for r in (a, b, c):
        assert s.add(r)
    step(s)  # all three prefill (3 blocks), each samples one token
    plan, _ = step(s)  # each needs a 4th token slot -> new block; only c can be pushed out
    assert [r.req_id for r in plan.preempted] == [3, 2]
    assert list(s.waiting) == [b, c]  # the older victim first: FCFS order restored
    assert b.num_computed == 0 and b.num_output == 1 and b.preemptions == 1
    assert [r.req_id for r, _ in plan.scheduled] == [1]
    assert not plan.admitted  # no admission in a step that preempted


def test_request_alone_in_an_empty_pool_that_cannot_grow_is_rejected(ids):
    # contiguous growth doubles 5 -> 10 slots, more than the 8-slot pool: it can never finish
    s = scheduler(pool_tokens=8, kind="contiguous")
    r = ids.req(5, 3)
    assert s.add(r)  # 7 tokens of KV would fit; the doubling does not
    step(s)
    plan, _ = step(s)
    assert r.status == REJECTED and plan.rejected == [r] and plan.preempted == [r]
    assert r.finish_reason == "rejected_never_fits"
    assert not s.running and not s.waiting
    assert s.kv.num_sequences == 0


def test_add_rejects_what_can_never_fit(ids):
    s = scheduler(pool_tokens=64, alloc_options={"block_size": 16}, max_model_len=100)
    never = ids.req(60, 10)
    assert not s.add(never)  # 69 tokens of KV > 64
    assert never.finish_reason == "rejected_never_fits"
    ok = ids.req(50, 15)
    assert s.add(ok) and ok.status == WAITING and ok.finish_reason is None


def test_context_window_rejects_prompts_that_leave_no_room_and_cuts_outputs(ids):
    """vLLM: a prompt of max_model_len tokens or more is refused; a longer target output is
    generated only up to the window (finish reason ``length``), not refused."""
    s = scheduler(pool_tokens=4096, max_model_len=100)
    full, over = ids.req(100, 1), ids.req(101, 5)
    assert not s.add(full) and not s.add(over)
    assert (full.status, full.finish_reason) == (REJECTED, "rejected_too_long")
    assert over.finish_reason == "rejected_too_long"
    cut, fits = ids.req(90, 50), ids.req(90, 10)
    assert s.add(cut) and s.add(fits)
    assert (cut.max_output_tokens, cut.output_limit) == (50, 10)
    for _ in range(12):
        if s.has_work:
            step(s)
    assert cut.num_output == 10 and cut.num_tokens == 100
    assert (cut.status, cut.finish_reason) == (FINISHED, "length")
    assert (fits.num_output, fits.finish_reason) == (10, "stop")


def test_no_window_means_no_cap(ids):
    s = scheduler(pool_tokens=4096)
    r = ids.req(3000, 900)
    assert s.add(r) and r.output_limit == 900


def test_cancel_has_a_finish_reason(ids):
    s = scheduler(pool_tokens=4096)
    r = ids.req(10, 5)
    s.add(r)
    assert s.cancel(r) and (r.status, r.finish_reason) == (CANCELLED, "cancelled")


def test_prefix_hit_at_admission_skips_prefill(ids):
    s = scheduler(pool_tokens=1024, kind="radix", alloc_options={"block_size": 4})
    shared = [("sys", 40)]
    a = ids.req(45, 1, content=_segs(shared + [("a", 5)]), last_turn=True)
    s.add(a)
    plan, res = step(s)
    assert plan.prefill_chunks == [(45, 0)] and res.finished == [a]
    end_turn(s.kv, a)  # released: its blocks stay cached
    b = ids.req(43, 1, content=_segs(shared + [("b", 3)]))
    s.add(b)
    plan, _ = step(s)
    assert b.hit_tokens == 40 and b.lookup_tokens == 43
    assert plan.prefill_chunks == [(3, 40)]  # 40 tokens hit (whole blocks), 3 computed


def test_held_sequence_continues_from_what_it_holds(ids):
    s = scheduler(pool_tokens=1024)
    t1 = ids.req(10, 3, seq_id="traj", last_turn=False)
    s.add(t1)
    while t1.status == RUNNING or t1.status == WAITING:
        plan, res = step(s)
    assert t1.status == FINISHED
    end_turn(s.kv, t1)  # hold: 12 tokens resident (the last sampled token has no KV yet)
    assert s.kv.alloc.seq_tokens("traj") == 12 and s.kv.paused_tokens == 12
    t2 = Request(99, "traj", 10 + 3 + 5, 2)
    s.kv.resume("traj")
    s.add(t2)
    plan, _ = step(s)
    assert t2.held_tokens == 12 and plan.prefill_chunks == [(6, 12)]


def test_pressure_relief_drops_paused_state_when_nothing_runs(ids):
    s = scheduler(pool_tokens=32, alloc_options={"block_size": 4})
    held = ids.req(20, 1, seq_id="p", last_turn=False)
    s.add(held)
    step(s)
    end_turn(s.kv, held)  # paused, 20 tokens (5 blocks) held
    new = ids.req(24, 2)
    s.add(new)
    plan, _ = step(s)
    assert plan.held_drops == 1 and not s.kv.alloc.is_live("p")
    assert plan.admitted == [new]
    assert s.kv.held_drops == 1 and not s.kv.is_held("p")


@pytest.mark.parametrize("chunked", [True, False])
def test_run_chunks_predicts_the_chunks_step_by_step_would_take(ids, chunked):
    s = scheduler(
        max_num_batched_tokens=40, long_prefill_token_threshold=16, chunked_prefill=chunked
    )
    for _ in range(3):
        s.add(ids.req(4, 30))
    step(s)
    p = ids.req(100, 2)
    s.add(p)
    plan = s.schedule()
    predicted = s.run_chunks(plan, 1000)
    if not chunked:
        assert predicted is None
        return
    seen = []
    while True:
        seen.append(plan.prefill_chunks[0][0])
        s.commit(plan)
        if p.num_output:
            break
        plan = s.schedule()
    assert predicted == seen == [16] * 6 + [4]


def test_cancel_removes_a_queued_or_running_request(ids):
    s = scheduler()
    a, b = ids.req(4, 5), ids.req(4, 5)
    s.add(a)
    s.add(b)
    step(s)
    s.add(c := ids.req(3, 3))
    assert s.cancel(a) and s.cancel(c) and not s.cancel(a)
    assert s.running == [b] and not s.waiting


def _segs(spans):
    from sim.prefix.spans import segments

    return segments(spans)


def test_config_forbids_unknown_fields():
    with pytest.raises(ValueError):
        VllmV1Config(max_num_batched_token=3)
    assert VllmV1Scheduler.name == "vllm_v1"
    kv = kv_manager(64)
    assert VllmV1Scheduler(VllmV1Config(), kv).config.max_num_batched_tokens == 8192
    assert isinstance(Ids().req(1, 1), Request)


def _decoders_and_a_prompt(ids):
    s = scheduler(max_num_batched_tokens=40, long_prefill_token_threshold=16)
    for _ in range(3):
        s.add(ids.req(4, 30))
    step(s)  # three decoders
    p = ids.req(100, 5)
    s.add(p)
    return s, p


def test_the_plan_says_how_long_it_may_run_and_a_committed_run_equals_its_steps():
    """``plan.run``: a chunked prefill beside three decodes runs its 7 chunks, then decodes
    with them until its own 5th token (11 steps); committing those steps at once leaves
    every request where stepping leaves it."""
    runs = []
    for mode in ("run", "steps"):
        s, p = _decoders_and_a_prompt(Ids())
        plan = s.schedule()
        assert plan.run is not None
        assert plan.run.chunks == (16,) * 6 + (4,) and plan.run.late and plan.run.max_steps == 11
        if mode == "run":
            s.commit(plan, 11)
        else:
            for _ in range(11):
                s.commit(plan)
                plan = s.schedule()
        runs.append([(r.num_computed, r.num_output, r.status) for r in (*s.running, p)])
    assert runs[0] == runs[1]
    assert runs[0][-1][:2] == (104, 5) and runs[0][-1][2] == FINISHED


def test_a_plan_runs_only_while_its_batch_repeats(ids):
    s = scheduler(max_num_batched_tokens=40)
    s.add(ids.req(4, 1))
    plan = s.schedule()  # its prompt samples its only token: nothing to repeat
    assert plan.run is None
    s.commit(plan)
    b = ids.req(4, 9)
    s.add(b)
    plan = s.schedule()  # a lone prompt, then 8 decodes of its own
    assert plan.run == RunLimit(9, (4,), True)
    s.commit(plan)
    plan = s.schedule()
    assert plan.run == RunLimit(8) and plan.run.prefill_steps(8) == 0
    s.add(c := ids.req(4, 9))  # admitted beside b's decodes, then both decode
    plan = s.schedule()
    assert plan.admitted == [c] and plan.run == RunLimit(8, (4,), True)
