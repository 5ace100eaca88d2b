"""Radix tree over paged KV blocks: longest-prefix match, insert, lock, leaf eviction.

Responsibility: remember which whole blocks hold which token content (rule 3.6) and give
dormant blocks back under pressure (rule 3.7). Nodes hold a span label (a normal segment
tuple, see ``spans``), the ids of the blocks holding those tokens, a lock refcount, the
last access time (simulation time given by the caller, never the wall clock) and a hit
count. Children are keyed by the content of their first block. The tree never allocates:
block ids come from the caller's block pool, and evicted ids go back through the pool's
``release_cached(block_ids)``, so the same tree serves the paged allocator and a counting
pool for trace replay.

Invariants (``check_invariants``, which raises ``InvariantError``):
- every label is a whole number of blocks (``n_tokens == len(block_ids) * block_size``);
  a partial tail block is never in the tree (rule 3.6.3);
- every block id is owned by exactly one node; ``total_blocks`` counts them;
- ``lock_ref`` of a node >= the sum over its children (locks walk the path to the root;
  the root is always locked); ``evictable_blocks`` = blocks of nodes with ``lock_ref == 0``;
- only unlocked leaves are evicted; a leaf loses blocks from its end (deepest first), and a
  parent left childless and unlocked becomes a candidate (the cascade of rule 3.7.4);
- every unlocked leaf has a live entry in the heap, also after a plug-in's rank is refused
  (``PluginError``: the refused call is undone, so a caller that catches it goes on with
  the tree as it was; shipped keys are never refused and pay nothing for it).

Eviction is block-granular: ``evict(n)`` frees exactly ``min(n, evictable)`` blocks, trimming
the last victim leaf rather than removing more than asked (SGLang removes whole nodes).
A victim loses as many trailing blocks at once as keep its rank (the strategy's
``same_rank_blocks``, a whole number >= 1), so ``evict(n)`` frees what ``evict(1)`` n times
frees; with ``check_ranks`` (a checking run) each such trim first checks that promise.

Growth: a sequence's next full blocks either become a child of its pinned node (``insert``)
or, when that node is a leaf pinned by that sequence alone, lengthen it in place (``extend``:
the compressed edge of rule 3.6.1), so a growing context stays one node and paths stay as
deep as the branching, not as the context. In place is offered only under strategies whose
ranking cannot tell the two shapes apart (``merges_extensions``: ``lru`` and ``priority``
rank by last access, which a touch gives the whole path, and by the last block's content;
``lfu`` and ``fifo`` rank a new child by its own zero hits and creation time, so they keep a
child per insert). The one difference left is the tie-break between equally ranked blocks at
equal depth, which goes by node age ("older node first").

Late extension: the caller may mark such a leaf ``waiting`` (``wait``: full blocks of its
own are due to join it) and make the extension later (``extend_late``, stamped with the
latest fill time; stamps only grow, so the path ends as the extensions at fill time leave
it). Any walk (``match``, ``insert``) that reaches a waiting node first calls the tree's
``join_late``, so nothing reads a node before its blocks join it.
"""

from __future__ import annotations

import copy
import heapq
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sim.errors import InvariantError, PluginError
from sim.prefix.eviction import EvictionStrategy, get_strategy, is_shipped_key
from sim.prefix.spans import (
    ContentId,
    Segments,
    advance,
    drop_last,
    join,
    match_at,
    n_tokens,
    segments,
    slice_tokens,
    take,
)


class CachePool(Protocol):
    """What the tree needs from a block pool: take back dormant blocks it evicted."""

    def release_cached(self, block_ids: list[int]) -> None: ...


class Node:
    """One radix node (rule 3.6.1). ``lock_ref`` is the node ref_count of rule 3.6."""

    __slots__ = (
        "parent",  # Node | None (None only for the root)
        "label",  # normal segment tuple: the tokens this edge adds
        "block_ids",  # physical blocks holding those tokens, in order
        "children",  # {first-block content: Node}
        "by_first",  # {(content_id, start) of the first token: [Node]}, for partial matches
        "lock_ref",  # running requests whose path passes here; 0 = dormant
        "last_access",  # simulation time of the last match or insert through this node
        "created_at",  # simulation time this content entered the tree (FIFO)
        "hit_count",  # prefix matches through this node (LFU)
        "retain",  # retain priority of the last sequence released through it (lower: sooner)
        "end_tokens",  # tokens from the root to the end of this node
        "serial",  # creation order, for deterministic ties
        "heap_version",  # bumped on each push; older heap entries are stale
        "alive",  # False once removed from the tree
        "waiting",  # None, or its owner's record of full blocks not joined yet (``join_late``)
    )

    def __init__(self, parent, label, block_ids, now, serial):
        self.parent = parent
        self.label = label
        self.block_ids = block_ids
        self.children: dict[Segments, Node] = {}
        self.by_first: dict[tuple, list[Node]] = {}
        self.lock_ref = 0
        self.last_access = now
        self.created_at = now
        self.hit_count = 0
        self.retain = 0.0
        self.end_tokens = (parent.end_tokens if parent is not None else 0) + n_tokens(label)
        self.serial = serial
        self.heap_version = 0
        self.alive = True
        self.waiting: object | None = None

    @property
    def n_tokens(self) -> int:
        return self.end_tokens - (self.parent.end_tokens if self.parent is not None else 0)

    def __repr__(self) -> str:
        return (
            f"Node(#{self.serial}, tokens={self.n_tokens}, blocks={self.block_ids}, "
            f"lock={self.lock_ref}, t={self.last_access})"
        )


@dataclass
class MatchResult:
    """Longest-prefix match from token 0 (rule 3.6.2)."""

    matched_tokens: int  # raw match, token-granular, before any cap or truncation
    block_ids: list[int]  # whole blocks usable for ``min(matched, limit)`` tokens
    node: Node  # deepest node of the usable path (the root when nothing is usable)
    tail_tokens: int = 0  # tokens of the capped match past the last whole block (< B)
    tail_block_id: int | None = None  # tree block holding those tail tokens (CoW source)

    @property
    def hit_tokens(self) -> int:
        """Tokens served by whole blocks (block-aligned truncation, F18)."""
        return self.node.end_tokens


@dataclass
class InsertResult:
    """Where an insert ended and which of the caller's blocks the tree did not adopt."""

    node: Node  # deepest node of the inserted path (lock it to pin the path)
    adopted_block_ids: list[int] = field(default_factory=list)  # now owned by the tree
    duplicate_block_ids: list[int] = field(default_factory=list)  # same content already held


class RadixTree:
    """Radix tree of whole KV blocks with pinned paths and strategy-ordered leaf eviction."""

    def __init__(
        self,
        block_size: int,
        pool: CachePool | None = None,
        eviction: str | EvictionStrategy = "lru",
        content_priority: dict[ContentId, float] | None = None,
    ):
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a whole number >= 1, got {block_size!r}")
        self.block_size = block_size
        self.pool = pool
        self.strategy = get_strategy(eviction)
        #: the strategy's ranking, bound once (called on every push); a plug-in's checked
        #: for NaN as each rank enters (``_checked_key``: O(len(rank)) per rank)
        self._key = _checked_key(self.strategy)
        self._rank = self._key
        #: the key is a shipped one (never refused): a refusal's undo needs no saving
        self._trusted = self._key is self.strategy.key
        self.retain_biased = False  # a retain priority was set: ranks lead with it
        self._same_rank = self.strategy.same_rank_blocks
        self.merge_extensions = self.strategy.merges_extensions
        self.content_priority: dict[ContentId, float] = dict(content_priority or {})
        self._serial = 0
        self.root = Node(None, (), [], 0.0, self._next_serial())
        self.root.lock_ref = 1  # the root is never evicted
        self._heap: list = []
        #: one entry logically in the heap but not yet pushed: the last partly trimmed victim,
        #: which the next eviction usually takes back at once (``heappushpop``, no sifting)
        self._held: tuple | None = None
        self._blocks: set[int] = set()
        self.n_nodes = 0  # excluding the root
        self.total_blocks = 0
        self.evictable_blocks = 0
        self.evicted_blocks = 0  # cumulative
        self.evicted_nodes = 0  # cumulative (nodes removed entirely)
        #: called with a node whose ``waiting`` is set when a walk (match, insert) reaches
        #: it, before the walk reads it: the owner joins the blocks waiting for it
        #: (``extend_late``); None while no node ever waits (the tree alone, trace replay)
        self.join_late: Callable[[Node], None] | None = None
        #: check the strategy's ``same_rank_blocks`` at every trim of more than one block
        #: (``_check_same_rank``: a rank per block trimmed, so for checking runs only); the
        #: radix index sets it from its first ``check`` (``engine.check_invariants``)
        self.check_ranks = False

    # ------------------------------------------------------------------ queries
    def _next_serial(self) -> int:
        self._serial += 1
        return self._serial

    def owns(self, block_id: int) -> bool:
        """Whether a block id is held by some node."""
        return block_id in self._blocks

    @property
    def protected_blocks(self) -> int:
        """Blocks on locked paths (cannot be evicted now)."""
        return self.total_blocks - self.evictable_blocks

    def priority_of(self, node: Node) -> float:
        """Zone priority of the content in a node's last block (default 0)."""
        return self.content_priority.get(node.label[-1][0], 0) if node.label else 0

    def set_priorities(self, priorities: dict[ContentId, float], rebuild: bool = True) -> None:
        """Add/replace content priorities (for the ``priority`` strategy).

        Re-ranking the dormant leaves is O(nodes); pass ``rebuild=False`` when the ids are
        new to the tree (priorities given before their content is cached).
        """
        if not rebuild:
            self.content_priority.update(priorities)
            return
        known = self.content_priority
        before = {c: known[c] for c in priorities if c in known}
        known.update(priorities)
        try:
            self._rebuild_heap()
        except PluginError:  # a refused rank: the priorities as they were
            for c in priorities:
                if c in before:
                    known[c] = before[c]
                else:
                    del known[c]
            raise

    def set_retain(self, node: Node, priority: float) -> None:
        """Give the path to ``node`` (the context of a sequence about to be released) the
        retain priority ``priority`` (vLLM #51428's Retain): dormant leaves of a lower
        priority are evicted first, the strategy's order within one priority. Until a
        priority other than 0 is set the ranks are the strategy's own (nothing changes)."""
        if priority == 0 and not self.retain_biased:
            return
        if not self.retain_biased:
            self.retain_biased = True
            key = self._key
            self._rank = lambda n, tree: (n.retain, *key(n, tree))
            try:
                self._rebuild_heap()
            except PluginError:  # a refused rank: the ranks and the heap as they were
                self.retain_biased, self._rank = False, key
                raise
        while node is not self.root:
            # a dormant leaf among them is re-ranked when it is pushed: only the first node
            # can be one (the others are its ancestors), so a refusal changed nothing else
            old, node.retain = node.retain, priority
            if node.lock_ref == 0 and not node.children:
                try:
                    self._push(node)
                except PluginError:
                    node.retain = old
                    raise
            node = node.parent

    def iter_nodes(self):
        """All nodes except the root, parents before children."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    # ------------------------------------------------------------------ walking
    def _walk(self, segs: Segments):
        """Follow ``segs`` from the root: (fully matched nodes, partial node, its matched)."""
        bs = self.block_size
        node, path = self.root, []
        qi = qoff = 0
        while qi < len(segs):
            key, _, _ = take(segs, qi, qoff, bs)
            child = node.children.get(key)
            if child is None:
                return path, *self._best_partial(node, segs, qi, qoff)
            if child.waiting is not None:
                self._join(child)
            m, qi2, qoff2 = match_at(segs, qi, qoff, child.label)
            if m < child.n_tokens:
                return path, child, m
            path.append(child)
            node, qi, qoff = child, qi2, qoff2
        return path, None, 0

    def _best_partial(self, node: Node, segs: Segments, qi: int, qoff: int):
        """Token-granular match inside a first block that no child holds whole."""
        cid, start, _ = segs[qi]
        best, best_m = None, 0
        for child in node.by_first.get((cid, start + qoff), ()):
            if child.waiting is not None:
                self._join(child)
            m = match_at(segs, qi, qoff, child.label, limit=self.block_size)[0]
            if m > best_m:
                best, best_m = child, m
        return best, best_m

    def match(
        self, content, now: float | None = None, limit_tokens: int | None = None
    ) -> MatchResult:
        """Longest prefix of ``content`` held by the tree (rule 3.6.2).

        ``matched_tokens`` is the raw, token-granular match. The usable part is capped at
        ``limit_tokens`` (the caller's "at least one token computed" rule) and then cut to
        whole blocks; the node where it ends is split if needed so the caller can lock it.
        With ``now`` the usable path is touched (last access, hit count).
        """
        return self.match_normal(segments(content), now, limit_tokens)

    def match_normal(
        self, segs: Segments, now: float | None = None, limit_tokens: int | None = None
    ) -> MatchResult:
        """``match`` of content already in normal form (what ``spans.segments`` returns),
        without normalising it again: a long prompt's spans are walked once, not twice."""
        path, partial, partial_m = self._walk(segs)
        raw = (path[-1].end_tokens if path else 0) + partial_m
        capped = raw if limit_tokens is None else max(0, min(raw, limit_tokens))
        want = capped // self.block_size
        chain = path + ([partial] if partial is not None else [])
        ids: list[int] = []
        end = self.root
        tail_block = None
        for nd in chain:
            nb = len(nd.block_ids)
            need = want - len(ids)
            if need >= nb:
                ids.extend(nd.block_ids)
                end = nd
                continue
            if capped % self.block_size:
                tail_block = nd.block_ids[need]
            if need > 0:
                end = self._split(nd, need * self.block_size)
                ids.extend(end.block_ids)
            break
        if now is not None:
            self._touch(end, now, hit=True)
        return MatchResult(raw, ids, end, capped - want * self.block_size, tail_block)

    # ------------------------------------------------------------------ mutation
    def _attach(self, parent: Node, child: Node) -> None:
        first = child.label[0]
        parent.children[slice_tokens(child.label, 0, self.block_size)] = child
        parent.by_first.setdefault((first[0], first[1]), []).append(child)

    def _detach(self, child: Node) -> None:
        parent = child.parent
        del parent.children[slice_tokens(child.label, 0, self.block_size)]
        first = child.label[0]
        lst = parent.by_first[(first[0], first[1])]
        lst.remove(child)
        if not lst:
            del parent.by_first[(first[0], first[1])]

    def _split(self, node: Node, at_tokens: int) -> Node:
        """Cut ``node`` after ``at_tokens`` (a block multiple); return the new upper node.

        The original object keeps the lower part, so callers holding it (a lock) stay valid.
        """
        nb = at_tokens // self.block_size
        parent = node.parent
        self._detach(node)
        upper = Node(
            parent,
            slice_tokens(node.label, 0, at_tokens),
            node.block_ids[:nb],
            node.created_at,
            self._next_serial(),
        )
        upper.last_access, upper.hit_count, upper.lock_ref, upper.retain = (
            node.last_access,
            node.hit_count,
            node.lock_ref,
            node.retain,
        )
        node.label = slice_tokens(node.label, at_tokens, node.n_tokens)
        node.block_ids = node.block_ids[nb:]
        node.parent = upper
        self._attach(parent, upper)
        self._attach(upper, node)
        self.n_nodes += 1
        return upper

    def touch(self, node: Node, now: float, hit: bool = True) -> None:
        """Mark the path to ``node`` used at ``now`` (a hit also counts for LFU)."""
        self._touch(node, now, hit)

    def unlocked_blocks_on_path(self, node: Node) -> int:
        """Blocks on the path to ``node`` that locking it would make unevictable."""
        total = 0
        while node is not None and node.lock_ref == 0:
            total += len(node.block_ids)
            node = node.parent
        return total

    def _touch(self, node: Node, now: float, hit: bool) -> None:
        leaf, root = node, self.root
        push = leaf is not root and leaf.lock_ref == 0 and not leaf.children
        if push and not self._trusted:  # a plug-in's rank may be refused: undo the stamps
            self._touch_checked(leaf, now, hit)
            return
        while node is not root:
            node.last_access = now
            if hit:
                node.hit_count += 1
            node = node.parent
        if push:
            self._push(leaf)  # its rank changed

    def _touch_checked(self, leaf: Node, now: float, hit: bool) -> None:
        """``_touch`` of a dormant leaf under a plug-in's key: a refused rank
        (``PluginError``) puts the path's stamps back (the leaf keeps its heap entry)."""
        saved = []
        node = leaf
        while node is not self.root:
            saved.append((node, node.last_access, node.hit_count))
            node.last_access = now
            if hit:
                node.hit_count += 1
            node = node.parent
        try:
            self._push(leaf)
        except PluginError:
            for node, last_access, hit_count in saved:
                node.last_access, node.hit_count = last_access, hit_count
            raise

    def insert(
        self, content, block_ids: list[int], now: float, start: Node | None = None
    ) -> InsertResult:
        """Insert whole blocks ``content`` held in ``block_ids`` (one id per block).

        Content already in the tree keeps the tree's blocks: the caller's ids at those
        positions are reported as duplicates (if they differ) and not adopted. The rest
        becomes a new leaf owning the caller's ids. Every node on the path is touched.
        With ``start`` (a live node), ``content`` continues the path that ends there.
        """
        segs = segments(content)
        bs = self.block_size
        total = n_tokens(segs)
        if total != len(block_ids) * bs:
            raise ValueError(f"insert: {total} tokens is not {len(block_ids)} whole blocks of {bs}")
        if start is not None and not start.alive:
            raise ValueError(f"insert: start {start!r} is no longer in the tree")
        node, pos, qi, qoff = start or self.root, 0, 0, 0
        dup: list[int] = []
        while pos < total:
            key, _, _ = take(segs, qi, qoff, bs)
            child = node.children.get(key)
            if child is None:
                break
            if child.waiting is not None:
                self._join(child)
            m = match_at(segs, qi, qoff, child.label)[0]
            if m < child.n_tokens:
                child = self._split(child, (m // bs) * bs)
            b0 = pos // bs
            dup.extend(b for b, t in zip(block_ids[b0:], child.block_ids, strict=False) if b != t)
            pos += child.n_tokens
            qi, qoff = advance(segs, qi, qoff, child.n_tokens)
            node = child
        adopted = list(block_ids[pos // bs :])
        if adopted:
            clash = self._blocks.intersection(adopted)
            if clash:
                raise ValueError(f"insert: blocks {sorted(clash)} are already in the tree")
            new = Node(
                node, slice_tokens(segs, pos, total), list(adopted), now, self._next_serial()
            )
            self._attach(node, new)
            self._blocks.update(adopted)
            self.n_nodes += 1
            self.total_blocks += len(adopted)
            self.evictable_blocks += len(adopted)
            try:
                self._touch(new, now, hit=False)
            except PluginError:  # a refused rank: the new leaf out again (splits made on
                self._detach(new)  # the way stay: the same blocks, the same content)
                new.alive = False
                self._blocks.difference_update(adopted)
                self.n_nodes -= 1
                self.total_blocks -= len(adopted)
                self.evictable_blocks -= len(adopted)
                raise
            return InsertResult(new, adopted, dup)
        self._touch(node, now, hit=False)
        return InsertResult(node, adopted, dup)

    def can_extend(self, node: Node) -> bool:
        """Whether ``extend`` may grow ``node`` in place: a live leaf other than the root,
        pinned exactly once (by the caller), under a strategy that ``merges_extensions``."""
        return (
            self.merge_extensions
            and node.lock_ref == 1
            and not node.children
            and node.alive
            and node is not self.root
        )

    def extend(self, node: Node, content: Segments, block_ids: list[int], now: float) -> None:
        """Append whole blocks ``content`` (normal segments, one id per block) to the end of
        ``node`` (``can_extend`` must hold) and touch the path: what ``insert(content,
        block_ids, now, start=node)`` would cache, as part of ``node`` instead of a child.
        The tree now owns ``block_ids`` (all adopted: a leaf has nothing below to match)."""
        if not self.try_extend(node, content, block_ids, now):
            raise ValueError(f"extend: {node!r} is not a leaf pinned once")

    def try_extend(self, node: Node, content: Segments, block_ids: list[int], now: float) -> bool:
        """``extend`` where ``can_extend`` holds; False (nothing changed) where it does not
        (one test of the node for a caller that would otherwise insert)."""
        if not self.can_extend(node):
            return False
        self._grow(node, content, block_ids)
        root, up = self.root, node
        while up is not root:  # the touch (a pinned node: no heap entry to refresh)
            up.last_access = now
            up = up.parent
        return True

    def extend_late(
        self, node: Node, content: Segments, block_ids: list[int], filled_s: float
    ) -> None:
        """The ``extend`` of blocks that filled at ``filled_s`` (the latest of them), made
        now, from a node marked ``waiting`` (its mark is cleared): the path keeps, node by
        node, the later of its own stamp and ``filled_s``. Stamps only grow and every
        extension touches the whole path, so this leaves what the extensions made at their
        fill times leave, whatever touched the path since (the nodes a split put on it
        included). ``can_extend`` must hold: nothing but its owner changed the node."""
        if not self.can_extend(node):
            raise ValueError(f"extend_late: {node!r} is not a leaf pinned once")
        node.waiting = None
        self._grow(node, content, block_ids)
        root, up = self.root, node
        while up is not root:
            if up.last_access < filled_s:
                up.last_access = filled_s
            up = up.parent

    def path_not_after(self, node: Node, now: float) -> bool:
        """Whether no node on the path to ``node`` carries a stamp later than ``now`` (then,
        while stamps only grow from ``now`` on, ``extend_late`` leaves what extensions at
        their fill times leave)."""
        root = self.root
        while node is not root:
            if node.last_access > now:
                return False
            node = node.parent
        return True

    def _grow(self, node: Node, content: Segments, block_ids: list[int]) -> None:
        """Append whole blocks to a leaf pinned once (``extend``'s change, no touch)."""
        total = n_tokens(content)
        if total != len(block_ids) * self.block_size or not block_ids:
            raise ValueError(
                f"extend: {total} tokens is not {len(block_ids)} whole blocks of {self.block_size}"
            )
        blocks = self._blocks
        if not blocks.isdisjoint(block_ids):
            clash = sorted(blocks.intersection(block_ids))
            raise ValueError(f"extend: blocks {clash} are already in the tree")
        node.label = join(node.label, content)
        node.block_ids.extend(block_ids)
        node.end_tokens += total
        blocks.update(block_ids)
        self.total_blocks += len(block_ids)  # pinned: not evictable

    def wait(self, node: Node, record: object) -> None:
        """Mark a leaf pinned once (``can_extend``) as having full blocks waiting to join it
        (``record``, its owner's): a walk that reaches it calls ``join_late`` first."""
        if self.join_late is None or not self.can_extend(node):
            raise ValueError(f"wait: {node!r} is not a leaf pinned once, or nobody joins it")
        node.waiting = record

    def _join(self, node: Node) -> None:
        join_late = self.join_late
        if join_late is None:
            raise InvariantError(f"{node!r} waits but the tree has no join_late")
        join_late(node)
        if node.waiting is not None:
            raise InvariantError(f"join_late left {node!r} waiting")

    def lock(self, node: Node) -> None:
        """Pin ``node`` and its ancestors (a running request's path, rule 3.6.6)."""
        if not node.alive:
            raise ValueError(f"lock: {node!r} is no longer in the tree")
        while node is not None:
            if node.lock_ref == 0:
                self.evictable_blocks -= len(node.block_ids)
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: Node) -> None:
        """Release one pin on ``node``'s path; leaves that become dormant are candidates."""
        while node is not None:
            if node.lock_ref <= 0 or (node is self.root and node.lock_ref <= 1):
                raise ValueError(f"unlock: {node!r} is not locked")
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.evictable_blocks += len(node.block_ids)
                if not node.children:  # only the first node (the others are its ancestors)
                    try:
                        self._push(node)
                    except PluginError:  # a refused rank: still pinned, as it was
                        node.lock_ref += 1
                        self.evictable_blocks -= len(node.block_ids)
                        raise
            node = node.parent

    # ------------------------------------------------------------------ eviction
    def _push(self, node: Node, hold: bool = False) -> None:
        rank = self._rank(node, self)  # first: a refused rank leaves the heap as it was
        node.heap_version += 1
        entry = ((*rank, -node.end_tokens, node.serial), node.heap_version, node)
        if hold:
            entry, self._held = self._held, entry
            if entry is None:
                return
        heapq.heappush(self._heap, entry)
        if len(self._heap) > 4 * self.n_nodes + 256:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        # every rank first: a refused one leaves the heap and the versions as they were
        keys = [
            ((*self._rank(node, self), -node.end_tokens, node.serial), node)
            for node in self.iter_nodes()
            if node.lock_ref == 0 and not node.children
        ]
        heap = []
        for key, node in keys:
            node.heap_version += 1
            heap.append((key, node.heap_version, node))
        heapq.heapify(heap)
        self._held = None
        self._heap = heap

    def _pop_victim(self) -> tuple | None:
        """The best valid candidate's heap entry ``(key, version, node)``, taken out."""
        heap = self._heap
        held, self._held = self._held, None
        while held is not None or heap:
            if held is not None:
                entry = heapq.heappushpop(heap, held)
                held = None
            else:
                entry = heapq.heappop(heap)
            node = entry[2]
            if (
                node.alive
                and entry[1] == node.heap_version
                and node.lock_ref == 0
                and not node.children
            ):
                return entry
        return None

    def _trim(self, node: Node, n_blocks: int) -> list[int]:
        """Drop the last ``n_blocks`` blocks of a dormant leaf; remove it when empty. A
        refused rank (``PluginError``, a plug-in's, at the push that follows) puts the
        leaf back as it was (its heap entry is the caller's to restore)."""
        blocks, label, end_tokens = node.block_ids, node.label, node.end_tokens
        keep = len(blocks) - n_blocks
        ids = blocks[keep:]
        self._blocks.difference_update(ids)
        self.total_blocks -= n_blocks
        self.evictable_blocks -= n_blocks
        self.evicted_blocks += n_blocks
        whole = n_blocks == len(blocks)
        parent = node.parent
        try:
            if whole:
                self._detach(node)
                node.alive = False
                node.block_ids = []
                self.n_nodes -= 1
                self.evicted_nodes += 1
                if parent is not self.root and parent.lock_ref == 0 and not parent.children:
                    self._push(parent)  # the cascade: the parent is a leaf now
            else:
                del blocks[keep:]
                node.label = drop_last(label, n_blocks * self.block_size)
                node.end_tokens -= n_blocks * self.block_size
                self._push(node, hold=True)
        except PluginError:
            if whole:
                self._attach(parent, node)
                node.alive = True
                node.block_ids = blocks
                self.n_nodes += 1
                self.evicted_nodes -= 1
            else:
                blocks.extend(ids)
                node.label, node.end_tokens = label, end_tokens
            self._blocks.update(ids)
            self.total_blocks += n_blocks
            self.evictable_blocks += n_blocks
            self.evicted_blocks -= n_blocks
            raise
        ids.reverse()  # deepest first
        return ids

    def _peek_key(self) -> tuple | None:
        """Key of the best valid candidate left in the heap (stale tops are dropped)."""
        heap = self._heap
        if self._held is not None:
            heapq.heappush(heap, self._held)
            self._held = None
        while heap:
            key, version, node = heap[0]
            if (
                node.alive
                and version == node.heap_version
                and node.lock_ref == 0
                and not node.children
            ):
                return key
            heapq.heappop(heap)
        return None

    def _blocks_before_rival(self, node: Node, rival: tuple | None) -> int:
        """How many of a victim's trailing blocks go before the next candidate's first.

        Bounded by the strategy (``same_rank_blocks``: trailing blocks that keep its rank)
        and, when the rival has the same rank, by depth: blocks deeper than the rival's end
        go first (equal depth: the older node first), so ties are deepest first block by
        block across leaves.
        """
        bs = self.block_size
        take = len(node.block_ids)
        same = self._same_rank(node, self)
        if same.__class__ is not int:  # a numpy integer is one too; not a bool or a float
            same = _whole(same, self.strategy.name, node)
        if same < 1:  # 0 would trim nothing, and evict spin
            raise _bad_same_rank(same, self.strategy.name, node)
        take = min(take, same)
        if rival is None:
            return take
        base = tuple(self._rank(node, self))
        k = len(base)
        if rival[:k] != base:
            return take
        rival_end, rival_serial = -rival[k], rival[k + 1]
        deeper = max(0, (node.end_tokens - rival_end) // bs)
        if (node.end_tokens - rival_end) % bs == 0 and node.serial < rival_serial:
            deeper += 1  # a block at the rival's depth: the older node's goes first
        return max(1, min(take, deeper))

    def evict(self, n_blocks: int) -> list[int]:
        """Free up to ``n_blocks`` dormant blocks, leaves first in strategy order.

        A victim leaf loses blocks from its end, only as many as rank before the next
        candidate. Returns the freed ids (in eviction order) after handing them to the pool.
        """
        freed: list[int] = []
        while len(freed) < n_blocks:
            entry = self._pop_victim()
            if entry is None:
                break
            node = entry[2]
            take = n_blocks - len(freed)
            if take > 1:  # one block: the victim's last, whatever ranks next (a victim
                # gives at least one block before any rival, see _blocks_before_rival)
                try:
                    take = min(take, self._blocks_before_rival(node, self._peek_key()))
                    if take > 1 and self.check_ranks:
                        self._check_same_rank(node, take)
                except PluginError:  # a strategy's broken promise: the victim back in
                    heapq.heappush(self._heap, entry)  # the heap and the blocks freed so
                    self._release(freed)  # far to the pool, so the tree and pool stay whole
                    raise
            try:
                freed.extend(self._trim(node, take))
            except PluginError:  # a refused rank: the victim whole again, its entry back
                heapq.heappush(self._heap, entry)  # in the heap, the blocks freed so far
                self._release(freed)  # to the pool
                raise
        self._release(freed)
        return freed

    def _release(self, freed: list[int]) -> None:
        if freed and self.pool is not None:
            self.pool.release_cached(freed)

    def _check_same_rank(self, node: Node, take: int) -> None:
        """What ``evict(n)`` relies on when it trims ``take`` blocks of a victim at once:
        the victim keeps its rank while its first ``take - 1`` trailing blocks go, as
        ``evict(1)`` block by block would re-rank it (the strategy's ``same_rank_blocks``).
        Raises ``PluginError`` naming the strategy where a rank changes earlier (a
        plug-in whose ``same_rank_blocks`` says too many). The ranks are taken on a copy
        of the node, trimmed; the tree is not changed."""
        base = self._rank(node, self)
        bs = self.block_size
        probe = copy.copy(node)
        for i in range(1, take):
            probe.block_ids = node.block_ids[:-i]
            probe.label = drop_last(node.label, i * bs)
            probe.end_tokens = node.end_tokens - i * bs
            rank = self._rank(probe, self)
            if rank != base:
                raise PluginError(
                    f"eviction strategy {self.strategy.name!r}: same_rank_blocks says "
                    f"{self._same_rank(node, self)} trailing blocks of {node!r} share its "
                    f"rank {base!r}, but it ranks {rank!r} once {i} of them are evicted: "
                    "evict(n) would not free what evict(1) n times frees "
                    "(docs/prefix_cache.md, adding a strategy)"
                )

    def evict_path(self, node: Node) -> list[int]:
        """Free the dormant chain ending at ``node``: while the node is alive, not the root,
        unlocked and childless, drop all its blocks and go up to its parent. Nodes other
        sequences pin (``lock_ref > 0``) or that still have children stay. Returns the
        freed ids (deepest first) after handing them to the pool, as ``evict`` does."""
        freed: list[int] = []
        while node.alive and node is not self.root and node.lock_ref == 0 and not node.children:
            parent = node.parent
            try:
                freed.extend(self._trim(node, len(node.block_ids)))
            except PluginError:  # a refused rank: that node whole again (its heap entry
                self._release(freed)  # never left), the blocks freed so far to the pool
                raise
            node = parent
        self._release(freed)
        return freed

    # ------------------------------------------------------------------ checking
    def block_owner(self) -> dict[int, Node]:
        """{block id: owning node}; raises InvariantError if a block is owned twice."""
        owner: dict[int, Node] = {}
        for node in self.iter_nodes():
            for b in node.block_ids:
                if b in owner:
                    raise InvariantError(f"block {b} owned by {owner[b]!r} and {node!r}")
                owner[b] = node
        return owner

    def check_invariants(self) -> None:
        """Raise InvariantError naming the first broken invariant (see module docstring)."""
        bs = self.block_size
        owner = self.block_owner()
        if set(owner) != self._blocks:
            raise InvariantError("block set out of sync with the nodes")
        if len(owner) != self.total_blocks:
            raise InvariantError(f"total_blocks {self.total_blocks} != {len(owner)} owned")
        evictable = count = 0
        entries = self._heap if self._held is None else [*self._heap, self._held]
        live_heap = {id(n) for _, v, n in entries if v == n.heap_version}
        for node in [self.root, *self.iter_nodes()]:
            self._check_node(node, bs, live_heap)
            count += node is not self.root
            if node.lock_ref == 0:
                evictable += len(node.block_ids)
        if count != self.n_nodes:
            raise InvariantError(f"n_nodes {self.n_nodes} != {count}")
        if evictable != self.evictable_blocks:
            raise InvariantError(f"evictable_blocks {self.evictable_blocks} != {evictable}")

    def _check_node(self, node: Node, bs: int, live_heap: set[int]) -> None:
        if not node.alive:
            raise InvariantError(f"{node!r} is dead but reachable")
        if segments(node.label) != node.label:
            raise InvariantError(f"{node!r} label not normal")
        if not n_tokens(node.label) == len(node.block_ids) * bs == node.n_tokens:
            raise InvariantError(f"{node!r}: label is not its blocks")
        if node is not self.root and not node.block_ids:
            raise InvariantError(f"{node!r} is empty")
        if node.lock_ref < sum(c.lock_ref for c in node.children.values()):
            raise InvariantError(f"{node!r}: lock_ref below its children's")
        for key, child in node.children.items():
            if child.parent is not node:
                raise InvariantError(f"{child!r}: wrong parent")
            if key != slice_tokens(child.label, 0, bs):
                raise InvariantError(f"{child!r}: wrong key")
            first = child.label[0]
            if child not in node.by_first.get((first[0], first[1]), []):
                raise InvariantError(f"{child!r}: missing from the first-token index")
        if sum(map(len, node.by_first.values())) != len(node.children):
            raise InvariantError(f"{node!r}: stale first-token index")
        if node.waiting is not None and not self.can_extend(node):
            raise InvariantError(f"{node!r} waits but is not a leaf pinned once")
        if node is not self.root and node.lock_ref == 0 and not node.children:
            if id(node) not in live_heap:
                raise InvariantError(f"dormant leaf {node!r} missing from the heap")


def _checked_key(strategy: EvictionStrategy) -> Callable[[Node, RadixTree], tuple]:
    """The strategy's bound ``key``: as it is for a shipped one (``is_shipped_key``), else
    wrapped to refuse a rank holding NaN (NaN orders with nothing, so the heap would evict
    in another order, silently): ``PluginError`` naming the strategy."""
    key = strategy.key
    if is_shipped_key(key):
        return key
    name = strategy.name

    def checked(node: Node, tree: RadixTree) -> tuple:
        rank = key(node, tree)
        try:
            nan = any(v != v for v in rank)
        except (TypeError, ValueError):  # not iterable, or an element with no truth value
            nan = True
        if nan:
            raise PluginError(
                f"eviction strategy {name!r}: key returned {rank!r} for {node!r}; a rank is "
                "a tuple of comparable values, none NaN (NaN orders with nothing: the "
                "tree would evict in another order)"
            )
        return rank

    return checked


def _whole(value: object, strategy: str, node: Node) -> int:
    """A strategy's ``same_rank_blocks`` as an int: any integer type but a bool."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise _bad_same_rank(value, strategy, node)


def _bad_same_rank(value: object, strategy: str, node: Node) -> PluginError:
    return PluginError(
        f"eviction strategy {strategy!r}: same_rank_blocks returned {value!r} for {node!r}; "
        "it must be a whole number >= 1 (its last block always shares its rank)"
    )
