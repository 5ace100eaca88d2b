"""Token content as spans: normal form, span-wise prefix matching, blocks and chained hashes.

Every span operation is checked against a brute-force model that materialises tokens as
``(content_id, index)`` pairs (only in the tests, on small inputs).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.memory.errors import AllocatorError
from sim.prefix.spans import (
    ROOT_HASH,
    advance,
    block_hashes,
    blocks,
    chain_hash,
    checked_content,
    common_prefix,
    concat,
    describe,
    drop_last,
    extend_segments,
    hash_blocks_from,
    join,
    n_tokens,
    prefix_hashes,
    rest,
    segments,
    slice_tokens,
    split,
    take,
)


def tokens(segs) -> list[tuple]:
    return [(cid, s + i) for cid, s, n in segs for i in range(n)]


SPANS = st.lists(
    st.tuples(st.sampled_from(["a", "b", 7]), st.integers(0, 12), st.integers(0, 9)), max_size=6
)


def test_spans_normalise_and_merge_continuations():
    segs = segments([("sys", 5), ("sys", 5, 3), ("tool", 0), (7, 4)])
    assert segs == (("sys", 0, 8), (7, 0, 4))
    assert n_tokens(segs) == 12
    assert describe(segs) == "sys[0:8] 7[0:4]"
    # the same content twice is not a continuation: tokens sys0..sys2, sys0..sys2
    assert segments([("sys", 3), ("sys", 3)]) == (("sys", 0, 3), ("sys", 0, 3))


@pytest.mark.parametrize("bad", [[(True, 3)], [(1.5, 3)], [("a", -1)], [("a", 2.0)], [("a",)]])
def test_bad_spans_are_refused(bad):
    with pytest.raises((TypeError, ValueError)):
        segments(bad)


def test_equal_ids_are_equal_tokens_up_to_the_shorter():
    assert common_prefix(segments([("sys", 100)]), segments([("sys", 2000)])) == 100
    a = segments([("sys", 64), ("t1", 10)])
    b = segments([("sys", 32), ("sys", 32, 32), ("t2", 10)])
    assert common_prefix(a, b) == 64


LONG_SPANS = st.lists(
    st.tuples(st.sampled_from(["a", "b", 7]), st.integers(0, 12), st.integers(0, 9)), max_size=40
)


@settings(max_examples=300, deadline=None)
@given(spans=LONG_SPANS, start=st.integers(-3, 200), stop=st.integers(-3, 200))
def test_a_slice_of_a_long_context_is_its_tokens_from_either_end(spans, start, stop):
    """``slice_tokens`` walks long tuples from the nearer end (an agent's new turn at the
    end of its context): the same tokens as from the start, in normal form."""
    segs = segments(spans)
    toks = tokens(segs)
    lo, hi = max(start, 0), max(stop, 0)
    out = slice_tokens(segs, start, stop)
    assert tokens(out) == toks[lo:hi]
    assert out == segments(out)  # normal


@settings(max_examples=200, deadline=None)
@given(a=SPANS, b=SPANS, cut=st.integers(0, 40))
def test_span_operations_agree_with_materialised_tokens(a, b, cut):
    sa, sb = segments(a), segments(b)
    ta, tb = tokens(sa), tokens(sb)
    # normal form is unique: equal token lists <=> equal tuples
    assert (ta == tb) == (sa == sb)
    expected = 0
    while expected < min(len(ta), len(tb)) and ta[expected] == tb[expected]:
        expected += 1
    assert common_prefix(sa, sb) == expected
    assert tokens(slice_tokens(sa, cut // 2, cut)) == ta[cut // 2 : cut]
    assert tokens(concat(sa, sb)) == ta + tb
    grown = list(sa)
    extend_segments(grown, sb)
    assert tuple(grown) == concat(sa, sb)
    for bs in (1, 3, 4):
        descs = blocks(sa, bs, full_only=False)
        assert [tokens(d) for d in descs] == [ta[i : i + bs] for i in range(0, len(ta), bs)]


@settings(max_examples=200, deadline=None)
@given(a=SPANS, b=SPANS)
def test_chained_block_hashes_equal_exactly_for_equal_prefixes(a, b):
    sa, sb = segments(a), segments(b)
    ha, hb = block_hashes(sa, 4), block_hashes(sb, 4)
    assert len(ha) == n_tokens(sa) // 4  # the partial tail is not hashed
    ta, tb = tokens(sa), tokens(sb)
    for k in range(min(len(ha), len(hb))):
        assert (ha[k] == hb[k]) == (ta[: 4 * (k + 1)] == tb[: 4 * (k + 1)])
    positions = list(range(0, min(len(ta), len(tb)) + 1))
    pa, pb = prefix_hashes(sa, positions), prefix_hashes(sb, positions)
    for p, x, y in zip(positions, pa, pb, strict=True):
        assert (x == y) == (ta[:p] == tb[:p])


def test_block_hash_chain_is_f19_and_deterministic_across_processes():
    segs = segments([("sys", 40)])
    h = block_hashes(segs, 16)
    assert len(h) == 2
    assert h[0] == chain_hash(ROOT_HASH, (("sys", 0, 16),))
    assert h[1] == chain_hash(h[0], (("sys", 16, 16),))
    # pinned values: BLAKE2b of a canonical encoding, not Python's salted hash()
    assert f"{h[0]:032x}" == PINNED_H0
    # continuing a chain hashes only the new blocks
    assert (
        block_hashes(segments([("sys", 48)]), 16, h[1], start_block=2)
        == block_hashes(segments([("sys", 48)]), 16)[2:]
    )


def test_content_ids_of_different_types_never_collide():
    assert block_hashes(segments([(1, 4)]), 4) != block_hashes(segments([("1", 4)]), 4)
    # length-prefixed strings: "a,0,1;s1:b" cannot be confused with two segments
    assert chain_hash(ROOT_HASH, (("ab", 0, 1),)) != chain_hash(ROOT_HASH, (("a", 0, 1),))


#: h_1 of ("sys", 16) at B=16, recorded once; any change of the encoding or seed breaks it
PINNED_H0 = "794d9dd7e1c591c4f09265d8603011fe"


@settings(max_examples=150, deadline=None)
@given(
    a=st.lists(st.tuples(st.sampled_from(["x", "y", 3]), st.integers(0, 9)), max_size=6),
    b=st.lists(st.tuples(st.sampled_from(["x", "y", 3]), st.integers(0, 9)), max_size=6),
    cut=st.integers(0, 60),
)
def test_join_drop_last_and_rest_agree_with_slicing(a, b, cut):
    sa, sb = segments(a), segments(b)
    whole = segments([*sa, *sb])
    assert join(sa, sb) == whole == concat(sa, sb) == concat(sa, b)
    total = n_tokens(whole)
    k = min(cut, total)
    assert drop_last(whole, k) == slice_tokens(whole, 0, total - k)
    qi, qoff = advance(whole, 0, 0, k)
    assert tuple(rest(whole, qi, qoff)) == slice_tokens(whole, k, total)
    chain = block_hashes(whole, 4)
    j = min(k // 4, len(chain))  # continue the chain from block j on
    qi, qoff = advance(whole, 0, 0, 4 * j)
    parent = chain[j - 1] if j else ROOT_HASH
    hashes, qi2, qoff2 = hash_blocks_from(whole, qi, qoff, 4, parent)
    assert hashes == chain[j:]
    assert tuple(rest(whole, qi2, qoff2)) == slice_tokens(whole, 4 * len(chain), total)


@settings(max_examples=200, deadline=None)
@given(a=SPANS, n=st.integers(0, 60))
def test_split_is_take_then_rest(a, n):
    """One cut (a decode tail of one segment takes no walk) = ``take`` from the start, then
    ``rest`` from where it stopped; the head is the first ``n`` tokens (fewer at the end)."""
    segs = list(segments(a))
    head, tail = split(segs, n)
    want, qi, qoff = take(segs, 0, 0, n)
    assert (head, tail) == (want, rest(segs, qi, qoff))
    assert head == slice_tokens(tuple(segs), 0, n)
    assert tuple(tail) == slice_tokens(tuple(segs), min(n, n_tokens(tuple(segs))), 10**6)


@pytest.mark.parametrize(
    "content, n",
    [((("out", 5, 3),), 3), (((7, 0, 1),), 1), ((("a", 0, 2), ("a", 2, 2)), 4),
     ([("out", 5, 3)], 3), ((("out", 3),), 3), ((("a", 0, 0), ("b", 1, 2)), 2)],  # fmt: skip
)
def test_checked_content_is_the_normal_form(content, n):
    """A plain one-segment tuple comes back as it is (no walk); anything else is
    normalised: the same normal tuple either way."""
    assert checked_content(content, n, "append", "radix") == segments(content)


@pytest.mark.parametrize(
    "content, n",
    [((("out", 5, 3),), 4), (((True, 0, 3),), 3), ((("a", -1, 3),), 3), ((("a", 0, 3.0),), 3),
     (((1.5, 0, 3),), 3), ((("a", 0, -3),), -3), ((("a", 0, 0),), 1), ("abc", 3)],  # fmt: skip
)
def test_checked_content_refuses_misuse_on_its_fast_path_too(content, n):
    with pytest.raises(AllocatorError, match="radix: append:"):
        checked_content(content, n, "append", "radix")
