"""A hybrid model's admission counts its first chunk's window blocks before it takes any.

vLLM V1's ``KVCacheManager.allocate_slots`` asks every layer group how many blocks the
step needs (``get_num_blocks_to_allocate``) and compares the sum with
``block_pool.get_num_free_blocks()`` (free blocks, cached evictable ones included) before
it touches a hit or takes a block: when they do not fit it returns None and nothing has
changed. ``KVManager.admit(req, first_chunk)`` does the same: the prompt's table blocks and
the first chunk's sliding-window blocks are counted together, so a refused admission
leaves the prefix cache, the free queue and every book as they were (before this, the
admission took the table's blocks, evicting cached ones, and was then withdrawn).

The prefix-cache statistics follow vLLM 0.33.0: since vllm#48860 (July 2026) the scheduler
records a look-up (``record_prefix_cache_stats``) only once the request is admitted, after
``allocate_slots`` succeeded, so a refused admission counts no look-up.

The model: one sliding-window group (w = 128) with the table's bytes per token, so a
sequence's side blocks are one layer's window blocks; B = 16. Block counts from
docs/allocators.md: a decode at S tokens holds ``ceil(S/B) - floor(max(0, S - w)/B)``
window blocks; a prefill chunk ``[n, e)`` holds ``ceil(e/B) - floor(max(0, n - w + 1)/B)``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.memory import Allocator, PagedAllocator, make_allocator
from sim.memory.kv_manager import KVManager
from sim.prefix.spans import segments
from sim.sched import FINISHED, Request, VllmV1Config, VllmV1Scheduler
from sim.sizing.group_demand import GroupDemand, KVGroups

B = 16
WINDOW = GroupDemand("local", "sliding_window", 1.0, 128, 0.0)
GROUPS = KVGroups(1.0, (WINDOW,), 2.0)
#: paged_hash keeps block 0 as vLLM's null block: one block more for the same usable pool
NULL = {"paged_hash": 1, "radix": 0, "radix_cow_tail": 0}
KINDS = ["paged_hash", "radix"]


def _kv(kind: str, usable_blocks: int, groups: KVGroups = GROUPS) -> KVManager:
    blocks = usable_blocks + NULL[kind]
    options = {"tail_policy": "cow_tail"} if kind == "radix_cow_tail" else {}
    return KVManager(make_allocator(kind.removesuffix("_cow_tail"), pool_bytes=blocks * B,
                                    kv_bytes_per_token=1.0, block_size=B, kv_groups=groups,
                                    **options))  # fmt: skip


def _books(kv: KVManager):
    """Everything a refused admission must leave as it was."""
    alloc = kv.alloc
    pool = alloc.pool
    return (
        tuple(pool.free_queue()), pool.num_empty, pool.num_cached, pool.num_allocated,
        alloc.prefix_metrics(), alloc.metrics(), alloc.kv_slots(), alloc.changes,
        {s: alloc.block_table(s) for s in alloc.sequences()},
        {s: alloc.step_of(s) for s in alloc.sequences()},
    )  # fmt: skip


def _cache(kv: KVManager, req_id: int, *spans) -> None:
    """Admit a prompt, compute it in one step and release it: its full blocks stay cached."""
    req = Request(req_id, req_id, sum(n for _, n in spans), 1, content=segments(list(spans)))
    n = req.num_tokens
    assert kv.admit(req, lambda computed: n - computed)
    kv.scheduled(req, n)
    req.num_computed = n
    kv.computed()
    kv.release(req.seq_id)


def _prompt(*spans) -> Request:
    content = segments(list(spans))
    return Request(0, 0, sum(n for _, n in spans), 1, content=content)


# --------------------------------------------------------------- the review's case
@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_first_chunk_evicts_nothing(kind):
    """144 usable blocks. C (160 tokens, 10 blocks) runs and is released: 10 cached, 134
    empty. A (1,000 tokens) runs its prompt in one step: 63 table + 63 window blocks
    (``ceil(1000/16) - 0``) from the 134 empty ones, then decodes: its window drops to
    ``63 - floor(873/16) = 9``, so 144 - 10 - 72 = 62 empty. B (1,000 other tokens)
    would take 63 table + 63 window blocks for its one-step prompt: 126 > 62 + 10 = 72
    free blocks (the cached ones included), so it waits and nothing changed: 10 cached,
    62 empty, 72 allocated, no eviction, two look-ups in the index (C's and A's).
    Before the fix its admission took 63 table + 9 window blocks (the decode rule's),
    evicting all 10 cached blocks, then was withdrawn: 0 cached, 10 evicted, and its
    look-up stayed in the index (3)."""
    runs = []
    for ask in (True, False):  # b asks, or it never came: the books end equal
        kv = _kv(kind, 144)
        s = VllmV1Scheduler(VllmV1Config(), kv)
        pool = kv.alloc.pool
        c = Request(1, 1, 160, 1, content=segments([("C", 160)]))
        s.add(c)
        while c.status != FINISHED:
            s.commit(s.schedule())
        kv.release(c.seq_id)
        assert (pool.num_cached, pool.num_empty) == (10, 134)
        a = Request(2, 2, 1000, 5, content=segments([("A", 1000)]))
        s.add(a)
        s.commit(s.schedule())
        assert (pool.num_cached, pool.num_empty, pool.num_allocated) == (10, 8, 126)
        b = Request(3, 3, 1000, 5, content=segments([("B", 1000)]))
        if ask:
            s.add(b)
        plan = s.schedule()  # a decodes (its window drops to 9); b's chunk does not fit
        kv.check_invariants()
        assert [r.req_id for r, _ in plan.scheduled] == [2]
        assert (pool.num_cached, pool.num_empty, pool.num_allocated) == (10, 62, 72)
        m = kv.alloc.prefix_metrics()
        assert m.evicted_blocks == 0 and m.requests == 2
        if ask:
            assert plan.waiting_blocked and list(s.waiting) == [b]
            assert not kv.is_live(b.seq_id) and b.lookup_tokens == 0
        runs.append(_books(kv))
    assert runs[0] == runs[1]


# ------------------------------------------------- counted with a prefix hit, exactly
@pytest.mark.parametrize("kind", KINDS)
def test_the_count_includes_the_hit_blocks_touched_out_of_the_queue(kind):
    """C (160 tokens) cached: 10 blocks. D = C's 160 tokens + 176 of its own (336, 21
    blocks) hits the 10 (``(336 - 1) // 16 = 20`` cap), so it computes from 160; its
    first chunk (budget 256) is the 176 left: ``[160, 336)`` holds ``ceil(336/16) -
    floor((160 - 127)/16) = 21 - 2 = 19`` window blocks, and 11 new table blocks: 30. The
    10 hit blocks are pinned (vLLM touches them out of the free queue), so the free
    blocks left for D are the 30 empty ones of a 40-block pool: it fits exactly, the hit
    blocks stay and nothing is evicted; with 39 blocks it is refused and nothing
    changes."""
    kv = _kv(kind, 40)
    _cache(kv, 1, ("C", 160))
    pool = kv.alloc.pool
    assert (pool.num_cached, pool.num_empty) == (10, 30)
    d = _prompt(("C", 160), ("D", 176))
    assert kv.admit(d, lambda computed: min(336 - computed, 256))
    kv.check_invariants()
    assert d.num_computed == 160 and kv.alloc.step_of(0) == (160, 336)
    assert len(kv.alloc._side[0]) == 19
    assert (pool.num_empty, pool.num_allocated) == (0, 40)
    assert kv.alloc.prefix_metrics().evicted_blocks == 0 and d.hit_tokens == 160

    kv = _kv(kind, 39)
    _cache(kv, 1, ("C", 160))
    before = _books(kv)
    d = _prompt(("C", 160), ("D", 176))
    assert not kv.admit(d, lambda computed: min(336 - computed, 256))
    kv.check_invariants()
    assert _books(kv) == before and d.lookup_tokens == d.hit_tokens == d.num_computed == 0


def test_a_smaller_first_chunk_is_asked_again_after_a_miss():
    """The repeated-miss shortcut keys on the first step too: the miss above (a 176-token
    chunk, 30 blocks, 29 free) answers the same budget without asking; a budget of 32
    makes the chunk ``[160, 192)``: ``ceil(192/16) - floor(33/16) = 12 - 2 = 10`` window
    blocks + 11 table blocks = 21 <= 29, admitted."""
    kv = _kv("paged_hash", 39)
    _cache(kv, 1, ("C", 160))
    d = _prompt(("C", 160), ("D", 176))
    assert not kv.admit(d, lambda computed: min(336 - computed, 256))
    assert not kv.admit(d, lambda computed: min(336 - computed, 256))
    assert kv.repeated_misses == 1
    assert kv.admit(d, lambda computed: min(336 - computed, 32))
    kv.check_invariants()
    assert kv.repeated_misses == 1 and kv.alloc.step_of(0) == (160, 192)
    assert len(kv.alloc._side[0]) == 10 and kv.alloc.pool.num_empty == 29 - 21


def test_without_a_prefix_cache_the_count_is_the_same():
    """``paged`` (no index): 40 blocks, a 496-token prompt (31 table blocks) whose first
    chunk is 256 tokens (16 window blocks): 47 > 40, refused, nothing taken; with a
    128-token chunk, ``[0, 128)``: 8 window blocks, 39 <= 40, admitted."""
    kv = KVManager(make_allocator("paged", pool_bytes=40 * B, kv_bytes_per_token=1.0,
                                  block_size=B, kv_groups=GROUPS))  # fmt: skip
    req = Request(1, 1, 496, 1)
    assert not kv.admit(req, lambda computed: min(496 - computed, 256))
    assert kv.alloc.pool.num_free == 40 and kv.num_sequences == 0
    assert kv.admit(req, lambda computed: min(496 - computed, 128))
    assert kv.alloc.step_of(1) == (0, 128) and kv.alloc.pool.num_free == 1
    kv.check_invariants()


def test_a_miss_without_first_steps_does_not_answer_one_with_them():
    """``paged``, 38 blocks, a 496-token prompt (31 table blocks). Admitted without a
    chunk rule it holds the decode rule's ``31 - floor((496 - 128)/16) = 8`` window
    blocks: 39 > 38, a miss. Asked again, nothing changed, with a first chunk of 32 tokens
    (``[0, 32)``: 2 window blocks, 33 <= 38): a different question, so it is asked, not
    answered by the shortcut, and admitted with 38 - 33 = 5 blocks left."""
    kv = KVManager(make_allocator("paged", pool_bytes=38 * B, kv_bytes_per_token=1.0,
                                  block_size=B, kv_groups=GROUPS))  # fmt: skip
    req = Request(1, 1, 496, 1)
    assert not kv.admit(req)
    assert kv.admit(req, lambda computed: min(496 - computed, 32))
    assert kv.repeated_misses == 0 and kv.alloc.step_of(1) == (0, 32)
    assert kv.alloc.pool.num_free == 5
    kv.check_invariants()


class _NoFirstStepHook(PagedAllocator):
    """A kind with per-step groups (``set_step``) but without the ``_allocate_stepped``
    hook: it places a new sequence by the decode rule and never asks ``first_step``."""

    _allocate_stepped = Allocator._allocate_stepped


@pytest.mark.parametrize(
    "chunk, step, window_blocks",
    [
        (64, (0, 64), 4),  # [0, 64): 4 window blocks replace the decode rule's 8
        (256, None, 8),  # [0, 256): 16 > 8 + 1 free: the decode rule for that step
    ],
)
def test_a_kind_without_the_hook_gets_its_first_step_after_the_admission(
    chunk, step, window_blocks
):
    """40 blocks, a 496-token prompt: the kind admits it by the decode rule, 31 table +
    ``31 - floor(368/16) = 8`` window blocks (1 free); the KV manager then sets its first
    step as for a held turn: a 64-token chunk holds ``ceil(64/16) - 0 = 4`` window
    blocks (5 free); a 256-token chunk's 16 do not fit, so it keeps the decode rule's 8."""
    alloc = _NoFirstStepHook(pool_bytes=40 * B, kv_bytes_per_token=1.0, block_size=B)
    alloc.use_kv_groups(GROUPS)
    kv = KVManager(alloc)
    req = Request(1, 1, 496, 1)
    assert kv.admit(req, lambda computed: min(496 - computed, chunk))
    assert alloc.step_of(1) == step and len(alloc._side[1]) == window_blocks
    assert alloc.pool.num_free == 40 - 31 - window_blocks
    kv.check_invariants()


@pytest.mark.parametrize("usable, admitted", [(7, False), (8, True)])
def test_cow_tail_counts_the_more_of_the_two_first_steps(usable, admitted):
    """``radix`` with ``cow_tail``, a 200-token window. X (48 tokens) cached: 3 full
    blocks, ``usable - 3`` free. D = 40 tokens of X + 24 of its own (64 tokens, 4 table
    blocks) hits 2 blocks (32 tokens) and may copy the 8 cached tokens of X's third block
    into its own tail, which ``admitted`` decides after room is made. Budget 9: without
    the copy its first step is ``[32, 41)``: ``ceil(41/16) - 0 = 3`` window blocks; with
    it ``[40, 49)``: ``ceil(49/16) = 4``. The count takes 4: 2 new table blocks + 4 = 6,
    against the free blocks and the one evictable block (X's third; the hit's two are
    pinned). 7 usable: 4 free + 1 < 6, refused, nothing changed. 8 usable: 5 free + 1 = 6,
    admitted: X's third block is evicted to make room, so there is nothing to copy; D
    computes from 32, holds 3 window blocks, and 6 - 2 - 3 = 1 block stays free."""
    kv = _kv("radix_cow_tail", usable, KVGroups(1.0, (GroupDemand("local", "sliding_window",
                                                                  1.0, 200, 0.0),), 2.0))  # fmt: skip
    _cache(kv, 1, ("X", 48))
    pool = kv.alloc.pool
    assert (pool.num_cached, pool.num_free) == (3, usable - 3)
    d = _prompt(("X", 40), ("Y", 24))
    before = _books(kv)
    assert kv.admit(d, lambda computed: min(64 - computed, 9)) is admitted
    kv.check_invariants()
    if not admitted:
        assert _books(kv) == before and d.lookup_tokens == 0
        return
    assert d.num_computed == 32 and kv.alloc.step_of(0) == (32, 41)
    assert len(kv.alloc.block_table(0)) == 4 and len(kv.alloc._side[0]) == 3
    assert pool.num_free == 1 and kv.alloc.prefix_metrics().evicted_blocks == 1


# ------------------------------------------------------------------ property
_CONTENTS = st.lists(st.tuples(st.sampled_from("xyz"), st.integers(1, 120)), min_size=1,
                     max_size=4)  # fmt: skip


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from([*KINDS, "radix_cow_tail"]),
    group=st.sampled_from(["sliding_window", "chunked_local"]),
    window=st.integers(1, 200),
    usable=st.integers(4, 48),
    cached=st.lists(_CONTENTS, max_size=4),
    live=st.lists(_CONTENTS, max_size=3),
    prompt=_CONTENTS,
    live_budget=st.integers(1, 64),
    budget=st.integers(1, 400),
    next_budget=st.integers(1, 400),
)
def test_a_refused_admission_or_step_changes_nothing(
    kind, group, window, usable, cached, live, prompt, live_budget, budget, next_budget
):
    """(``radix`` with ``cow_tail``: the copied partial block moves the first step; the
    count takes the more of the two steps.) Random cached prompts (admitted, computed, released), random live ones (running,
    each in its first chunk), then a new prompt whose first chunk is the budget's: when
    its admission is refused, or a live sequence's next chunk does not fit, the books are
    exactly as before (free queue order, cached, empty, allocated blocks, the index's
    statistics, metrics, slots, block tables, steps). ``set_step`` counts a chunk's
    blocks before it makes room, and ``make_room`` frees all it is asked or nothing."""
    groups = KVGroups(1.0, (GroupDemand("local", group, 1.0, window, 0.0),), 2.0)
    kv = _kv(kind, usable, groups)
    ids = iter(range(1, 100))

    def request(spans) -> Request:
        i = next(ids)
        return Request(i, i, sum(n for _, n in spans), 1, content=segments(list(spans)))

    for spans in cached:
        req = request(spans)
        n = req.num_tokens
        if kv.admit(req, lambda c, n=n: n - c):
            kv.scheduled(req, n)
            req.num_computed = n
            kv.computed()
            kv.release(req.seq_id)
    running = []
    for spans in live:
        req = request(spans)
        n = req.num_tokens
        if kv.admit(req, lambda c, n=n: min(n - c, live_budget)):
            running.append(req)
    kv.check_invariants()
    new = request(prompt)
    n = new.num_tokens
    before = _books(kv)
    if not kv.admit(new, lambda c: min(n - c, budget)):
        kv.check_invariants()
        assert _books(kv) == before
        assert not kv.is_live(new.seq_id) and new.lookup_tokens == 0
    for req in running:  # each one's next chunk, computed up to its first chunk's end
        step = kv.alloc.step_of(req.seq_id)
        if step is None or step[1] >= req.num_tokens:
            continue
        req.num_computed = step[1]
        before = _books(kv)
        if not kv.step(req, min(req.num_tokens - step[1], next_budget)):
            kv.check_invariants()
            assert _books(kv) == before
