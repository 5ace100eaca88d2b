"""The ``PrefixIndex`` seam, proven by a minimal index written from ``sim.memory`` alone.

``PromptCache`` shares the full blocks of an earlier prompt with the same content key (the
whole prompt is one opaque key), keeps them cached after their last user leaves, and gives
whole entries back, oldest first, when the core asks for room. It logs every call, so the
order of calls the core makes (the table in ``sim/memory/prefix_index.py``) is tested too.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import pytest

from sim.errors import InvariantError
from sim.memory import (
    AllocatorError,
    BlockPool,
    PagedAllocator,
    PrefixHit,
    PrefixIndex,
    PrefixMetrics,
)
from sim.memory.paged import _takes_extra_blocks
from sim.prefix.radix_index import RadixIndex
from sim.sizing.group_demand import GroupDemand, KVGroups

B = 4  # tokens per block


class PromptCache:
    """Whole-prompt prefix cache: ``content`` is a hashable key naming the prompt."""

    publish_rule = "computed"  # held-back prompts are cached as the engine publishes them

    def __init__(self, num_blocks: int) -> None:
        self.pool = BlockPool(num_blocks)
        self.entries: dict[Hashable, list[int]] = {}  # key -> cached full blocks, oldest first
        self.calls: list[tuple] = []
        self.family: dict[Hashable, Hashable] = {}  # live sequence -> the admission it forks
        self.tables: dict[Hashable, list[int]] = {}  # the core's live tables (same lists)
        self.hits = self.prompts = 0
        self.now_s = 0.0
        #: held-back sequence -> its prompt key (None: its allocation is under way)
        self.held: dict[Hashable, Any] = {}

    @property
    def evictable_blocks(self) -> int:
        return sum(self._dormant(ids) for ids in self.entries.values())

    @property
    def excess_tokens(self) -> int:
        """Cached blocks mapped by unrelated admissions count once (the lineage counts each
        admission's fork family on its own)."""
        families: dict[int, set] = {}
        for seq, table in self.tables.items():
            for b in table:
                if self.pool.is_retained(b):
                    families.setdefault(b, set()).add(self.family[seq])
        return B * sum(len(f) - 1 for f in families.values())

    def _dormant(self, ids: list[int]) -> int:
        return len(ids) if all(self.pool.refcount[b] == 0 for b in ids) else 0

    def match(self, n_tokens: int, content: Any) -> PrefixHit | None:
        self.calls.append(("match", n_tokens))
        ids = self.entries.get(content, [])[: (n_tokens - 1) // B]
        return PrefixHit(ids, len(ids) * B, content)

    def cancel(self, hit: PrefixHit) -> None:
        self.calls.append(("cancel",))

    def make_room(self, short_blocks: int) -> bool:
        self.calls.append(("make_room", short_blocks))
        victims, freed = [], 0
        for key, ids in self.entries.items():  # oldest first; whole entries only
            if freed >= short_blocks:
                break
            if self._dormant(ids):
                victims.append(key)
                freed += len(ids)
        if freed < short_blocks:
            return False
        for key in victims:
            self.pool.unretain(self.entries.pop(key))
        return True

    def admitted(self, seq_id: Hashable, n_tokens: int, table: list[int], hit: PrefixHit) -> int:
        self.calls.append(("admitted", seq_id, len(table)))
        self.prompts += n_tokens
        self.family[seq_id], self.tables[seq_id] = seq_id, table
        self.hits += hit.hit_tokens
        if seq_id in self.held:  # nothing past the hit until published
            self.held[seq_id] = hit.state
            return 0
        self._cache(hit.state, table[: n_tokens // B])
        return 0

    def _cache(self, key: Any, full: list[int]) -> int:
        if key is None or len(full) <= len(self.entries.get(key, [])):
            return 0
        old = self.entries.pop(key, [])
        self.pool.retain(full[len(old) :])
        self.entries[key] = old + full[len(old) :]
        return len(full) - len(old)

    def hold_back(self, seq_id: Hashable, tokens: int) -> bool:
        self.calls.append(("hold_back", seq_id, tokens))
        if seq_id in self.held:
            return False
        self.held[seq_id] = None
        return True

    def unhold(self, seq_id: Hashable) -> None:
        self.calls.append(("unhold", seq_id))
        del self.held[seq_id]

    def publish(self, seq_id: Hashable, tokens: int, n_tokens: int, table: list[int]) -> int:
        self.calls.append(("publish", seq_id, tokens, n_tokens))
        if seq_id not in self.held:
            return 0
        made = self._cache(self.held[seq_id], table[: tokens // B])
        if tokens >= n_tokens:
            del self.held[seq_id]
        return made

    def check_content(self, content: Any, n_tokens: int, op: str) -> Any:
        self.calls.append(("check_content", op))
        if content != "reply":
            raise AllocatorError(f"prompt cache: {op}: only replies are appended")
        return content

    def appended(self, seq_id, tokens, n_tokens, content, table) -> None:
        self.calls.append(("appended", seq_id, tokens, n_tokens))

    def appends_in_bulk(self, seq_ids) -> bool:
        return False

    def publishes_apart(self, seq_id) -> bool:
        return False

    def forked(self, parent_id, child_id, table) -> None:
        self.calls.append(("forked", parent_id, child_id))
        self.family[child_id], self.tables[child_id] = self.family[parent_id], table

    def set_retain(self, seq_id: Hashable, priority: float) -> None:
        self.calls.append(("set_retain", seq_id, priority))

    def releasing(self, seq_id: Hashable) -> None:
        self.calls.append(("releasing", seq_id, self.pool.refcount[self.tables[seq_id][0]]))

    def released(self, seq_id: Hashable, table: list[int], uncache: bool) -> None:
        self.calls.append(("released", seq_id, uncache))
        del self.family[seq_id], self.tables[seq_id]
        self.held.pop(seq_id, None)
        if uncache:
            for key, ids in list(self.entries.items()):
                if set(ids) <= set(table) and self._dormant(ids):
                    self.pool.unretain(self.entries.pop(key))

    def can_allocate(self, n_tokens: int, content: Any) -> bool:
        shared = len(self.entries.get(content, [])[: (n_tokens - 1) // B])
        return -(-n_tokens // B) - shared <= self.pool.num_free + self.evictable_blocks

    def set_time(self, now_s: float) -> None:
        self.now_s = now_s

    def prefix_metrics(self, block_bytes: float) -> PrefixMetrics:
        rate = self.hits / self.prompts if self.prompts else 0.0
        return PrefixMetrics(
            len([c for c in self.calls if c[0] == "admitted"]),
            self.prompts,
            self.hits,
            self.hits,
            rate,
            rate,
            self.pool.num_cached * block_bytes,
            self.pool.num_allocated * block_bytes,
            0,
            0,
        )

    def check(self, tables: Mapping[Hashable, list[int]], tokens: Mapping[Hashable, int]) -> None:
        cached = {b for ids in self.entries.values() for b in ids}
        if any(self.pool.is_retained(b) != (b in cached) for b in range(self.pool.num_blocks)):
            raise InvariantError("prompt cache: retained blocks are not the cached ones")


def composed(blocks: int = 8) -> tuple[PagedAllocator, PromptCache]:
    a = PagedAllocator(pool_bytes=blocks * B * 10, kv_bytes_per_token=10, block_size=B)
    index = PromptCache(a.num_blocks)
    checked: PrefixIndex = index  # the protocol is all the core needs (typed seam)
    a.compose(checked)
    return a, index


def ok(a: PagedAllocator) -> None:
    a.check_invariants()
    m = a.metrics()
    assert m.free_bytes + m.allocated_bytes + m.cached_bytes + m.remainder_bytes == m.pool_bytes


def test_a_second_prompt_shares_the_cached_blocks_and_freed_ones_stay_cached():
    a, index = composed()
    assert not a.allocate("x", 9, content="P").matched_tokens  # blocks 0, 1 full, 2 partial
    r = a.allocate("y", 9, content="P")
    assert r.matched_tokens == 8 and a.block_table("y")[:2] == a.block_table("x")[:2]
    assert a.pool.refcount[0] == a.pool.refcount[1] == 2
    assert a.useful_tokens() == 18 - 8  # the shared 8 tokens count once (excess_tokens)
    ok(a)
    a.free("x")
    a.free("y")
    m = a.metrics()
    assert m.cached_bytes == 2 * B * 10 and m.allocated_bytes == 0
    assert a.available_blocks() == 8 and a.pool.num_free == 6
    assert a.prefix_metrics().hit_tokens == 8 and a.useful_tokens() == 0
    ok(a)


def test_the_core_asks_the_index_for_room_and_a_miss_changes_nothing():
    a, index = composed()
    a.allocate("x", 9, content="P")
    a.free("x")  # 2 cached, 6 free
    assert not a.allocate("big", 36, content="Q")  # 9 blocks > 8: make_room says no
    assert index.calls[-2:] == [("make_room", 3), ("cancel",)]
    assert a.metrics().cached_bytes == 2 * B * 10
    assert a.allocate("big", 32, content="Q")  # 8 blocks: the cached entry is evicted
    assert ("make_room", 2) in index.calls and index.entries == {"Q": list(a.block_table("big"))}
    ok(a)


def test_calls_follow_the_documented_order():
    a, index = composed()
    a.allocate("x", 5, content="P")
    a.append("x", 3, content="reply")
    a.fork("x", "c")
    a.set_time(2.5)
    a.free("c")
    a.free_uncached("x")
    assert index.calls == [
        ("match", 5),
        ("admitted", "x", 2),
        ("check_content", "append"),
        ("appended", "x", 5, 3),
        ("forked", "x", "c"),
        ("releasing", "c", 2),  # before the core drops its references
        ("released", "c", False),
        ("releasing", "x", 1),
        ("released", "x", True),
    ]
    assert index.now_s == 2.5 and index.entries == {} and a.metrics().cached_bytes == 0
    ok(a)


def test_bad_content_on_append_raises_before_any_change():
    a, index = composed()
    a.allocate("x", 4, content="P")
    before = a.block_table("x"), a.metrics()
    with pytest.raises(AllocatorError, match="only replies"):
        a.append("x", 4, content="not a reply")
    assert (a.block_table("x"), a.metrics()) == before and a.seq_tokens("x") == 4


def test_the_index_invariants_are_the_allocators():
    a, index = composed()
    a.allocate("x", 8, content="P")
    index.pool.unretain([0])  # the cache forgets a block it still lists
    with pytest.raises(InvariantError, match="prompt cache"):
        a.check_invariants()


def test_a_plain_paged_allocator_has_no_index_and_one_compose():
    a = PagedAllocator(pool_bytes=1024, kv_bytes_per_token=1)
    assert a.index is None and a.prefix_metrics() is None
    a.allocate("x", 4)
    with pytest.raises(ValueError, match="empty allocator"):
        a.compose(PromptCache(a.num_blocks))


def test_held_back_prompts_are_cached_only_as_they_are_published():
    a, index = composed(blocks=12)
    assert a.publish_rule == "computed"
    assert not a.allocate("x", 9, content="P", hold_back=True).matched_tokens
    assert not a.allocate("y", 9, content="P", hold_back=True).matched_tokens  # x: no KV yet
    assert a.publish("x", 4) is False and index.entries == {"P": [a.block_table("x")[0]]}
    assert a.allocate("z", 9, content="P", hold_back=True).matched_tokens == 4
    assert a.publish("x", 9) is True and index.entries["P"] == list(a.block_table("x")[:2])
    assert a.publish("x", 9) is True  # nothing held back: no change
    changes = a.changes
    assert not a.allocate("big", 40, content="Q", hold_back=True)  # a miss drops its hold
    assert index.calls[-2:] == [("cancel",), ("unhold", "big")] and a.changes == changes
    assert index.calls[:4] == [
        ("hold_back", "x", 0),
        ("match", 9),
        ("admitted", "x", 3),
        ("hold_back", "y", 0),
    ]
    ok(a)


# ------------------------------------------- a hybrid model, an index of the old contract
#: one sliding-window group (w = 8) with the table's bytes per token: a sequence's side
#: blocks are one layer's window blocks. A decode at S tokens holds
#: ``ceil(S/B) - floor(max(0, S - w)/B)`` of them, a prefill chunk ``[n, e)``
#: ``ceil(e/B) - floor(max(0, n - w + 1)/B)`` (docs/allocators.md)
WINDOWED = KVGroups(10.0, (GroupDemand("local", "sliding_window", 10.0, 8, 0.0),), 20.0)


def hybrid(index_cls: type[PromptCache] = PromptCache, blocks: int = 8):
    a = PagedAllocator(pool_bytes=blocks * B * 10, kv_bytes_per_token=10, block_size=B)
    a.use_kv_groups(WINDOWED)
    index = index_cls(a.num_blocks)
    a.compose(index)
    return a, index


def test_an_index_without_extra_blocks_works_on_a_hybrid_model():
    """``PromptCache.match`` takes two arguments (the contract before ``extra_blocks``): the
    core counts the side blocks itself. x (12 tokens): 3 table + ``3 - floor(4/4) = 2``
    window blocks of 8, 3 free; freed, its 3 full blocks stay cached: 5 free. y (16 tokens,
    the same prompt) hits 12 tokens (``(16 - 1) // 4 = 3`` blocks) and its first step is
    ``[12, 16)``: ``4 - floor(5/4) = 3`` window blocks + 1 new table block = 4 <= 5, so 1
    is left. z (4 other tokens, step ``[0, 4)``): 1 table + 1 window block = 2 > 1, and
    the cached blocks are y's: make_room(1) says no, cancel, nothing changed."""
    a, index = hybrid()
    assert a.allocate("x", 12, content="P")
    assert len(a.block_table("x")) == 3 and len(a._side["x"]) == 2 and a.pool.num_free == 3
    a.free("x")
    assert a.pool.num_free == 5 and len(index.entries["P"]) == 3
    r = a.allocate("y", 16, content="P", first_step=lambda served: (served, 16))
    assert r.matched_tokens == 12 and a.step_of("y") == (12, 16)
    assert len(a._side["y"]) == 3 and a.pool.num_free == 1
    ok(a)
    before = (a.metrics(), a.changes, a.pool.num_free, {s: a.block_table(s) for s in a.sequences()})
    assert not a.allocate("z", 4, content="Q", first_step=lambda served: (served, 4))
    assert index.calls[-3:] == [("match", 4), ("make_room", 1), ("cancel",)]
    assert (a.metrics(), a.changes, a.pool.num_free, {s: a.block_table(s) for s in a.sequences()}) == before
    assert not a.is_live("z")
    ok(a)


class IgnoresExtra(PromptCache):
    """Takes ``extra_blocks`` but counts none (``PrefixHit.extra_blocks`` stays 0)."""

    def match(self, n_tokens: int, content: Any, extra_blocks: Any = None) -> PrefixHit | None:
        self.calls.append(("extra_blocks", None if extra_blocks is None else extra_blocks(0)))
        return super().match(n_tokens, content)


def test_an_index_that_ignores_extra_blocks_misses_with_nothing_changed():
    """8 blocks. x (28 tokens): 7 table + ``7 - floor(20/4) = 2`` window blocks (the
    decode rule: no first step) = 9 > 8. The index is handed the count (2) but admits
    anyway; the core makes room for its own count first: make_room(1) finds nothing
    cached, cancel, nothing taken (before, the table's 7 blocks were taken and the side
    blocks' take raised). 24 tokens: 6 + ``6 - floor(16/4) = 2`` = 8, admitted, 0 free."""
    a, index = hybrid(IgnoresExtra)
    assert not a.allocate("x", 28, content="P")
    assert index.calls == [("extra_blocks", 2), ("match", 28), ("make_room", 1), ("cancel",)]
    assert a.pool.num_free == 8 and not a.is_live("x") and a.changes == 0
    ok(a)
    assert a.allocate("x", 24, content="P")
    assert len(a.block_table("x")) == 6 and len(a._side["x"]) == 2 and a.pool.num_free == 0
    ok(a)


class OldRadix(RadixIndex):
    """The radix index behind a ``match`` of the old contract (two arguments): it may copy
    a partial block (``cow_tail``) that the core was not told about."""

    def match(self, n_tokens: int, content: Any) -> PrefixHit | None:  # type: ignore[override]
        return super().match(n_tokens, content)


@pytest.mark.parametrize("index_cls", [RadixIndex, OldRadix])
@pytest.mark.parametrize("blocks", [11, 12])
def test_an_old_contract_index_that_copies_a_partial_block_misses_or_fits_as_the_new(index_cls, blocks):
    """x (16 tokens, live): 4 table + ``4 - floor(8/4) = 2`` window blocks. y (20 tokens)
    shares x's first 14: 3 whole blocks hit (12 tokens) and ``cow_tail`` copies 2 more;
    its first step is ``[s, s + 4)`` from the s tokens served. Served 12: ``4 - floor(5/4)
    = 3`` window blocks; 13 or 14: ``5 - 1 = 4``; 15: ``5 - 2 = 3``. An index of the old
    contract cannot count the copy, so the core reserves the most over 12-15 (4) with the
    2 new table blocks: 6. With 11 blocks (5 free, nothing evictable: x is live) y misses
    and nothing changes (before, the copy then found no room and raised); with 12 it is
    admitted at 14 tokens, step (14, 18), 4 window blocks, 0 free: as the new contract."""
    a = PagedAllocator(pool_bytes=blocks * B * 10, kv_bytes_per_token=10, block_size=B)
    a.use_kv_groups(WINDOWED)
    a.compose(index_cls(a.num_blocks, B, tail_policy="cow_tail"))
    assert a.allocate("x", 16, content=(("A", 0, 16),))
    assert a.pool.num_free == blocks - 6
    r = a.allocate("y", 20, content=(("A", 0, 14), ("Z", 0, 6)), first_step=lambda s: (s, min(s + 4, 20)))
    if blocks == 11:
        assert not r and not a.is_live("y") and a.pool.num_free == 5 and a.changes == 1
    else:
        assert r.matched_tokens == 14 and a.step_of("y") == (14, 18)
        assert len(a._side["y"]) == 4 and a.pool.num_free == 0
    ok(a)


def test_only_a_named_extra_blocks_parameter_is_the_new_contract():
    """A ``match`` forwarding ``**kwargs`` (a proxy around an old index) or taking
    ``extra_blocks`` positionally only is called with two arguments."""

    class Proxy(PromptCache):
        def match(self, *args: Any, **kwargs: Any) -> PrefixHit | None:
            return super().match(*args, **kwargs)

    class Positional(PromptCache):
        def match(self, n_tokens: int, content: Any, extra_blocks: Any = None, /) -> PrefixHit | None:
            return super().match(n_tokens, content)

    class KeywordOnly(PromptCache):
        def match(self, n_tokens: int, content: Any, *, extra_blocks: Any = None) -> PrefixHit | None:
            return super().match(n_tokens, content)

    assert [_takes_extra_blocks(c(8)) for c in (PromptCache, Proxy, Positional, KeywordOnly, IgnoresExtra)] == [
        False, False, False, True, True]  # fmt: skip
