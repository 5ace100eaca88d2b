"""The radix tree as the paged allocator's prefix index: the ``radix`` kind (rules 3.6, 3.7).

Responsibility: implement ``sim.memory.PrefixIndex`` with ``RadixTree`` over the paged
core's blocks (``sim.prefix.kinds.RadixAllocator`` composes the two). The core keeps block
tables, refcounts, the FIFO free queue and copy-on-write; this index decides what a new
sequence shares, caches blocks as they fill, and evicts dormant blocks under pressure.

Semantics:
- ``allocate(seq, n, content=spans)`` matches the longest cached prefix from token 0. At
  least one prompt token is always computed: the match is capped at ``n - 1`` tokens, so
  when the whole prompt is cached its last block is recomputed (as vLLM does). Then only
  whole blocks are shared; ``tail_policy="truncate"`` (default, rule 3.6.4b) prefills the
  ``match mod B`` remaining tokens, ``"cow_tail"`` copies them into the new private tail
  block (``cow_copies``/``cow_tail_copies`` += 1, ``bytes_copied`` += their KV bytes).
  The result is truthy on success and carries ``matched_tokens`` = tokens served.
- Full blocks enter the tree as soon as they are full: the prompt's at admission, generated
  tokens' as ``append(seq, n, content=spans)`` fills them; content held back
  (``hold_back``: the engine's admissions) enters as ``publish`` says its KV was computed
  (``publish_rule = "computed"``: SGLang inserts a chunk after its forward,
  ``cache_unfinished_req``), stamped then; until then it is the sequence's own. Content already in the tree
  (held in other blocks) keeps the tree's copy; the sequence's duplicate stays private.
  Tokens appended without content end the sequence's cacheable content.
- The lazy leaf: blocks that would lengthen the sequence's own leaf in place (a leaf only
  it pins, ``RadixTree.can_extend``) wait instead (``_Waiting``: its cached end and the
  latest fill time) and join the leaf in one extension, with the pool's retain and the
  ledger's map, when something could read them: a walk reaching the leaf (a match,
  ``can_allocate``, an insert), the sequence's fork, its release (``releasing``, before the
  core drops its references), an append of unknown content, a listener subscribing, or the
  ``tree`` read from outside. Until then they are pinned, neither cached nor evictable, and
  new to the ledger, so no book, count or eviction can tell; the join stamps the path as
  the fills would have (``RadixTree.extend_late``), which holds while stamps only grow: a
  fill whose path carries a later stamp (the op counter's, see Time) joins at once, and
  the first ``set_time`` joins the fills waiting on the counter. An index with a listener
  joins every fill at once (the listener is told at fill time).
- A live sequence pins (locks) its path; ``fork`` pins it for the child too. ``free``
  unpins: the sequence's tree blocks stay *cached* (dormant, refcount 0, retained in the
  pool), its other blocks return to the free queue. ``free_uncached`` then also evicts the
  dormant childless chain ending at its node (``RadixTree.evict_path``).
- Eviction: dormant leaves in the strategy's order (``lru`` default, ``lfu``, ``fifo``,
  ``priority`` with ``content_priority``), on an allocation shortfall (exactly the
  shortfall) and, with ``tau_low_blocks``/``target_free_blocks``, whenever free blocks drop
  below the low watermark after an allocate, append or free.
- Time: ``set_time(now_s)`` gives the simulation time used for last access (it never goes
  back); until it is called an operation counter stands in (deterministic either way,
  never the wall clock).

Observers: ``subscribe(listener)`` (a ``sim.memory.PrefixListener``, keys = block ids)
is told of the blocks each insert or in-place extension adds to the tree and of every
block evicted from it (``release_cached``); without one, each costs one attribute check.

Books: cached = tree blocks with refcount 0; ``prefix_metrics`` adds F17 (match and hit
rates), evictions and tail copies; ``excess_tokens`` makes a block shared by unrelated
requests count once in ``useful_bytes``.

Invariants (``check``): the tree's own; the ledger's; a block is retained by the pool
exactly when the tree owns it; every tree block with refcount > 0 lies on a locked path;
every node's lock count = live sequences pinning it or a descendant (+1 for the root);
cached blocks = tree blocks with refcount 0; each waiting record marks its sequence's leaf
and covers full blocks of its live table past that leaf's end (``_check_waiting``); a
held-back sequence caches nothing past its limit, short of its tokens (``_check_limits``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from itertools import chain
from typing import Any

from sim.errors import ConfigError, InvariantError
from sim.memory.base import choice
from sim.memory.block_pool import BlockPool
from sim.memory.metrics import PrefixMetrics
from sim.memory.prefix_index import PrefixHit, PrefixListener
from sim.prefix.eviction import EVICTION_STRATEGIES, Watermark
from sim.prefix.held_back import HeldBack
from sim.prefix.radix import Node, RadixTree
from sim.prefix.sharing import FamilyLedger
from sim.prefix.spans import (
    Segments,
    advance,
    checked_content,
    extend_normal,
    n_tokens,
    rest,
    slice_tokens,
    split,
    take,
)
from sim.prefix.stats import PrefixStats

TAIL_POLICIES = ("truncate", "cow_tail")


class RadixIndex:
    """A ``PrefixIndex``: a radix tree of reusable full blocks (see module docstring)."""

    kind = "radix"
    #: SGLang inserts a prefill chunk into the tree once its forward ran
    #: (``cache_unfinished_req``; ``cache_finished_req`` at the end)
    publish_rule = "computed"
    #: a running sequence's fills wait to join its own leaf until something reads it;
    #: False: each fill joins at once (the eager reference, for tests)
    lazy_leaves = True

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        tail_policy: str = "truncate",
        eviction: str = "lru",
        tau_low_blocks: int = 0,
        target_free_blocks: int = 0,
        content_priority: dict | None = None,
    ) -> None:
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size
        self.tail_policy = choice(tail_policy, "tail_policy", TAIL_POLICIES)
        choice(eviction, "eviction", tuple(EVICTION_STRATEGIES))
        self.watermark = Watermark(
            _block_count(tau_low_blocks, "tau_low_blocks"),
            _block_count(target_free_blocks, "target_free_blocks"),
        )
        self._tree = RadixTree(block_size, self, eviction, content_priority)
        self._tree.join_late = self._join_node
        self.stats = PrefixStats()
        self.ledger = FamilyLedger(block_size)
        self._node: dict[Hashable, Node] = {}  # live sequence -> the node it pins
        #: its content past its pinned node's end (not yet in the tree); None = unknown
        self._tail: dict[Hashable, list | None] = {}
        self._retain: dict[Hashable, float] = {}  # live sequence -> its retain priority (not 0)
        #: live sequence -> the full blocks its fills left waiting to join its leaf
        self._waiting: dict[Hashable, _Waiting] = {}
        #: live sequence -> nodes pinned for it besides its own (``_pin_sharers``)
        self._borrowed: dict[Hashable, list[Node]] = {}
        self._held = HeldBack()  # the publication seam (sim.prefix.held_back)
        #: held-back live sequence -> the tokens look-ups may see of it (``hold_back``)
        self._limit: dict[Hashable, int] = self._held.marks
        self._hold_next: set[Hashable] = self._held.next  # admissions held back
        self._now_s: float | None = None
        self._ops = 0
        #: told which blocks enter and leave the tree (keys: block ids); None = nobody
        self.listener: PrefixListener | None = None

    # ------------------------------------------------------------------ time, pool
    def set_time(self, now_s: float) -> None:
        """Simulation time for the next operations' last-access stamps.

        Stamps never go back: a time before the latest one given counts as the latest (an
        engine may stamp a step's end before handling events inside that step).
        """
        if self._now_s is None:  # the op counter's stamps end: no fill waits across them
            self.join_waiting()
            self._now_s = float(now_s)
        elif now_s > self._now_s:
            self._now_s = float(now_s)

    def _now(self) -> float:
        self._ops += 1
        return self._ops if self._now_s is None else self._now_s

    def release_cached(self, block_ids: list[int]) -> None:
        """The tree evicted these dormant blocks: they become free (``CachePool``)."""
        self.pool.unretain(block_ids)
        if self.listener is not None:
            self.listener.evicted(block_ids)

    def subscribe(self, listener: PrefixListener) -> bool:
        """Report blocks entering the tree (``_cache_full_blocks``) and leaving it; from
        now on every fill joins the tree at once (a listener is told at fill time)."""
        self.join_waiting()
        self.listener = listener
        return True

    @property
    def tree(self) -> RadixTree:
        """The tree as eager insertion leaves it: every waiting fill is joined first (a
        reader from outside sees no lag)."""
        self.join_waiting()
        return self._tree

    def join_waiting(self) -> None:
        """Join every sequence's waiting full blocks to its leaf (``_join``)."""
        for w in list(self._waiting.values()):
            self._join(w)

    def _join_node(self, node: Node) -> None:
        """The tree's ``join_late``: a walk reached a node with blocks waiting."""
        w = node.waiting
        if not isinstance(w, _Waiting):
            raise InvariantError(f"radix: {node!r} waits on {w!r}, not this index's record")
        self._join(w)

    def _join(self, w: _Waiting, mapped: bool = True) -> None:
        """Make the one extension the sequence's waiting fills would have made, stamped at
        the latest fill (``RadixTree.extend_late``), with the pool's retain and the
        ledger's map of those blocks (its own, new to the ledger: no excess changes).
        ``mapped`` False leaves them out of the ledger: only for a sequence about to be
        released (``releasing``), whose release would take them out again."""
        seq_id = w.seq_id
        del self._waiting[seq_id]
        node = self._node[seq_id]
        bs = self.block_size
        start = node.end_tokens // bs
        content, self._tail[seq_id] = split(self._tail[seq_id], (w.full_blocks - start) * bs)
        blocks = w.table[start : w.full_blocks]
        self._tree.extend_late(node, content, blocks, w.filled_s)
        self.pool.retain(blocks)
        if mapped:
            sharers = self.ledger.map(seq_id, blocks)
            if sharers:
                self._pin_sharers(sharers, node)

    @property
    def evictable_blocks(self) -> int:
        return self._tree.evictable_blocks

    @property
    def excess_tokens(self) -> int:
        return self.ledger.excess_tokens

    # ------------------------------------------------------------------ admission
    def match(
        self, n_tokens: int, content: Any, extra_blocks: Callable[[int], int] | None = None
    ) -> PrefixHit | None:
        """The longest cached prefix, capped at ``n_tokens - 1``, its path pinned; None when
        the new blocks (and ``extra_blocks`` of the hit: under ``cow_tail`` the more of the
        hit with and without its partial tail, whose copy ``admitted`` decides) cannot fit
        even with every evictable block freed (a request retried step after step while
        memory is short: the core then pins and unpins nothing; a capped match's split
        stays, as on any miss)."""
        segs = None if content is None else checked_content(content, n_tokens, "allocate", "radix")
        if segs is None:
            extra = 0 if extra_blocks is None else extra_blocks(0)
            self._tree.lock(self._tree.root)
            return PrefixHit([], 0, (None, None), extra)
        tree = self._tree
        m = tree.match_normal(segs, limit_tokens=n_tokens - 1)
        extra = 0
        if extra_blocks is not None:
            extra = extra_blocks(m.hit_tokens)
            if self.tail_policy == "cow_tail" and m.tail_tokens:
                extra = max(extra, extra_blocks(m.hit_tokens + m.tail_tokens))
        tree.lock(m.node)  # pin the matched path before any eviction makes room
        short = self._new_blocks(n_tokens, m.block_ids) + extra - self.pool.num_free
        if short > tree.evictable_blocks:  # make_room would refuse: a miss
            tree.unlock(m.node)
            return None
        return PrefixHit(m.block_ids, m.hit_tokens, (m, segs), extra)

    def _new_blocks(self, n_tokens: int, hit_blocks: list[int]) -> int:
        """Blocks a prompt of ``n_tokens`` takes beyond those its hit shares (``match``'s
        early miss and ``can_allocate`` ask the same question)."""
        return -(-n_tokens // self.block_size) - len(hit_blocks)

    def cancel(self, hit: PrefixHit) -> None:
        m = hit.state[0]
        self._tree.unlock(self._tree.root if m is None else m.node)

    def make_room(self, short_blocks: int) -> bool:
        if short_blocks > self._tree.evictable_blocks:
            return False  # evict nothing: a miss changes nothing
        self._tree.evict(short_blocks)
        return True

    def admitted(self, seq_id: Hashable, n_tokens: int, table: list[int], hit: PrefixHit) -> int:
        m, segs = hit.state
        now = self._now()
        self.ledger.new(seq_id, table)
        matched = served = copied = 0
        if m is not None:
            matched, served = m.matched_tokens, m.hit_tokens
            if m.block_ids:
                self.ledger.map(seq_id, m.block_ids)
                self._tree.touch(m.node, now, hit=True)
            if (
                self.tail_policy == "cow_tail"
                and m.tail_tokens
                and self._tree.owns(m.tail_block_id)
            ):
                copied = m.tail_tokens  # the source survived any eviction made for room
                self.stats.cow_tail_copies += 1
        node = self._node[seq_id] = self._tree.root if m is None else m.node
        self._tail[seq_id] = None if segs is None else _past(segs, node.end_tokens)
        if seq_id in self._hold_next:  # its KV is not computed yet: only the hit is cached
            self._hold_next.discard(seq_id)
            self._limit[seq_id] = node.end_tokens
        else:
            self._cache_full_blocks(seq_id, n_tokens, now, table)
        self.stats.record(seq_id, n_tokens, matched, served + copied)
        self._keep_watermark()
        return copied

    # ------------------------------------------------------------------ growth
    #: ``checked_content`` for this kind, called without a frame of its own (a partial
    #: object is C-level): one Python call per append, its one-segment case first
    check_content = staticmethod(partial(checked_content, kind="radix"))

    def appended(
        self, seq_id: Hashable, tokens: int, n_tokens: int, content: Any, table: list[int]
    ) -> None:
        tail = self._tail[seq_id]
        if tail is not None:
            if content is None:  # tokens of unknown content: nothing more to cache
                if seq_id in self._waiting:
                    self._join(self._waiting[seq_id])
                self._tail[seq_id] = None
            else:  # normalised by check_content; a decode's one segment joined in line
                if len(content) == 1 and tail:  # (``extend_normal``)
                    last, seg = tail[-1], content[0]
                    if last[0] == seg[0] and last[1] + last[2] == seg[1]:
                        tail[-1] = (last[0], last[1], last[2] + seg[2])
                    else:
                        tail.append(seg)
                else:
                    extend_normal(tail, content)
                now = self._now_s
                if now is None:  # the op counter's stamp (``_now``)
                    now = self._now()
                upto = tokens + n_tokens
                if self._limit:
                    limit = self._limit.get(seq_id)
                    if limit is not None and limit < upto:  # held back past ``limit``
                        upto = limit
                w = self._waiting.get(seq_id)
                if w is not None:  # its leaf waits: the fill waits too (``_fill``)
                    full = upto // self.block_size
                    if full > w.full_blocks:
                        w.full_blocks, w.filled_s = full, now
                else:
                    self._fill(seq_id, upto, now, table)
        if self.watermark.tau_low_blocks:  # (a decode's append: no call without one)
            self._keep_watermark()

    def _fill(self, seq_id: Hashable, tokens: int, now: float, table: list[int]) -> None:
        """The sequence's first ``tokens`` tokens may be cached (filled at ``now``): its
        waiting leaf takes the new full blocks, or they are cached now."""
        full = tokens // self.block_size
        w = self._waiting.get(seq_id)
        if w is not None:  # its leaf waits: the fill waits too
            if full > w.full_blocks:
                w.full_blocks, w.filled_s = full, now
        elif full > self._node[seq_id].end_tokens // self.block_size:
            self._cache_full_blocks(seq_id, tokens, now, table)

    # ------------------------------------------------------------------ publication
    def hold_back(self, seq_id: Hashable, tokens: int) -> bool:
        """Cache nothing of ``seq_id`` past ``tokens`` until ``publish`` (SGLang inserts a
        chunk once computed, not when its slots are allocated)."""
        return self._held.hold(seq_id, seq_id in self._node, tokens)

    def publishes_apart(self, seq_id: Hashable) -> bool:
        """Whether publishing the rest of held-back ``seq_id`` only caches blocks of its
        own: nothing held back, no content known past its node, its fills waiting on or
        growing its own leaf in place (``RadixTree.can_extend``), or no child of its node
        starting with its next full block (``insert`` would then make a new leaf, which
        later publications lengthen in place). Until it publishes, nothing else can add
        such a child: a run's other fills are decodes' own output (a fresh content id per
        request, ``Request.output_id``), and nothing looks up. O(1) but the one block's
        key."""
        if seq_id not in self._limit or seq_id in self._waiting:
            return True
        tail = self._tail[seq_id]
        if tail is None:
            return True
        node = self._node[seq_id]
        if self._tree.can_extend(node):
            return True
        key, _, _ = take(tail, 0, 0, self.block_size)
        return n_tokens(key) < self.block_size or key not in node.children

    def unhold(self, seq_id: Hashable) -> None:
        self._held.drop(seq_id)

    def publish(self, seq_id: Hashable, tokens: int, n_tokens: int, table: list[int]) -> int:
        """Cache the held-back full blocks of the first ``tokens`` tokens, stamped now."""
        limit = self._limit.get(seq_id)
        if limit is None:
            return 0
        made = 0
        if tokens > limit:
            bs = self.block_size
            w = self._waiting.get(seq_id)
            before = w.full_blocks if w is not None else self._node[seq_id].end_tokens // bs
            if self._tail[seq_id] is not None:
                self._fill(seq_id, tokens, self._now(), table)
                w = self._waiting.get(seq_id)
                after = w.full_blocks if w is not None else self._node[seq_id].end_tokens // bs
                made = max(0, after - before)
            self._limit[seq_id] = tokens
        if tokens >= n_tokens:
            del self._limit[seq_id]
        return made

    def _cache_full_blocks(
        self, seq_id: Hashable, tokens: int, now: float, table: list[int]
    ) -> None:
        """Cache the sequence's full blocks past its pinned node; move its pin to their end.

        Its own unshared leaf grows in place (``RadixTree.extend``): without a listener, the
        blocks wait (``_Waiting``) and join the leaf when something reads it (``_join``);
        otherwise they go in below the node (``insert``). Work: O(new blocks + segments of
        the tail); O(1) for a waiting leaf.
        """
        tail = self._tail[seq_id]
        node = self._node[seq_id]
        bs = self.block_size
        full, start = tokens // bs, node.end_tokens // bs
        if tail is None or full <= start:
            return
        tree = self._tree
        if (
            self.lazy_leaves
            and self.listener is None
            and tree.can_extend(node)
            and tree.path_not_after(node, now)  # (not so only past the op counter's stamps)
        ):
            w = self._waiting[seq_id] = _Waiting(seq_id, table, full, now)
            tree.wait(node, w)
            return
        content, self._tail[seq_id] = split(tail, (full - start) * bs)
        blocks = table[start:full]
        if tree.try_extend(node, content, blocks, now):
            self.pool.retain(blocks)
            sharers = self.ledger.map(seq_id, blocks)
            if sharers:
                self._pin_sharers(sharers, node)
            if self.listener is not None:  # they continue the node's old last block
                self.listener.cached(node.block_ids[-len(blocks) - 1], blocks, content)
            return
        res = tree.insert(content, blocks, now, start=node)
        adopted = res.adopted_block_ids
        if adopted:
            self.pool.retain(adopted)
            sharers = self.ledger.map(seq_id, adopted)
            if sharers:
                self._pin_sharers(sharers, res.node)
            if self.listener is not None:  # the new leaf res.node holds them
                parent = res.node.parent
                total = len(blocks) * bs
                self.listener.cached(
                    None if parent is tree.root else parent.block_ids[-1],
                    adopted,
                    slice_tokens(content, total - len(adopted) * bs, total),
                )
        tree.lock(res.node)
        tree.unlock(node)
        self._node[seq_id] = res.node

    def _pin_sharers(self, sharers: set[Hashable], *nodes: Node) -> None:
        """Pin ``nodes`` for each of ``sharers``: members of the caching sequence's fork
        family that map blocks it just cached (forked while those were held back), whose
        own pins lie above them. Each such pin lasts until its sequence is released (its
        table maps those blocks as long); it may pin more of ``node`` than the sharer
        maps; a fork of a sharer takes its pins too."""
        lock, borrowed = self._tree.lock, self._borrowed
        for s in sharers:
            for node in nodes:
                lock(node)
            borrowed.setdefault(s, []).extend(nodes)

    def appends_in_bulk(self, seq_ids: Iterable[Hashable]) -> bool:
        """True when each sequence's new full blocks would lengthen its own leaf in place
        (``RadixTree.can_extend``: a leaf it alone pins) or are not cached (unknown content)
        and no watermark evicts between appends. Then a run's fills touch only locked
        paths, so make_room's victims and their order do not depend on when blocks are
        taken; one ``extend`` of k blocks leaves the leaf k fills would, and the paths'
        last access is the latest fill through them when sequences come in the order of
        their last fills (``DeferredAppends.apply_run``)."""
        if self.watermark.tau_low_blocks:
            return False
        tails, nodes, can_extend = self._tail, self._node, self._tree.can_extend
        return all(tails[s] is None or can_extend(nodes[s]) for s in seq_ids)

    def forked(self, parent_id: Hashable, child_id: Hashable, table: list[int]) -> None:
        if parent_id in self._waiting:  # the child pins the node and maps those blocks
            self._join(self._waiting[parent_id])
        node = self._node[parent_id]
        self._tree.lock(node)
        self._node[child_id] = node
        if self._borrowed and parent_id in self._borrowed:  # it maps what they hold too
            self._pin_sharers({child_id}, *self._borrowed[parent_id])
        if parent_id in self._limit:
            self._limit[child_id] = self._limit[parent_id]
        tail = self._tail[parent_id]
        self._tail[child_id] = None if tail is None else list(tail)
        self.ledger.fork(parent_id, child_id, table)

    def set_retain(self, seq_id: Hashable, priority: float) -> None:
        """Its path takes ``priority`` when it is released (``RadixTree.set_retain``)."""
        if seq_id not in self._node:
            raise InvariantError(f"radix: set_retain of unknown sequence {seq_id!r}")
        if priority:
            self._retain[seq_id] = float(priority)
        else:
            self._retain.pop(seq_id, None)

    def releasing(self, seq_id: Hashable) -> None:
        """Before the core drops its references: its waiting blocks join the tree (and are
        retained), so those reaching refcount 0 are cached, as eager insertion leaves them.
        The ledger is not told of them: ``released`` comes next (the core calls nothing
        between that reads the ledger), and its ``FamilyLedger.release`` would take back
        at once what the map gave, blocks only this sequence maps (new to the ledger: no
        other family can map a block still waiting), leaving the ledger as it is now; an
        agent's whole trajectory of fills can be waiting here, so the two passes over
        them are skipped. Except where a fork of a held-back sequence left blocks shared
        before they were cached (``FamilyLedger.has_untracked``): a member of this
        sequence's family may map a waiting block too, and must pin the node it joins
        (the map names it), or the node would be evictable under its table."""
        if seq_id in self._waiting:
            self._join(self._waiting[seq_id], mapped=self.ledger.has_untracked)

    def released(self, seq_id: Hashable, table: list[int], uncache: bool) -> None:
        """Unpin: its tree blocks stay cached (the pool retains them); with ``uncache`` the
        dormant childless chain ending at its node is evicted too (nodes other sequences
        pin, or that still have children, stay)."""
        if seq_id in self._waiting:
            raise InvariantError(f"radix: {seq_id!r} released with blocks waiting (no releasing)")
        node = self._node.pop(seq_id)
        del self._tail[seq_id]
        self._limit.pop(seq_id, None)
        self.ledger.release(seq_id, table)
        if self._borrowed:
            for pinned in self._borrowed.pop(seq_id, ()):
                self._tree.unlock(pinned)
        self._tree.set_retain(node, self._retain.pop(seq_id, 0.0))
        self._tree.unlock(node)
        self._keep_watermark()
        if uncache:
            self._tree.evict_path(node)

    def _keep_watermark(self) -> None:
        if not self.watermark.tau_low_blocks:
            return  # no watermark: eviction only on a shortfall
        n = self.watermark.blocks_to_evict(self.pool.num_free)
        if n > 0:
            self._tree.evict(n)

    # ------------------------------------------------------------------ queries
    def can_allocate(self, n_tokens: int, content: Any) -> bool:
        segs = checked_content(content, n_tokens, "can_allocate", "radix")
        m = self._tree.match_normal(segs, limit_tokens=n_tokens - 1)
        pinned = self._tree.unlocked_blocks_on_path(m.node)
        need = self._new_blocks(n_tokens, m.block_ids)
        return need <= self.pool.num_free + self._tree.evictable_blocks - pinned

    def prefix_metrics(self, block_bytes: float) -> PrefixMetrics:
        return self.stats.metrics(
            cached_bytes=self.pool.num_cached * block_bytes,
            active_bytes=self.pool.num_allocated * block_bytes,
            evicted_blocks=self._tree.evicted_blocks,
        )

    def check(self, tables: Mapping[Hashable, list[int]], tokens: Mapping[Hashable, int]) -> None:
        self._tree.check_ranks = True  # a checking run: its evictions check their ranks too
        try:
            self._tree.check_invariants()
            self.ledger.check(tables)
        except InvariantError as exc:
            raise InvariantError(f"radix: {exc}") from None
        owner = self._tree.block_owner()
        pool = self.pool
        if owner.keys() != set(pool.retained_blocks()):  # else: the first block that differs
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
        self._check_waiting(tables, tokens)
        self._check_limits(tokens)

    def _check_limits(self, tokens: Mapping[Hashable, int]) -> None:
        """A hold outlives no operation; a held-back sequence caches nothing past its
        limit, which is short of its tokens (a hold that reaches them ends)."""
        if self._hold_next or not self._limit.keys() <= self._node.keys():
            raise InvariantError("radix: a hold outlived its operation or its sequence")
        for seq_id, limit in self._limit.items():
            w = self._waiting.get(seq_id)
            cached = self._node[seq_id].end_tokens if w is None else w.full_blocks * self.block_size
            if not cached <= limit < tokens[seq_id]:
                raise InvariantError(
                    f"radix: {seq_id!r} caches {cached} tokens, held back at {limit} of "
                    f"{tokens[seq_id]}"
                )

    def _check_waiting(
        self, tables: Mapping[Hashable, list[int]], tokens: Mapping[Hashable, int]
    ) -> None:
        """Each waiting record marks its sequence's leaf (and only waiting leaves are
        marked), reads the core's live table, and covers full blocks past the leaf's end
        that the tail's content holds."""
        marked = {id(n) for n in self._tree.iter_nodes() if n.waiting is not None}
        bs = self.block_size
        for seq_id, w in self._waiting.items():
            node = self._node[seq_id]
            tail = self._tail[seq_id]
            if (
                w.seq_id != seq_id
                or node.waiting is not w
                or w.table is not tables[seq_id]
                or not node.end_tokens // bs < w.full_blocks <= tokens[seq_id] // bs
                or tail is None
                or sum(n for _, _, n in tail) != tokens[seq_id] - node.end_tokens
            ):
                raise InvariantError(f"radix: the blocks waiting for {seq_id!r} are stale")
            marked.discard(id(node))
        if marked:
            raise InvariantError("radix: a leaf is marked waiting for no sequence")

    def _check_locks(self) -> None:
        pins: dict[int, int] = {}
        for node in [*self._node.values(), *chain.from_iterable(self._borrowed.values())]:
            while node is not None:
                pins[id(node)] = pins.get(id(node), 0) + 1
                node = node.parent
        for node in [self._tree.root, *self._tree.iter_nodes()]:
            want = pins.get(id(node), 0) + (node is self._tree.root)
            if node.lock_ref != want:
                raise InvariantError(f"radix: {node!r} lock_ref {node.lock_ref} != {want} pins")


@dataclass(slots=True, eq=False)  # a record is itself (compared, hashed by identity)
class _Waiting:
    """A sequence's full blocks waiting to join its leaf; their content is the head of the
    sequence's ``_tail``."""

    seq_id: Hashable  # the live sequence whose own leaf they lengthen
    #: the core's live table (kept, read at the join: an entry of a full block never
    #: changes, ``PrefixIndex.admitted``); the blocks are those from the leaf's end on
    table: list[int]
    full_blocks: int  # the sequence's full blocks now: the waiting ones end here
    filled_s: float  # when the latest of them filled (the join stamps the path with it)


def _past(segs: Segments, n_tokens: int) -> list:
    """Content past its first ``n_tokens`` tokens, as a list of segments."""
    return rest(segs, *advance(segs, 0, 0, n_tokens))


def _block_count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"must be a whole number of blocks >= 0, got {value!r}", field=field)
    return value
