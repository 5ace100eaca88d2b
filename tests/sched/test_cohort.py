"""The decode cohort (``sim.sched.cohort``): running decodes advanced by one counter.

A member's ``num_computed`` / ``num_output`` read as the plain attributes would after one
token a step; any write settles it out first (``Request`` again, the written value kept);
the first finish, the finishes in running order, the decodes' history sum and span come
from the cohort's heaps. In the scheduler, a request joins once its prompt is done and it
sampled, and leaves on finish, preemption, cancellation or a step that does not schedule it.
"""

from __future__ import annotations

from sched_helpers import Ids, scheduler

from sim.sched import Request
from sim.sched.cohort import DecodeCohort
from sim.sched.request import FINISHED, RUNNING


def _decoding(req_id: int, prompt: int, out: int, limit: int, serial: int) -> Request:
    req = Request(req_id, req_id, prompt, limit)
    req.num_computed, req.num_output, req._serial = prompt + out - 1, out, serial
    return req


def test_a_member_reads_its_ticks_and_a_write_settles_it_out():
    c = DecodeCohort()
    r = _decoding(1, 10, 1, 8, serial=1)  # prompt 10, one token sampled, 8 to sample
    c.join(r)
    assert type(r) is c.Member and isinstance(r, Request)
    c.tick += 3
    assert (r.num_computed, r.num_output, r.num_tokens) == (13, 4, 14)
    assert c.hist_sum() == 13 and c.span() == (13, 13) and c.first_finish() == 4
    r.num_computed = 0  # a preemption's write
    assert type(r) is Request and c.size == 0
    assert (r.num_computed, r.num_output) == (0, 4)
    c.tick += 5
    assert (r.num_computed, r.num_output) == (0, 4)  # no longer advanced
    assert c.first_finish() == 1 << 30 and c.span() is None and c.due() == []


def test_finishes_come_due_in_running_order_and_the_span_follows_the_tick():
    c = DecodeCohort()
    a = _decoding(1, 100, 1, 3, serial=5)  # due after 2 ticks
    b = _decoding(2, 7, 2, 4, serial=2)  # due after 2 ticks too, earlier in running order
    d = _decoding(3, 50, 1, 9, serial=9)  # due after 8
    for r in (a, b, d):
        c.join(r)
    assert c.hist_sum() == 100 + 8 + 50 and c.span() == (100, 8)
    c.tick += 1
    assert c.due() == [] and c.first_finish() == 1
    c.tick += 1
    assert c.due() == [b, a]  # by serial, settled out
    assert (a.num_output, b.num_output, type(a), type(b)) == (3, 4, Request, Request)
    assert c.size == 1 and c.hist_sum() == 52 and c.span() == (52, 52)
    assert c.first_finish() == 6


def test_the_scheduler_keeps_its_decodes_in_the_cohort_and_counts_as_before():
    ids = Ids()
    s = scheduler(max_num_batched_tokens=64)
    a, b = ids.req(6, 4), ids.req(10, 2)
    for r in (a, b):
        assert s.add(r)
    plan = s.schedule()
    s.commit(plan)  # both prompts done, one token each: they join
    assert s.cohort.size == 2 and type(a) is s.cohort.Member
    plan = s.schedule()
    assert plan.n_decode == 2 and plan.decode_history_tokens == 6 + 10
    # b's last token is one step away: the first finish, so the batch does not run on
    assert plan.decode_span() == (10, 6) and s.cohort.first_finish() == 1 and plan.run is None
    out = s.commit(plan)  # b samples its second and last token
    assert out.finished == [b] and b.status == FINISHED and type(b) is Request
    assert (b.num_computed, b.num_output) == (11, 2)
    assert (a.num_computed, a.num_output) == (7, 2) and s.cohort.size == 1
    s.kv.release(b.seq_id)
    s.check_invariants()
    assert s.cancel(a) and type(a) is Request and s.cohort.size == 0
    assert (a.num_computed, a.num_output) == (7, 2)


def test_a_preempted_member_leaves_with_its_counts_reset():
    ids = Ids()
    s = scheduler(pool_tokens=32, max_num_batched_tokens=64, alloc_options={"block_size": 4})
    a, b = ids.req(11, 20), ids.req(11, 20)
    for r in (a, b):
        assert s.add(r)
    s.commit(s.schedule())
    assert s.cohort.size == 2
    preempted = None
    for _ in range(20):
        plan = s.schedule()
        s.check_invariants()
        s.kv.check_invariants()
        if plan.preempted:
            preempted = plan.preempted[0]
            break
        s.commit(plan)
    assert preempted is b and type(b) is Request and b.num_computed == 0
    assert b.status != RUNNING and b.num_output > 1 and s.cohort.size == 1


def test_a_new_output_limit_settles_a_member_out():
    """A member's finish tick is taken at its join: code that changes its ``output_limit``
    (a plug-in, a harness) takes it out of the cohort, so its finish follows the new limit
    (review of branch h88: the old tick ended it 5 tokens late)."""
    c = DecodeCohort()
    r = _decoding(1, 10, 1, 8, serial=1)  # 7 more tokens to sample: due at tick 7
    c.join(r)
    c.tick += 2
    assert r.output_limit == 8 and type(r) is c.Member  # a read leaves it in
    r.output_limit = 5  # 3 sampled; 2 more to go
    assert type(r) is Request and c.size == 0
    assert (r.num_computed, r.num_output, r.output_limit) == (12, 3, 5)
    c.join(r)
    assert c.first_finish() == 2
    c.tick += 2
    assert c.due() == [r] and r.num_output == 5
