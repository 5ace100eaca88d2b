"""A fork of a sequence whose KV is still held back from the prefix cache (``hold_back``,
not yet published): the child shares blocks the cache takes only later, when either
publishes them. The fork family's count on such a block is then every member mapping it
(``FamilyLedger``), so ``excess_tokens`` (and ``useful_tokens``) keep their meaning and
``check_invariants`` holds after each operation."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.memory import make_allocator

B = 4  # tokens per block
KINDS = ("radix", "paged_hash")


def alloc(kind: str, blocks: int = 64):
    return make_allocator(kind, pool_bytes=blocks * B, kv_bytes_per_token=1, block_size=B)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("first", ["parent", "child"])
def test_fork_then_publish_keeps_the_invariants(kind, first):
    a = alloc(kind)
    a.allocate("x", 10, content=[("P", 0, 10)], hold_back=True)  # 2 full blocks held back
    a.fork("x", "c")
    a.check_invariants()
    order = ["x", "c"] if first == "parent" else ["c", "x"]
    for seq in order:
        a.publish(seq, 10)
        a.check_invariants()
    for seq in order:
        a.free(seq)
        a.check_invariants()
    assert a.available_blocks() == alloc(kind).available_blocks()  # every block back


@pytest.mark.parametrize("kind", KINDS)
def test_a_hit_on_blocks_a_held_back_fork_shares_counts_them_once(kind):
    a = alloc(kind)
    a.allocate("x", 10, content=[("P", 0, 10)], hold_back=True)
    a.fork("x", "c")  # x and c map the same 3 blocks: 10 distinct tokens
    a.publish("x", 10)  # its 2 full blocks (8 tokens) enter the cache
    hit = a.allocate("y", 10, content=[("P", 0, 10)])  # another family maps those 8
    assert hit.matched_tokens == 8
    a.check_invariants()
    # P's 10 tokens once, and y's own 2 past its hit: 8 tokens are mapped by 2 families
    assert a.index.excess_tokens == 8
    assert a.useful_tokens() == 12
    a.free("x")  # c still maps P's blocks: nothing changes
    a.check_invariants()
    assert a.index.excess_tokens == 8
    assert a.useful_tokens() == 12
    a.publish("c", 10)  # c publishes blocks its family was counted on already
    a.check_invariants()
    assert a.index.excess_tokens == 8
    a.free("c")  # now y alone maps them
    a.check_invariants()
    assert a.index.excess_tokens == 0
    assert a.useful_tokens() == 10


@pytest.mark.parametrize("kind", KINDS)
def test_a_writer_off_a_shared_partial_block_is_not_counted_on_it(kind):
    a = alloc(kind)
    a.allocate("x", 6, content=[("P", 0, 6)], hold_back=True)  # block 2 half full
    a.fork("x", "c")
    a.append("x", 2, content=[("X", 0, 2)], hold_back=True)  # copy-on-write: x moves off it
    a.append("c", 2, content=[("C", 0, 2)], hold_back=True)  # c fills it in place
    a.publish("x", 8)
    a.publish("c", 8)
    a.check_invariants()
    assert a.index.excess_tokens == 0
    a.free("c")
    a.check_invariants()
    a.free("x")
    a.check_invariants()


@pytest.mark.parametrize("kind", KINDS)
def test_a_block_two_writers_moved_off_is_forgotten_and_its_reuse_counted(kind):
    """x's half-full last block, shared by two forks that both copy on write off it, then
    freed with x: the ledger forgets it (nothing noted for a block no table maps). The pool
    hands that block to a new held-back prompt whose fork publishes first: the family
    (parent and fork) maps it twice, and the books count both."""
    a = alloc(kind, blocks=16)
    ledger = a.index.ledger
    a.allocate("x", 6, content=[("P", 0, 6)])  # block 2 half full: never cached
    a.fork("x", "c1")
    a.fork("x", "c2")
    a.append("c1", 2, content=[("C1", 0, 2)])  # each writer copies it: x alone maps it
    a.append("c2", 2, content=[("C2", 0, 2)])
    a.free("x")
    a.check_invariants()
    assert ledger._untracked == {}
    a.free("c1")
    a.free("c2")
    a.check_invariants()
    assert (ledger._untracked, ledger._counted, ledger._tables) == ({}, {}, {})
    for i in range(8):  # until the freed blocks come back round
        y = f"y{i}"
        assert a.allocate(y, 8, content=[(f"Q{i}", 0, 8)], hold_back=True)
        a.fork(y, y + "k")
        a.publish(y + "k", 8)
        a.check_invariants()
        assert a.index.excess_tokens == 0  # one family maps Q's blocks
        a.free(y)
        a.free(y + "k")
        a.check_invariants()


@pytest.mark.parametrize("kind", KINDS)
def test_a_fork_released_with_blocks_waiting_pins_them_for_its_held_back_parent(kind):
    """Found by the property test below (CI, 2026-12-05): a held-back parent ``a`` (S + 6
    tokens of its own) is forked (``k``); S is already cached by another request, so
    ``k``'s first publication adopts nothing; its second leaves its next full block
    waiting to lengthen its leaf (radix's lazy leaf). Freeing ``k`` joins that block to
    the tree; ``a`` still maps it, so its node must stay pinned (it was left evictable:
    "block 1 is mapped but its node is evictable")."""
    x = alloc(kind, blocks=24)
    assert x.allocate("a", 6, content=[("S", 0, 4), ("P", 0, 2)], hold_back=True)
    assert x.append("a", 4, content=[("oa", 6, 4)])
    assert x.allocate("b", 5, content=[("S", 0, 4), ("P", 0, 1)])
    assert x.fork("a", "k")
    x.free("b")  # S stays cached, unpinned
    x.publish("k", 4)
    x.publish("k", 8)
    x.check_invariants()
    x.free("k")
    x.check_invariants()  # the second block, mapped by a, is pinned for it
    x.free("a")
    x.check_invariants()
    assert x.index.excess_tokens == 0


OPS = st.lists(
    st.tuples(
        st.sampled_from(["allocate", "append", "fork", "publish", "free"]),
        st.integers(0, 10_000),
        st.integers(1, 12),
        st.booleans(),
    ),
    max_size=60,
)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_random_holds_forks_and_publications_keep_the_invariants(kind, ops):
    """Prompts from two shared contents (hits between families), held back or not; forks
    of held-back sequences; publications of any length; ``check_invariants`` after each."""
    a = alloc(kind, blocks=24)  # small: freed blocks come back to new prompts
    live: list[str] = []
    tokens: dict[str, int] = {}
    n_seq = 0
    for op, pick, n, hold in ops:
        seq = live[pick % len(live)] if live else None
        if op == "allocate" or seq is None:
            n_seq += 1
            new = f"s{n_seq}"
            prompt = [("S", 0, 4), (f"P{pick % 2}", 0, n)]
            if a.allocate(new, 4 + n, content=prompt, hold_back=hold):
                live.append(new)
                tokens[new] = 4 + n
        elif op == "append":
            if a.append(seq, n, content=[(f"o{seq}", tokens[seq], n)], hold_back=hold):
                tokens[seq] += n
        elif op == "fork":
            n_seq += 1
            child = f"s{n_seq}"
            if a.fork(seq, child):
                live.append(child)
                tokens[child] = tokens[seq]
        elif op == "publish":
            a.publish(seq, min(tokens[seq], pick % (tokens[seq] + 1) + n))
        else:
            a.free(seq)
            live.remove(seq)
            del tokens[seq]
        a.check_invariants()
    for seq in list(live):
        a.free(seq)
        a.check_invariants()
    assert a.index.excess_tokens == 0
    ledger = a.index.ledger  # nothing left noted of the freed sequences and blocks
    assert (ledger._untracked, ledger._counted, ledger._tables) == ({}, {}, {})
    assert getattr(a.index, "_borrowed", {}) == {}


@pytest.mark.parametrize("kind", KINDS)
def test_releasing_many_forks_of_a_held_back_prompt_tests_each_sharer_a_bounded_number_of_times(
    kind, monkeypatch
):
    """K forks of a held-back prompt of T blocks share every block; freeing them all asks
    whether a sharer still maps a block O(T K) times (the scan stops at the second mapper
    and a test is one look-up), not O(T K^2): the books stay linear in the forks."""
    from sim.prefix import sharing

    calls = 0
    real = sharing._maps_at

    def counted(table, at, block):
        nonlocal calls
        calls += 1
        return real(table, at, block)

    monkeypatch.setattr(sharing, "_maps_at", counted)
    t_blocks, k_forks = 40, 24
    a = alloc(kind, blocks=t_blocks + 8)
    assert a.allocate("x", t_blocks * B, content=[("P", 0, t_blocks * B)], hold_back=True)
    for i in range(k_forks):
        assert a.fork("x", f"c{i}")
    a.check_invariants()
    for seq in ["x", *(f"c{i}" for i in range(k_forks))]:
        a.free(seq)
    a.check_invariants()
    assert a.index.ledger._untracked == {}
    # each release tests at most the two mappers it stops at per block (K + 1 releases)
    assert calls <= 2 * t_blocks * (k_forks + 1)
