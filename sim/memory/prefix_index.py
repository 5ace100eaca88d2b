"""The seam between the paged allocator and a prefix cache: ``PrefixIndex`` and ``PrefixHit``.

Responsibility: list every call ``PagedAllocator`` makes on a prefix index, with types, so a
prefix cache can be written from this page alone. The paged core keeps the block tables,
refcounts, copy-on-write, the books and the public allocator contract (misuse checks, token
counts, lineage); the index decides which cached blocks a new sequence may share, which
full blocks become reusable as they fill, and which dormant blocks to give back under
pressure. ``sim.prefix`` holds the two indexes (the radix tree, vLLM V1's hashed blocks)
and the allocator kinds that compose them with the core; memory never imports them.

Calls, per operation (hooks run only when the operation succeeds unless said):

    allocate        match -> (make_room) -> admitted, or cancel if no room was made
                    (a hybrid model's side blocks are counted in ``match``'s fit check,
                    ``extra_blocks``, before anything is taken)
    append          check_content (before any change) -> (make_room) -> appended
    decode runs     appends_in_bulk: may a run's appends come one per sequence?
                    publishes_apart: may a run evict before a prefill's publication?
    publication     hold_back (before an allocate or append whose KV is not there yet),
                    unhold (that operation missed), publish (its KV is there: cache it)
    fork            forked
    free            releasing -> released(uncache=False); free_uncached: releasing ->
                    released(uncache=True)
    queries         can_allocate, evictable_blocks, excess_tokens, prefix_metrics
    clock, books    set_time, check
    observers       subscribe (a ``PrefixListener``: told what becomes and stops being
                    cached, e.g. a cluster's prefix directory; memory never calls it)

Invariant: the index never changes a refcount or a block table (the core does) and never
calls the core; it may change which blocks the pool keeps cached (retain/unretain, hashes)
and leaves the pool's books balanced; a miss (``match`` returns None, or ``cancel``)
leaves the cached content as it was, up to content the index held back and joins when
something reads it (the radix index's waiting fills: a probe's walk may join them, which
caches what filling would have cached already).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sim.memory.block_pool import PagedPool
from sim.memory.metrics import PrefixMetrics


@dataclass(frozen=True, slots=True)
class PrefixHit:
    """What an index found for a new sequence (``PrefixIndex.match``)."""

    block_ids: list[int]  # cached whole blocks the sequence will map, logical block 0 first
    hit_tokens: int  # prompt tokens those blocks serve: len(block_ids) * block_size
    state: object = None  # the index's own lookup state, handed back to admitted/cancel
    #: blocks beyond the prompt's table that the fit check counted (``match``'s
    #: ``extra_blocks``: a hybrid model's side blocks of the hit, the most over the
    #: tokens the admission may serve); the core makes room for them with the table's
    extra_blocks: int = 0


class PrefixListener(Protocol):
    """Told which full blocks a prefix index holds as reusable content (installed by
    ``PrefixIndex.subscribe``). A *key* names one cached block's content and position in
    the index's own terms (the radix tree's block id, the hash index's chained block
    hash): the same content from token 0 while it stays cached. The index calls it only
    when a listener is installed (no listener: one attribute check)."""

    def cached(self, parent: Hashable | None, keys: Sequence[Hashable], content: Any) -> None:
        """Full blocks ``keys`` (in order: each continues the one before) are cached and
        hold ``content`` (normal segments, ``len(keys) * block_size`` tokens); the first
        continues the cached block ``parent`` (None: it starts at token 0). A key already
        cached may be reported again (another copy of the same content): it is not new."""

    def evicted(self, keys: Sequence[Hashable]) -> None:
        """These keys are no longer cached (each reported once, when its last copy goes)."""


class PrefixListeners:
    """Several ``PrefixListener``s on one index, each told every report in the order they
    subscribed (``PagedAllocator.subscribe_prefix``: an index holds one listener, so a
    second subscriber, e.g. the prefix-churn count beside a cluster's directory, would
    silently replace the first)."""

    __slots__ = ("listeners",)

    def __init__(self, listeners: Sequence[PrefixListener]) -> None:
        self.listeners = tuple(listeners)

    def cached(self, parent: Hashable | None, keys: Sequence[Hashable], content: Any) -> None:
        for listener in self.listeners:
            listener.cached(parent, keys, content)

    def evicted(self, keys: Sequence[Hashable]) -> None:
        for listener in self.listeners:
            listener.evicted(keys)


class PrefixIndex(Protocol):
    """A prefix cache over a paged pool, as ``PagedAllocator`` calls it (module docstring)."""

    #: the pool the core takes blocks from: the one the index was given, or its own
    pool: PagedPool
    #: when the engine publishes held-back KV (``Allocator.publish_rule``): "scheduled"
    #: (vLLM V1) or "computed" (SGLang)
    publish_rule: str

    @property
    def evictable_blocks(self) -> int:
        """Dormant blocks ``make_room`` could free (0 when cached blocks are already free)."""

    @property
    def excess_tokens(self) -> int:
        """Tokens the core's fork lineage counts twice because unrelated sequences map the
        same cached block; ``useful tokens = lineage distinct - excess``."""

    def match(
        self, n_tokens: int, content: Any, extra_blocks: Callable[[int], int] | None = None
    ) -> PrefixHit | None:
        """Look up a new ``n_tokens`` prompt (``content`` may be None: nothing to match) and
        pin what it found; None = it cannot fit (a miss decided before any change). Misuse
        (content of another length) raises ``AllocatorError``. ``extra_blocks(served)``
        (given by the core for a hybrid model, called before anything is pinned): the
        blocks the admission takes beside the table when its hit serves ``served``
        tokens; the index counts the most of them over the tokens it may serve (with a
        partial block it may copy, both) with the table's new blocks in its fit check and
        returns that count in ``PrefixHit.extra_blocks``, so a sequence whose blocks do
        not all fit changes nothing (vLLM V1's ``allocate_slots`` counts every group's
        blocks before it takes any). Optional: the core passes it (by keyword) only to an
        index whose ``match`` names it as a parameter (decided when composed; ``**kwargs``
        alone is not enough); for one that does not, or counts fewer, the core makes room
        for its own count of the side blocks of the hit returned, and for an index that
        does not take it, the most over the hit plus a partial block it may copy (the copy
        moves the first step); a miss then cancels, nothing changed."""

    def cancel(self, hit: PrefixHit) -> None:
        """The core could not make room after ``match``: unpin what it pinned."""

    def make_room(self, short_blocks: int) -> bool:
        """Free exactly ``short_blocks`` dormant blocks into the pool, or nothing and False."""

    def admitted(self, seq_id: Hashable, n_tokens: int, table: list[int], hit: PrefixHit) -> int:
        """``seq_id``'s table (the hit's blocks, then new ones) is installed: cache its full
        blocks and record the hit. Return the tokens copied from a cached partial block into
        its private tail (served from cache too; the core counts the copy), usually 0.
        ``table`` is the core's own list for the sequence's whole life: the index may keep
        it and read it later (the core only appends to it and may replace its last,
        partial block on a copy-on-write; an entry of a full block never changes)."""

    def check_content(self, content: Any, n_tokens: int, op: str) -> Any:
        """``content`` of ``n_tokens`` in the index's normal form; ``AllocatorError`` if not."""

    def appended(
        self, seq_id: Hashable, tokens: int, n_tokens: int, content: Any, table: list[int]
    ) -> None:
        """``n_tokens`` (``content`` from ``check_content``, or None: unknown) follow
        ``tokens``; ``table`` already has their blocks. Cache the blocks that became full
        (now, or later from the kept ``table``: see ``admitted``)."""

    def appends_in_bulk(self, seq_ids: Iterable[Hashable]) -> bool:
        """Whether a decode run's appends to these live sequences may reach ``appended``
        one call per sequence (all its tokens of the run, after ``set_time`` of its last
        block fill) instead of one call per new block and per block fill in step order,
        leaving the same cache (blocks aside: the core hands each sequence its free blocks
        in one go). An index says True only when the order cannot matter: no eviction
        between appends but for room, and each sequence's new full blocks join only its
        own private content; the core then makes the whole run's room in one
        ``make_room``, which, when it succeeds, frees the blocks ``make_room(a)`` then
        ``make_room(b)`` would, in that order. False is always correct."""

    def publishes_apart(self, seq_id: Hashable) -> bool:
        """Whether publishing the rest of live ``seq_id``'s held-back content can only
        cache blocks of its own: nothing cached now, evictable or not, that it would
        share and pin (the radix index: its next full block is in no child of its node).
        The engine then lets a run of steps evict while that prefill's KV waits to be
        published (``KVManager.plan_decode_run``): evictions made before its publication
        free what they would have freed after it. The run's other appends are decodes'
        own output, content no prompt holds yet. False is always correct."""

    def forked(self, parent_id: Hashable, child_id: Hashable, table: list[int]) -> None:
        """``child_id`` maps the parent's blocks (``table``, a copy) and shares its content
        (and its hold, if the parent is held back)."""

    def hold_back(self, seq_id: Hashable, tokens: int) -> bool:
        """From now on cache nothing of ``seq_id`` past its first ``tokens`` tokens until
        ``publish``: a live sequence about to be appended to, or (``tokens`` 0) one about
        to be allocated, whose ``admitted`` then caches nothing past its hit. False (nothing
        changed) when it is held back already."""

    def unhold(self, seq_id: Hashable) -> None:
        """Drop the hold ``hold_back`` just set: the allocate or append after it missed."""

    def publish(self, seq_id: Hashable, tokens: int, n_tokens: int, table: list[int]) -> int:
        """The KV of the first ``tokens`` of the ``n_tokens`` tokens of ``seq_id`` (``table``
        its live table) is there: cache its full blocks held back so far; once ``tokens``
        reaches ``n_tokens`` the hold ends (later appends are cached as they fill). Returns
        the blocks it made visible to look-ups; 0 for a sequence not held back."""

    def releasing(self, seq_id: Hashable) -> None:
        """``seq_id`` is about to be freed and still maps its blocks: an index that left
        some of them out of its cache for now (the radix index's waiting fills) takes them
        in, so that those whose last reference goes are cached, not freed."""

    def released(self, seq_id: Hashable, table: list[int], uncache: bool) -> None:
        """``seq_id`` is freed (its references already dropped). With ``uncache`` its
        context leaves the cache too, where no other sequence maps it."""

    def set_retain(self, seq_id: Hashable, priority: float) -> None:
        """The retain priority of a live sequence's context (an agent hint, vLLM #51428's
        Retain): when it is released, its cached blocks are evicted after those of lower
        priority (0: none; an index with one eviction order may ignore it, and says so)."""

    def can_allocate(self, n_tokens: int, content: Any) -> bool:
        """Whether ``allocate`` of ``n_tokens`` with ``content`` (not None) would fit now."""

    def set_time(self, now_s: float) -> None:
        """Simulation time for the next operations' access stamps."""

    def subscribe(self, listener: PrefixListener) -> bool:
        """Report to ``listener`` (replacing any earlier one) the blocks that become cached
        and stop being cached from now on; False (nothing installed) if it cannot."""

    def prefix_metrics(self, block_bytes: float) -> PrefixMetrics:
        """F17 counters and cached/active bytes (blocks of ``block_bytes``)."""

    def check(self, tables: Mapping[Hashable, list[int]], tokens: Mapping[Hashable, int]) -> None:
        """Raise ``InvariantError`` naming the first broken invariant of the index against
        the core's live tables and token counts."""
