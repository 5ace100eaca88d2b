"""``radix``: the paged allocator with a radix prefix cache over its blocks (SPEC 3.6, 3.7).

Responsibility: compose ``sim.memory.PagedAllocator`` (block tables, refcounts, FIFO free
queue, copy-on-write) with ``RadixTree`` through the paged allocator's composition hooks.
Registered in the memory factory by name (``make_allocator("radix", ..., block_size=16)``),
so the memory layer never imports this one.

Semantics:
- ``allocate(seq, n, content=spans)`` matches the longest cached prefix from token 0. At
  least one prompt token is always computed: the match is capped at ``n - 1`` tokens, so
  when the whole prompt is cached its last block is recomputed (as vLLM does). Then only
  whole blocks are shared; ``tail_policy="truncate"`` (default, SPEC 3.6.4b) prefills the
  ``match mod B`` remaining tokens, ``"cow_tail"`` copies them into the new private tail
  block (``cow_copies``/``cow_tail_copies`` += 1, ``bytes_copied`` += their KV bytes).
  The result is truthy on success and carries ``matched_tokens`` = tokens served.
- Full blocks enter the tree as soon as they are full: the prompt's at admission, generated
  tokens' as ``append(seq, n, content=spans)`` fills them. Content already in the tree
  (held in other blocks) keeps the tree's copy; the sequence's duplicate stays private.
  Tokens appended without content end the sequence's cacheable content.
- A live sequence pins (locks) its path; ``fork`` pins it for the child too. ``free``
  unpins: the sequence's tree blocks stay *cached* (dormant, refcount 0, retained in the
  pool), its other blocks return to the free queue.
- Eviction: dormant leaves in the strategy's order (``lru`` default, ``lfu``, ``fifo``,
  ``priority`` with ``content_priority``), on an allocation shortfall (exactly the
  shortfall) and, with ``tau_low_blocks``/``target_free_blocks``, whenever free blocks drop
  below the low watermark after an operation.
- Time: ``set_time(now_s)`` gives the simulation time used for last access (it never goes
  back); until it is called an operation counter stands in (deterministic either way,
  never the wall clock).

Books: free + allocated + cached + remainder = pool, cached = tree blocks with refcount 0;
``metrics()`` reports them, ``prefix_metrics()`` adds F17 (match and hit rates), evictions
and tail copies. ``useful_bytes`` counts a block shared by unrelated requests once.

Invariants (``check_invariants``): the paged invariants; the tree's own; a block is retained
by the pool exactly when the tree owns it; every tree block with refcount > 0 lies on a
locked path; every node's lock count = live sequences pinning it or a descendant (+1 for
the root); cached blocks = tree blocks with refcount 0.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from sim.errors import ConfigError
from sim.memory.base import checked_count, choice
from sim.memory.errors import AllocatorError, InvariantError
from sim.memory.metrics import ADMITTED, AllocResult
from sim.memory.paged import PagedAllocator
from sim.prefix.eviction import EVICTION_STRATEGIES, Watermark
from sim.prefix.radix import Node, RadixTree
from sim.prefix.sharing import FamilyLedger
from sim.prefix.spans import advance, extend_normal, n_tokens, rest, segments, take
from sim.prefix.stats import PrefixCacheReport, PrefixStats

TAIL_POLICIES = ("truncate", "cow_tail")


def checked_content(content: Any, n: int, op: str, kind: str = "radix"):
    """Spans -> normal segments whose length is ``n``; misuse raises AllocatorError."""
    try:
        segs = segments(content)
    except (TypeError, ValueError) as exc:
        raise AllocatorError(f"{kind}: {op}: bad content: {exc}") from None
    if n_tokens(segs) != n:
        raise AllocatorError(f"{kind}: {op}: content holds {n_tokens(segs)} tokens, not {n}")
    return segs


class RadixAllocator(PrefixCacheReport, PagedAllocator):
    """Paged blocks plus a radix tree of reusable full blocks (see module docstring)."""

    kind = "radix"
    uses_content = True  # the engine passes token content with every allocate and append

    def __init__(
        self,
        *,
        pool_bytes: float,
        kv_bytes_per_token: float,
        block_size: int = 16,
        tail_policy: str = "truncate",
        eviction: str = "lru",
        tau_low_blocks: int = 0,
        target_free_blocks: int = 0,
        content_priority: dict | None = None,
    ) -> None:
        super().__init__(
            pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token, block_size=block_size
        )
        self.tail_policy = choice(tail_policy, "tail_policy", TAIL_POLICIES)
        choice(eviction, "eviction", tuple(EVICTION_STRATEGIES))
        self.watermark = Watermark(
            _block_count(tau_low_blocks, "tau_low_blocks"),
            _block_count(target_free_blocks, "target_free_blocks"),
        )
        self.tree = RadixTree(self.block_size, self, eviction, content_priority)
        self.stats = PrefixStats()
        self.ledger = FamilyLedger(self.block_size)
        self._node: dict[Hashable, Node] = {}  # live sequence -> the node it pins
        #: its content past its pinned node's end (not yet in the tree); None = unknown
        self._tail: dict[Hashable, list | None] = {}
        self._pending = None  # (match, segs) between _allocate and its hooks
        self._now_s: float | None = None
        self._ops = 0

    # ------------------------------------------------------------------ time, pool
    def set_time(self, now_s: float) -> None:
        """Simulation time for the next operations' last-access stamps.

        Stamps never go back: a time before the latest one given counts as the latest (an
        engine may stamp a step's end before handling events inside that step).
        """
        if self._now_s is None or now_s > self._now_s:
            self._now_s = float(now_s)

    def _now(self) -> float:
        self._ops += 1
        return self._ops if self._now_s is None else self._now_s

    def release_cached(self, block_ids: list[int]) -> None:
        """The tree evicted these dormant blocks: they become free (CachePool protocol)."""
        self.pool.unretain(block_ids)

    # ------------------------------------------------------------------ operations
    def _allocate(self, seq_id: Hashable, n_tokens: int, content: Any) -> AllocResult:
        segs = None if content is None else checked_content(content, n_tokens, "allocate")
        m = None if segs is None else self.tree.match(segs, limit_tokens=n_tokens - 1)
        node = self.tree.root if m is None else m.node
        self.tree.lock(node)  # pin the matched path before any eviction makes room
        self._pending = (m, segs)
        try:
            result = super()._allocate(seq_id, n_tokens, content)
        finally:
            self._pending = None
        if not result:
            self.tree.unlock(node)
            return result
        hit = self.stats.records[-1].hit_tokens
        self._keep_watermark()
        return AllocResult(True, hit) if hit else ADMITTED

    def _match_prefix(self, seq_id, n_tokens, content) -> tuple[list[int], int]:
        m = self._pending[0]
        return ([], 0) if m is None else (list(m.block_ids), m.hit_tokens)

    def _make_room(self, n_blocks: int) -> bool:
        short = n_blocks - self.pool.num_free
        if short <= 0:
            return True
        if short > self.tree.evictable_blocks:
            return False  # evict nothing: a miss changes nothing
        self.tree.evict(short)
        return True

    def available_blocks(self) -> int:
        return self.pool.num_free + self.tree.evictable_blocks

    def _after_allocate(self, seq_id: Hashable, n_tokens: int, content: Any) -> None:
        m, segs = self._pending
        now = self._now()
        self.ledger.new(seq_id)
        matched = hit = 0
        if m is not None:
            matched, hit = m.matched_tokens, m.hit_tokens
            if m.block_ids:
                self.ledger.map(seq_id, m.block_ids)
                self.tree.touch(m.node, now, hit=True)
            if self.tail_policy == "cow_tail" and m.tail_tokens and self.tree.owns(m.tail_block_id):
                hit += m.tail_tokens  # the source survived any eviction made for room
                self._count.cow_copies += 1
                self.stats.cow_tail_copies += 1
                self._add_copy(m.tail_tokens * self.kv_bytes_per_token)
        node = self._node[seq_id] = self.tree.root if m is None else m.node
        uncached = None if segs is None else rest(segs, *advance(segs, 0, 0, node.end_tokens))
        self._tail[seq_id] = uncached
        self._cache_full_blocks(seq_id, n_tokens, now)
        self.stats.record(seq_id, n_tokens, matched, hit)

    def _append(self, seq_id: Hashable, tokens: int, n_tokens: int, content: Any) -> bool:
        if content is not None:  # normalised once, for _after_append
            content = checked_content(content, n_tokens, "append")
        if not super()._append(seq_id, tokens, n_tokens, content):
            return False
        self._keep_watermark()
        return True

    def _after_append(self, seq_id: Hashable, tokens: int, n_tokens: int, content: Any) -> None:
        tail = self._tail[seq_id]
        if tail is None:
            return
        if content is None:
            self._tail[seq_id] = None  # tokens of unknown content: nothing more to cache
            return
        extend_normal(tail, content)  # normalised by _append
        now = self._now()
        tokens += n_tokens
        if tokens // self.block_size > self._node[seq_id].end_tokens // self.block_size:
            self._cache_full_blocks(seq_id, tokens, now)

    def _cache_full_blocks(self, seq_id: Hashable, tokens: int, now: float) -> None:
        """Cache the sequence's full blocks past its pinned node; move its pin to their end.

        Its own unshared leaf grows in place (``RadixTree.extend``); otherwise the blocks go
        in below the node (``insert``). Work: O(new blocks + segments of the tail).
        """
        tail = self._tail[seq_id]
        node = self._node[seq_id]
        bs = self.block_size
        full, start = tokens // bs, node.end_tokens // bs
        if tail is None or full <= start:
            return
        content, qi, qoff = take(tail, 0, 0, (full - start) * bs)
        self._tail[seq_id] = rest(tail, qi, qoff)
        blocks = self._tables[seq_id][start:full]
        tree = self.tree
        if tree.can_extend(node):
            tree.extend(node, content, blocks, now)
            self.pool.retain(blocks)
            self.ledger.map(seq_id, blocks)
            return
        res = tree.insert(content, blocks, now, start=node)
        if res.adopted_block_ids:
            self.pool.retain(res.adopted_block_ids)
            self.ledger.map(seq_id, res.adopted_block_ids)
        tree.lock(res.node)
        tree.unlock(node)
        self._node[seq_id] = res.node

    def _after_fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        node = self._node[parent_id]
        self.tree.lock(node)
        self._node[child_id] = node
        tail = self._tail[parent_id]
        self._tail[child_id] = None if tail is None else list(tail)
        self.ledger.fork(parent_id, child_id, self._tables[child_id])

    def _release(self, seq_id: Hashable, table: list[int], tokens: int) -> None:
        node = self._node.pop(seq_id)
        del self._tail[seq_id]
        self.ledger.release(seq_id, table)
        super()._release(seq_id, table, tokens)  # tree blocks stay cached, others go free
        self.tree.unlock(node)
        self._keep_watermark()

    def free_uncached(self, seq_id: Hashable) -> list[int]:
        """Free ``seq_id`` and drop its context from the cache too (a pause dropped for
        recompute that must really recompute): after ``free`` caches its full blocks, the
        dormant childless chain ending at its node is evicted (``RadixTree.evict_path``);
        nodes other sequences pin or that still have children stay. Returns the freed ids."""
        node = self._node.get(seq_id)
        self.free(seq_id)
        return [] if node is None else self.tree.evict_path(node)

    def _keep_watermark(self) -> None:
        if not self.watermark.tau_low_blocks:
            return  # no watermark: eviction only on a shortfall
        n = self.watermark.blocks_to_evict(self.pool.num_free)
        if n > 0:
            self.tree.evict(n)

    # ------------------------------------------------------------------ queries
    def can_allocate(self, n_tokens: int, *, content: Any = None) -> bool:
        if content is None:
            return super().can_allocate(n_tokens)
        n = checked_count(n_tokens, "can_allocate", minimum=1)
        segs = checked_content(content, n, "can_allocate")
        m = self.tree.match(segs, limit_tokens=n - 1)
        pinned = self.tree.unlocked_blocks_on_path(m.node)
        need = -(-n // self.block_size) - len(m.block_ids)
        return need <= self.pool.num_free + self.tree.evictable_blocks - pinned

    def _evicted_blocks(self) -> int:
        return self.tree.evicted_blocks

    def _check_kind(self) -> None:
        super()._check_kind()
        try:
            self.tree.check_invariants()
            self.ledger.check(self._tables)
        except AssertionError as exc:
            raise InvariantError(f"radix: {exc}") from None
        owner = self.tree.block_owner()
        pool = self.pool
        for b in range(pool.num_blocks):
            if pool.is_retained(b) != (b in owner):
                raise InvariantError(
                    f"radix: block {b} retained={pool.is_retained(b)} but in tree={b in owner}"
                )
        dormant = 0
        for b, node in owner.items():
            if pool.refcount[b] == 0:
                dormant += 1
            elif node.lock_ref == 0:
                raise InvariantError(f"radix: block {b} is mapped but its node is evictable")
        if dormant != pool.num_cached:
            raise InvariantError(f"radix: {dormant} dormant tree blocks, {pool.num_cached} cached")
        self._check_locks()

    def _check_locks(self) -> None:
        pins: dict[int, int] = {}
        for node in self._node.values():
            while node is not None:
                pins[id(node)] = pins.get(id(node), 0) + 1
                node = node.parent
        for node in [self.tree.root, *self.tree.iter_nodes()]:
            want = pins.get(id(node), 0) + (node is self.tree.root)
            if node.lock_ref != want:
                raise InvariantError(f"radix: {node!r} lock_ref {node.lock_ref} != {want} pins")


def _block_count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"must be a whole number of blocks >= 0, got {value!r}", field=field)
    return value
