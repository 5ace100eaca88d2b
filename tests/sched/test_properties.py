"""Property tests: random request mixes through the scheduler and a real allocator."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import end_turn, scheduler

from sim.sched import FINISHED, REJECTED, RUNNING, Request

KINDS = ["paged", "static", "contiguous", "buddy", "radix", "paged_hash"]


@st.composite
def mixes(draw):
    kind = draw(st.sampled_from(KINDS))
    reqs = draw(
        st.lists(
            st.tuples(st.integers(1, 40), st.integers(1, 12), st.integers(0, 3)),
            min_size=1,
            max_size=12,
        )
    )
    return dict(
        kind=kind,
        pool=draw(st.integers(24, 160)),
        budget=draw(st.integers(1, 48)),
        seqs=draw(st.integers(1, 6)),
        chunked=draw(st.booleans()),
        threshold=draw(st.sampled_from([0, 4, 16])),
        reqs=reqs,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixes())
def test_random_mixes_keep_invariants_and_finish(mix):
    opts = {"max_tokens": 48} if mix["kind"] == "static" else {}
    if mix["kind"] in ("paged", "radix", "paged_hash"):
        opts = {"block_size": 4}
    s = scheduler(
        mix["pool"],
        mix["kind"],
        opts,
        max_num_batched_tokens=mix["budget"],
        max_num_seqs=mix["seqs"],
        chunked_prefill=mix["chunked"],
        long_prefill_token_threshold=mix["threshold"],
    )
    from sim.prefix.spans import segments

    pending = []
    for i, (prompt, out, delay) in enumerate(mix["reqs"]):
        content = segments([("sys", min(prompt, 8)), (f"u{i}", prompt - min(prompt, 8))])
        pending.append((delay, Request(i, i, prompt, out, content=content)))
    everything = [r for _, r in pending]
    seen: dict[int, tuple[int, int]] = {}
    for t in range(2000):
        for delay, r in [p for p in pending if p[0] <= t]:
            pending.remove((delay, r))
            s.add(r)
        plan = s.schedule()
        s.check_invariants()
        s.kv.check_invariants()
        tokens = plan.n_tokens
        prefills = len(plan.prefill_chunks)
        assert tokens <= mix["budget"] or (not mix["chunked"] and prefills == 1)
        assert len({id(r) for r, _ in plan.scheduled}) == len(plan.scheduled)
        res = s.commit(plan)
        for r in res.finished:
            end_turn(s.kv, r)
        for r in everything:
            out, comp = seen.get(r.req_id, (0, 0))
            assert r.num_output >= out
            assert r.num_computed >= comp or r.preemptions or r.status == REJECTED
            assert r.num_output <= r.max_output_tokens
            seen[r.req_id] = (r.num_output, r.num_computed)
        if not pending and not s.running and not s.waiting:
            break
        assert (
            not plan.empty
            or plan.preempted
            or plan.rejected
            or plan.held_drops
            or (not s.running and not s.waiting)
            or pending
        )
    else:
        raise AssertionError("no progress in 2000 steps")
    assert all(r.status in (FINISHED, REJECTED) for r in everything)
    assert all(r.status != RUNNING for r in everything)
    assert s.kv.num_sequences == 0
