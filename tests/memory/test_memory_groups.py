"""Per-group KV in the paged kinds (issue 27 item 1): the demand functions from vLLM's
rules, and random operations on an allocator that counts a hybrid model's side groups.

Properties, after every operation: free + allocated + cached + remainder = pool (with the
side blocks in allocated), ``check_invariants`` passes (every block's refcount = the
tables and side lists that map it; each sequence holds exactly ``side_blocks(tokens)``), a
miss changes nothing, and a sliding-window group never holds more than ceil(w/B) + 1
blocks per sequence.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.memory import make_allocator
from sim.profiles import load_model
from sim.sizing.group_demand import GroupDemand, KVGroups, kv_groups

B = 16
SLIDING = GroupDemand("sliding", "sliding_window", 3000.0, 100, 0.0)
CHUNKED = GroupDemand("chunked", "chunked_local", 2000.0, 64, 0.0)
STATE = GroupDemand("state", "mamba", 0.0, 0, 70_000.0)
GROUPS = KVGroups(1000.0, (SLIDING, CHUNKED, STATE), 6000.0)


# ------------------------------------------------------------- demand functions (rules)
@pytest.mark.parametrize(
    ("tokens", "blocks"),
    [(1, 1), (16, 1), (17, 2), (100, 7), (101, 7), (116, 7), (117, 7), (129, 8), (133, 7)],
)
def test_sliding_window_blocks(tokens, blocks):
    """ceil(S/B) - floor((S - w)/B): vLLM skips num_computed - w + 1 tokens' blocks."""
    assert SLIDING.held_blocks(tokens, B) == blocks


@pytest.mark.parametrize(
    ("tokens", "blocks"), [(1, 1), (64, 4), (65, 1), (80, 1), (81, 2), (128, 4), (129, 1)]
)
def test_chunked_local_blocks(tokens, blocks):
    """Only the current chunk's blocks: chunk starts at c * floor((S-1)/c)."""
    assert CHUNKED.held_blocks(tokens, B) == blocks


def test_state_is_one_per_sequence():
    assert [STATE.held_bytes(s, B) for s in (0, 1, 10_000)] == [0.0, 70_000.0, 70_000.0]


@given(st.integers(1, 20_000), st.integers(1, 4096), st.sampled_from([1, 8, 16, 64, 256]))
def test_sliding_never_holds_more_than_the_window_and_one(tokens, window, block):
    g = GroupDemand("s", "sliding_window", 1.0, window, 0.0)
    held = g.held_blocks(tokens, block)
    assert held <= math.ceil(window / block) + 1
    assert held * block >= min(tokens, window)  # and it covers the window


def test_side_blocks_round_up_to_table_blocks():
    # S = 100: sliding 7 x 16 x 3000 + chunked (100 - 64 = 36 tokens: blocks 4..6, 3)
    # x 16 x 2000 + 70,000 state = 336,000 + 96,000 + 70,000 = 502,000 B; a table block
    # is 16 x 1000 B, so 31.375 -> 32 blocks
    assert GROUPS.side_bytes(100, B) == 502_000
    assert GROUPS.side_blocks(100, B) == 32


def test_dense_model_has_no_side_group():
    g = kv_groups(load_model("llama-3.1-8b"))
    assert not g.hybrid and g.table_bytes_per_token == g.all_bytes_per_token


def test_gemma_groups():
    """gemma-3-27b: 62 layers, 5 sliding (window 1,024) per full; 16 KV heads x 128 bf16;
    vLLM pads the 52 sliding layers to 60 (six KV cache groups of 10)."""
    g = kv_groups(load_model("gemma-3-27b"))
    per_layer = 2 * 16 * 128 * 2
    assert g.table_bytes_per_token == 10 * per_layer
    (s,) = g.side
    assert (s.kind, s.window_tokens, s.bytes_per_token) == ("sliding_window", 1024, 60 * per_layer)


# ------------------------------------------------------------------ random operations
OPS = st.lists(
    st.tuples(
        st.sampled_from(["allocate", "append", "append", "append", "fork", "free", "hold"]),
        st.integers(0, 10_000),
        st.integers(1, 120),
    ),
    max_size=40,
)


def _make(kind: str):
    opts = {"block_size": B}
    if kind != "paged":
        opts["prefix_caching"] = kind
    a = make_allocator("paged", pool_bytes=400 * B * 1000 + 123, kv_bytes_per_token=1000.0,
                       kv_groups=GROUPS, **opts)  # fmt: skip
    return a


def _content(n: int, salt: int):
    """Spans: three shared contexts, so prefix kinds hit each other's blocks."""
    return [(f"ctx{salt % 3}", n)]


@pytest.mark.parametrize("kind", ["paged", "radix", "hash"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_books_balance_with_groups(kind, ops):
    a = _make(kind)
    uses = a.uses_content
    live: list[int] = []
    next_id = 0
    for op, pick, n in ops:
        before = a.metrics()
        if op == "allocate" or not live:
            content = _content(n, pick) if uses else None
            ok = bool(a.allocate(next_id, n, content=content))
            if ok:
                live.append(next_id)
            next_id += 1
        else:
            seq = live[pick % len(live)]
            if op == "append":
                start = a.seq_tokens(seq)
                content = [(f"seq{seq}", start, n)] if uses else None
                ok = a.append(seq, n, content=content)
            elif op == "fork":
                ok = a.fork(seq, next_id)
                if ok:
                    live.append(next_id)
                next_id += 1
            elif op == "hold":
                a.set_held(seq, not a.is_held(seq))
                ok = True
            else:
                a.free(seq)
                live.remove(seq)
                ok = True
        if not ok:
            assert a.metrics().allocated_bytes == before.allocated_bytes  # a miss: no change
        a.check_invariants()
        m = a.metrics()
        assert m.free_bytes + m.allocated_bytes + m.cached_bytes + m.remainder_bytes == \
            pytest.approx(a.pool_bytes, abs=1e-6)  # fmt: skip
        for seq in live:
            tokens = a.seq_tokens(seq)
            assert SLIDING.held_blocks(tokens, B) <= math.ceil(100 / B) + 1
            assert len(a._side[seq]) == GROUPS.side_blocks(tokens, B)


def test_hybrid_allocator_charges_side_blocks():
    a = _make("paged")
    assert a.allocate("x", 100)
    # 7 table blocks for 100 tokens + 32 side blocks (test_side_blocks_round_up...)
    assert a.metrics().allocated_bytes == (7 + 32) * B * 1000
    assert a.blocks_needed("x", 200) == (19 - 7) + GROUPS.side_blocks(300, B) - 32


BUFFER_KINDS = {
    "static": {"max_tokens": 600},
    "contiguous": {},
    "contiguous-pow2": {"reservation": "pow2"},
    "buddy": {},
}


def _buffer(name: str, slots: int = 8000):
    kind = name.split("-")[0]
    return make_allocator(kind, pool_bytes=slots * 1000 + 321, kv_bytes_per_token=1000.0,
                          kv_groups=GROUPS, **BUFFER_KINDS[name])  # fmt: skip


def test_buffer_side_slots_are_the_groups_peak():
    a = _buffer("contiguous")
    # window 100 x 3000 + chunk 64 x 2000 + 70,000 state = 498,000 B = 498 slots of 1000 B
    assert a.side_slots(1000) == 498
    assert a.side_slots(50) == (50 * 3000 + 50 * 2000 + 70_000) // 1000
    assert a.allocate("x", 50)
    assert a.metrics().allocated_bytes == (50 + 320) * 1000
    assert a.metrics().side_allocated_bytes == 320 * 1000


@pytest.mark.parametrize("name", sorted(BUFFER_KINDS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_buffer_books_balance_with_groups(name, ops):
    """Static, contiguous (with and without a reservation) and buddy reserve each
    sequence's side groups beside its buffer; a miss changes nothing."""
    a = _buffer(name)
    live: list[int] = []
    next_id = 0
    for op, pick, n in ops:
        before = a.metrics()
        if op == "allocate" or not live:
            ok = bool(a.allocate(next_id, n, final_tokens=n + pick % 200))
            live += [next_id] if ok else []
            next_id += 1
        else:
            seq = live[pick % len(live)]
            if op == "append":
                ok = a.append(seq, n)
            elif op == "fork":
                ok = a.fork(seq, next_id)
                live += [next_id] if ok else []
                next_id += 1
            elif op == "hold":
                a.set_held(seq, not a.is_held(seq))
                ok = True
            else:
                a.free(seq)
                live.remove(seq)
                ok = True
        if not ok:
            assert a.metrics() == before  # a miss: no change
        a.check_invariants()
        m = a.metrics()
        assert m.free_bytes + m.allocated_bytes + m.remainder_bytes == \
            pytest.approx(a.pool_bytes, abs=1e-6)  # fmt: skip
        assert 0 <= m.side_allocated_bytes <= m.allocated_bytes


def test_longest_prompt_of_an_empty_hybrid_pool_fits():
    a = _make("paged")
    longest = a.max_sequence_tokens
    usable = a.pool.usable_blocks
    assert -(-longest // B) + GROUPS.side_blocks(longest, B) <= usable
    assert a.allocate("x", longest)
    a.check_invariants()
    assert not _make("paged").allocate("y", usable * B)  # the table alone would fit


def test_dense_groups_leave_the_allocator_as_it_was():
    dense = kv_groups(load_model("llama-3.1-8b"))
    a = make_allocator("paged", pool_bytes=1e9, kv_bytes_per_token=dense.table_bytes_per_token,
                       kv_groups=dense)  # fmt: skip
    assert a.kv_groups is None


@pytest.mark.parametrize("name", sorted(BUFFER_KINDS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, slots=st.integers(700, 3000))
def test_buffer_can_ops_agree_with_the_ops(name, ops, slots):
    """On a hybrid model a buffer kind's ``can_allocate``/``can_append``/``can_fork`` is
    true iff the operation then succeeds (its side extent counted), and asking changes
    nothing; pools of a few sequences (their buffer fits, not always their side extent)."""
    a = _buffer(name, slots)
    live: list[int] = []
    next_id = 0
    for op, pick, n in ops:
        if op in ("hold", "free") and live:
            seq = live[pick % len(live)]
            if op == "hold":
                a.set_held(seq, not a.is_held(seq))
            else:
                a.free(seq)
                live.remove(seq)
            continue
        before = a.metrics()
        if op == "allocate" or not live:
            can = a.can_allocate(n)
            assert a.metrics() == before
            ok = bool(a.allocate(next_id, n))
            live += [next_id] if ok else []
            next_id += 1
        elif op == "append":
            seq = live[pick % len(live)]
            can = a.can_append(seq, n)
            assert a.metrics() == before
            ok = a.append(seq, n)
        else:
            seq = live[pick % len(live)]
            can = a.can_fork(seq)
            assert a.metrics() == before
            ok = a.fork(seq, next_id)
            live += [next_id] if ok else []
            next_id += 1
        assert can == ok, (op, n)
        a.check_invariants()


@pytest.mark.parametrize("kind", ["paged", "radix"])
def test_paged_side_blocks_of_a_held_sequence_are_paused(kind):
    """Issue 27 follow-up: a held sequence's side blocks are paused in ``kv_slots``; a
    fork's child mapping them keeps them active until it moves past them or is freed."""
    a = _make(kind)
    side = GROUPS.side_blocks(50, B)  # 2,000 B of chunk... + the state: whole table blocks
    assert side > 0 and a.allocate("x", 50)
    a.set_held("x", True)
    a.check_invariants()
    assert a.kv_slots().paused == 50 + side * B
    a.set_held("x", False)
    assert a.fork("x", "y") and a.kv_slots().paused == 0
    a.set_held("x", True)  # "y" maps every block of "x": all active
    a.check_invariants()
    assert a.kv_slots().paused == 0
    a.free("y")
    a.check_invariants()
    assert a.kv_slots().paused == 50 + side * B
    a.set_held("x", False)
    a.check_invariants()
    assert a.kv_slots().paused == 0


@pytest.mark.parametrize("name", sorted(BUFFER_KINDS))
def test_buffer_side_extent_of_a_held_sequence_is_paused(name):
    a = _buffer(name)
    side = lambda: round(a.metrics().side_allocated_bytes / 1000)  # noqa: E731
    assert a.allocate("y", 30)
    side_y = side()
    assert a.allocate("x", 50)
    side_x = side() - side_y  # the extent as placed (a buddy block rounds it up)
    assert side_x >= a.side_slots(50) > 0
    a.set_held("x", True)
    a.check_invariants()
    assert a.kv_slots().paused == 50 + side_x
    assert a.append("x", 400)  # grows (and moves) its side extent: held again after
    a.check_invariants()
    assert side() - side_y >= a.side_slots(a.seq_capacity_tokens("x"))
    assert a.kv_slots().paused == 450 + side() - side_y
    a.free("x")
    a.check_invariants()
    assert a.kv_slots().paused == 0
