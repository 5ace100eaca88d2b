"""vLLM V1's hashed full-block prefix cache as the paged allocator's prefix index.

Responsibility: implement ``sim.memory.PrefixIndex`` for the ``paged_hash`` kind
(``sim.prefix.kinds.HashPagedAllocator`` composes it with the paged core): the
request-level half of vLLM V1 prefix caching (``hashcache`` holds the block pool, which this
index brings to the core): hash each full block of a sequence's content (chained,
F19), look up the longest run of leading cached hashes at admission, cap it so at least one
prompt token is computed (``(n - 1) // B`` blocks: a fully cached prompt recomputes its
last block), let the core touch the hits and take new blocks from the head of the free
queue (evicting their hashes), cache blocks as they fill (the prompt's at admission,
generated ones on ``append`` with ``content=``), or, for content held back
(``hold_back``: the engine's admissions), as ``publish`` says the step that fills them
was scheduled (``publish_rule = "scheduled"``: vLLM's ``cache_blocks`` inside
``allocate_slots``); the core frees a finished sequence tail
first to the tail of the queue. Sharing is whole blocks only (vLLM has no partial-tail
copy). It is the ``paged`` design with ``prefix_caching: hash``.

Defaults follow current vLLM (0.33.0's ``KVCacheManager``; see ``hashcache``):
``null_block=True``, ``unhashed_to_head=True``; both false are the V1 design document's
older rules (vLLM 0.8, early 2025). ``engine_rules`` names the rules an option set follows
(``summary.json``'s ``engine_rules``).

Books: free (queue blocks without a hash) + allocated (refcount > 0) + cached (queue blocks
with a hash) + remainder (bytes making no block, and the null block) = pool. A cached block
is also *takeable* (it is in the free queue): nothing is evictable apart from it
(``evictable_blocks`` = 0, ``make_room`` never frees more), as in vLLM.

Hashing is incremental: a sequence keeps its chain hash (its last block's) and the content
past its last full block, so each block is hashed once, in O(its segments).

Deferred hashing: a running sequence's appends are only recorded (``_Pending``: the content
pieces, and a global serial for each append that fills a block); ``join`` hashes and caches
them when something could read the map or the sequence's hashes: a lookup (``match``,
``can_allocate``: an admission's match joins, so ``admitted`` finds nothing pending), a
fork, a release (``releasing``, before the core drops its references), an append of
unknown content, a listener subscribing (``check`` validates the records, joining
nothing). A join hashes each sequence's pending content in one pass and enters the new
blocks in the order of their serials, so the map (whose per-hash order picks a lookup's
block) is what caching at fill time leaves. Until then the blocks are allocated (refcount > 0): no count, queue or
eviction reads their hashes, and the ledger maps a sequence's own fresh blocks without
changing ``excess_tokens``. An index with a listener hashes at fill time (the listener is
told then).

Observers: ``subscribe(listener)`` (a ``sim.memory.PrefixListener``, keys = chained block
hashes) is told of the hashes of the blocks each admission or append caches (some may be
cached already: another copy) and, by the pool, of each hash whose last block loses it;
without one, each costs one attribute check.

Invariant (``check``): the pool's (``HashBlockPool.check``, run by the core); a pending
record keeps its sequence's live table and counts its appends' full blocks; while a
sequence's content is known, the part hashed so far (its tokens before its pending pieces)
has one hash per full block, each block of its table carries its hash in the pool, the
last hash chains from the one before over the last full block's content, and the unhashed
tail is its content past that block; a held-back sequence's blocks past its published
ones carry no hash of its own (another table may have published the same block); a
hold outlives no operation.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.errors import ConfigError, InvariantError
from sim.memory.base import flag
from sim.memory.metrics import PrefixMetrics
from sim.memory.prefix_index import PrefixHit, PrefixListener
from sim.prefix.hashcache import HashBlockPool
from sim.prefix.held_back import HeldBack
from sim.prefix.sharing import FamilyLedger
from sim.prefix.spans import (
    ROOT_HASH,
    Segments,
    advance,
    chain_hash,
    checked_content,
    extend_normal,
    hash_blocks_from,
    n_tokens,
    rest,
    slice_tokens,
)
from sim.prefix.stats import PrefixStats


class HashIndex:
    """A ``PrefixIndex``: chained block hashes over vLLM's LRU free queue (module docstring)."""

    kind = "paged_hash"
    #: vLLM V1 caches a request's full blocks as the step that fills them is scheduled
    #: (``cache_blocks`` in ``KVCacheManager.allocate_slots``)
    publish_rule = "scheduled"
    #: a running sequence's appends are hashed when something reads them (``join``);
    #: False: at each append (the eager reference, for tests)
    lazy_hashes = True

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        null_block: bool = True,
        unhashed_to_head: bool = True,
    ) -> None:
        null_block = flag(null_block, "null_block")
        unhashed_to_head = flag(unhashed_to_head, "unhashed_to_head")
        if num_blocks < 1 + null_block:
            raise ConfigError(
                f"the pool holds {num_blocks} blocks; paged_hash needs at least {1 + null_block}",
                field="pool_bytes",
            )
        self.pool = HashBlockPool(num_blocks, null_block, unhashed_to_head)
        self.block_size = block_size
        self.stats = PrefixStats()
        self.ledger = FamilyLedger(block_size)
        self._content: dict[Hashable, list | None] = {}  # None = unknown content
        self._hashes: dict[Hashable, list[int]] = {}  # hashes of its full blocks
        self._tail: dict[Hashable, list] = {}  # its content past its last full block
        self._retain: dict[Hashable, float] = {}  # live sequence -> its retain priority (> 0)
        #: live sequence -> its appends not hashed yet (``join``)
        self._pending: dict[Hashable, _Pending] = {}
        self._fills = 0  # serial of the last append that filled a block
        self._held = HeldBack()  # the publication seam (sim.prefix.held_back)
        #: held-back live sequence -> its leading full blocks cached so far (``hold_back``)
        self._shown: dict[Hashable, int] = self._held.marks
        self._hold_next: set[Hashable] = self._held.next  # admissions held back

    @property
    def evictable_blocks(self) -> int:
        return 0  # cached blocks wait in the free queue: taking one evicts it

    @property
    def excess_tokens(self) -> int:
        return self.ledger.excess_tokens

    def set_time(self, now_s: float) -> None:
        """No clock: the free queue's order is the LRU order."""

    def subscribe(self, listener: PrefixListener) -> bool:
        """Report hashes entering the pool's map (``admitted``, ``appended``) and leaving
        it (the pool tells: an eviction or ``uncache_free`` took its last block); from now
        on every append is hashed at once (a listener is told at fill time)."""
        self.join()
        self.pool.listener = listener
        return True

    def join(self) -> None:
        """Hash and cache every pending append: each sequence's content in one pass, the
        new blocks entered into the pool's map in the order their appends came (serials),
        as hashing at each append would have entered them."""
        pending = self._pending
        if not pending:
            return
        bs = self.block_size
        order: list[tuple[int, int, int]] = []  # (serial, block, hash) of every new block
        for seq_id, p in pending.items():
            cur, tail, have = self._content[seq_id], self._tail[seq_id], self._hashes[seq_id]
            if cur is None:
                raise InvariantError(f"paged_hash: {seq_id!r} pends content after unknown tokens")
            pieces = p.pieces
            if len(pieces) > 1:  # one normal run of them, then one join onto each list
                run: list = []
                for piece in pieces:
                    extend_normal(run, piece)
                pieces = [run]
            for piece in pieces:
                extend_normal(cur, piece)
                extend_normal(tail, piece)
            if not p.fills:
                continue
            start = len(have)
            new, qi, qoff = hash_blocks_from(tail, 0, 0, bs, have[-1] if have else ROOT_HASH)
            self._tail[seq_id] = rest(tail, qi, qoff)
            blocks = p.table[start : start + len(new)]
            shown = self._shown.get(seq_id)
            seen = len(new) if shown is None else max(0, min(len(new), shown - start))
            k = 0
            for serial, full in p.fills:  # the blocks an append filled carry its serial
                while k < full - start:
                    if k < seen:  # (held back past ``shown``: hashed, not cached)
                        order.append((serial, blocks[k], new[k]))
                    k += 1
            if k != len(new):
                raise InvariantError(f"paged_hash: {seq_id!r}: fills cover {k} of {len(new)}")
            self.ledger.map(seq_id, blocks[:seen])  # its own fresh blocks: no excess changes
            have.extend(new)
        pending.clear()
        order.sort()  # (one append's blocks tie on the serial: they have distinct hashes)
        self.pool.cache([b for _, b, _ in order], [h for _, _, h in order])

    # ------------------------------------------------------------------ admission
    def _lookup(
        self, n_tokens: int, content: Any, op: str, extra_blocks: Callable[[int], int] | None = None
    ):
        """(hashed content, cached run, capped hit, whether it fits, the extra blocks
        counted) of a new prompt: its table's new blocks plus ``extra_blocks(hit tokens)``
        (a hybrid model's side blocks) against the free queue, the hit's blocks it would
        touch out of the queue left aside."""
        segs = None if content is None else checked_content(content, n_tokens, op, self.kind)
        self.join()  # the map as caching at fill time leaves it
        if segs is None:
            hashes, tail = [], []
        else:
            hashes, qi, qoff = hash_blocks_from(segs, 0, 0, self.block_size)
            tail = rest(segs, qi, qoff)
        found = self.pool.lookup(hashes)
        hit = found[: (n_tokens - 1) // self.block_size]
        need = -(-n_tokens // self.block_size) - len(hit)
        extra = 0 if extra_blocks is None else extra_blocks(len(hit) * self.block_size)
        reclaim = sum(1 for b in hit if self.pool.refcount[b] == 0)  # touched out of the queue
        fits = need + extra <= self.pool.num_free - reclaim
        return (segs, hashes, tail), found, hit, fits, extra

    def match(
        self, n_tokens: int, content: Any, extra_blocks: Callable[[int], int] | None = None
    ) -> PrefixHit | None:
        hashed, found, hit, fits, extra = self._lookup(n_tokens, content, "allocate", extra_blocks)
        if not fits:
            return None  # checked before touching, as vLLM does: nothing moved
        return PrefixHit(hit, len(hit) * self.block_size, (hashed, found), extra)

    def cancel(self, hit: PrefixHit) -> None:
        """Nothing pinned (and unreachable: ``match`` admits only what fits)."""

    def make_room(self, short_blocks: int) -> bool:
        return False  # every cached block is already in the free queue

    def admitted(self, seq_id: Hashable, n_tokens: int, table: list[int], hit: PrefixHit) -> int:
        (segs, hashes, tail), found = hit.state
        if self._pending:  # (match joined them; nothing appends between)
            raise InvariantError("paged_hash: appends pending at an admission")
        n_hit = len(hit.block_ids)
        shown = len(hashes)
        if seq_id in self._hold_next:  # its KV is not there yet: only the hit is cached
            self._hold_next.discard(seq_id)
            shown = self._shown[seq_id] = n_hit
        self.pool.cache(table[n_hit:shown], hashes[n_hit:shown])
        listener = self.pool.listener
        if listener is not None and shown > n_hit:
            bs = self.block_size
            listener.cached(
                hashes[n_hit - 1] if n_hit else None,
                hashes[n_hit:shown],
                slice_tokens(segs, n_hit * bs, shown * bs),
            )
        self.ledger.new(seq_id, table)
        self.ledger.map(seq_id, table[:shown])
        self._content[seq_id] = None if segs is None else list(segs)
        self._hashes[seq_id] = hashes
        self._tail[seq_id] = tail
        bs = self.block_size
        self.stats.record(seq_id, n_tokens, len(found) * bs, n_hit * bs)
        return 0

    # ------------------------------------------------------------------ growth
    def check_content(self, content: Any, n_tokens: int, op: str) -> Segments:
        return checked_content(content, n_tokens, op, self.kind)

    def appends_in_bulk(self, seq_ids: Iterable[Hashable]) -> bool:
        """False (step order): the hashed pool's cached blocks wait in the free queue that
        takes pop, beside the blocks fills hash; no order-free form is shown for it."""
        return False

    def appended(
        self, seq_id: Hashable, tokens: int, n_tokens: int, content: Any, table: list[int]
    ) -> None:
        cur = self._content[seq_id]
        if cur is None:
            return
        if content is None:
            self.join()  # what it appended before is hashed first, in order
            self._content[seq_id] = None  # tokens of unknown content: nothing more to cache
            return
        if self.lazy_hashes and self.pool.listener is None:
            p = self._pending.get(seq_id)
            if p is None:
                p = self._pending[seq_id] = _Pending(table, len(self._hashes[seq_id]))
            p.pieces.append(content)  # normalised by check_content
            full = (tokens + n_tokens) // self.block_size
            if full > p.full_blocks:
                self._fills += 1
                p.fills.append((self._fills, full))
                p.full_blocks = full
            return
        if self._pending:  # (a listener subscribed, or the reference switched on: in order)
            self.join()
        extend_normal(cur, content)  # normalised by check_content
        tail = self._tail[seq_id]
        extend_normal(tail, content)
        have = self._hashes[seq_id]
        if (tokens + n_tokens) // self.block_size <= len(have):
            return
        parent = have[-1] if have else ROOT_HASH
        new, qi, qoff = hash_blocks_from(tail, 0, 0, self.block_size, parent)
        blocks = table[len(have) : len(have) + len(new)]
        shown = self._shown.get(seq_id)
        seen = len(new) if shown is None else max(0, min(len(new), shown - len(have)))
        self.pool.cache(blocks[:seen], new[:seen])
        if self.pool.listener is not None and seen:
            content = slice_tokens(tail, 0, seen * self.block_size)
            self.pool.listener.cached(parent if have else None, new[:seen], content)
        self._tail[seq_id] = rest(tail, qi, qoff)
        self.ledger.map(seq_id, blocks[:seen])
        have.extend(new)

    def forked(self, parent_id: Hashable, child_id: Hashable, table: list[int]) -> None:
        self.join()  # the child copies the parent's hashes
        if parent_id in self._shown:
            self._shown[child_id] = self._shown[parent_id]
        cur = self._content[parent_id]
        self._content[child_id] = None if cur is None else list(cur)
        self._hashes[child_id] = list(self._hashes[parent_id])
        self._tail[child_id] = list(self._tail[parent_id])
        self.ledger.fork(parent_id, child_id, table)

    # ------------------------------------------------------------------ publication
    def hold_back(self, seq_id: Hashable, tokens: int) -> bool:
        """Cache nothing of ``seq_id`` past ``tokens`` until ``publish`` (vLLM caches a
        block when the step that fills it is scheduled, not when its slots are allocated)."""
        return self._held.hold(seq_id, seq_id in self._content, tokens // self.block_size)

    def publishes_apart(self, seq_id: Hashable) -> bool:
        """False (always correct): under the "scheduled" rule a run's prefill publishes
        as it is scheduled, so no run waits on it (``KVManager.publishes_late``)."""
        return False

    def unhold(self, seq_id: Hashable) -> None:
        self._held.drop(seq_id)

    def publish(self, seq_id: Hashable, tokens: int, n_tokens: int, table: list[int]) -> int:
        """Cache the held-back full blocks of the first ``tokens`` tokens, in order after
        every pending append (``join``: the map as caching at schedule time leaves it)."""
        shown = self._shown.get(seq_id)
        if shown is None:
            return 0
        self.join()
        hashes, bs = self._hashes[seq_id], self.block_size
        upto = min(tokens // bs, len(hashes))
        made = max(0, upto - shown)
        if made:
            blocks = table[shown:upto]
            self.pool.cache(blocks, hashes[shown:upto])
            content = self._content[seq_id]
            if self.pool.listener is not None and content is not None:
                self.pool.listener.cached(
                    hashes[shown - 1] if shown else None,
                    hashes[shown:upto],
                    slice_tokens(content, shown * bs, upto * bs),
                )
            self.ledger.map(seq_id, blocks)
        if tokens >= n_tokens:
            del self._shown[seq_id]
        elif made:
            self._shown[seq_id] = upto
        return made

    def set_retain(self, seq_id: Hashable, priority: float) -> None:
        """Its blocks, once released, wait in the pool's queue of ``priority`` (> 0; 0 or
        less: vLLM's LRU queue, which has nothing below it): ``HashBlockPool.retain``."""
        if seq_id not in self._content:
            raise InvariantError(f"paged_hash: set_retain of unknown sequence {seq_id!r}")
        if priority > 0:
            self._retain[seq_id] = float(priority)
        else:
            self._retain.pop(seq_id, None)

    def releasing(self, seq_id: Hashable) -> None:
        """Before the core drops its references: pending appends are hashed (every
        sequence's, in order), so the blocks reaching refcount 0 are cached as at fill time."""
        self.join()

    def released(self, seq_id: Hashable, table: list[int], uncache: bool) -> None:
        """Forget it; with ``uncache`` each of its blocks that no other table maps loses
        its hash (``HashBlockPool.uncache_free``, counted as evictions)."""
        if seq_id in self._pending:
            raise InvariantError(f"paged_hash: {seq_id!r} released with appends pending")
        del self._content[seq_id], self._hashes[seq_id], self._tail[seq_id]
        self._shown.pop(seq_id, None)
        self.ledger.release(seq_id, table)
        priority = self._retain.pop(seq_id, 0.0)
        if uncache:
            self.pool.uncache_free(reversed(table))
        elif priority:  # freed tail first: the same order in its retained queue
            self.pool.retain(reversed(table), priority)

    # ------------------------------------------------------------------ queries
    def can_allocate(self, n_tokens: int, content: Any) -> bool:
        return self._lookup(n_tokens, content, "can_allocate")[3]

    def prefix_metrics(self, block_bytes: float) -> PrefixMetrics:
        return self.stats.metrics(
            cached_bytes=self.pool.num_cached * block_bytes,
            active_bytes=self.pool.num_allocated * block_bytes,
            evicted_blocks=self.pool.evictions,
        )

    def check(self, tables: Mapping[Hashable, list[int]], tokens: Mapping[Hashable, int]) -> None:
        """The ledger's, each pending record's (``_check_pending``) and each sequence's
        hashed part (``_check_hashes``); nothing is joined."""
        try:
            self.ledger.check(tables)
        except InvariantError as exc:
            raise InvariantError(f"paged_hash: {exc}") from None
        if self._hold_next or not self._shown.keys() <= self._hashes.keys():
            raise InvariantError("paged_hash: a hold outlived its operation or its sequence")
        for seq_id, hashes in self._hashes.items():
            if self._content[seq_id] is not None:
                hashed = tokens[seq_id]
                if seq_id in self._pending:
                    hashed = self._check_pending(seq_id, tables[seq_id], hashed)
                self._check_hashes(seq_id, hashes, tables[seq_id], hashed)
            elif seq_id in self._pending:
                raise InvariantError(f"paged_hash: {seq_id!r} pends content after unknown tokens")

    def _check_pending(self, seq_id: Hashable, table: list[int], tokens: int) -> int:
        """A pending record keeps the live table and counts its appends' full blocks:
        returns the tokens hashed (those before its pieces)."""
        p = self._pending[seq_id]
        pieces = sum(n_tokens(piece) for piece in p.pieces)
        fills = [f for _, f in p.fills]
        serials = [s for s, _ in p.fills]
        if (
            p.table is not table
            or not 0 < pieces <= tokens
            or p.full_blocks != tokens // self.block_size
            or p.full_blocks != (fills[-1] if fills else len(self._hashes[seq_id]))
            or fills != sorted(set(fills))
            or serials != sorted(set(serials))
            or (serials and serials[-1] > self._fills)
        ):
            raise InvariantError(f"paged_hash: pending appends of {seq_id!r} are stale")
        return tokens - pieces

    def _check_hashes(
        self, seq_id: Hashable, hashes: list[int], table: list[int], tokens: int
    ) -> None:
        """O(blocks + segments): no hash is recomputed but the last one."""
        cur, bs = tuple(self._content[seq_id]), self.block_size
        full = tokens // bs
        if n_tokens(cur) != tokens:
            raise InvariantError(f"paged_hash: sequence {seq_id!r} hashes are stale (length)")
        block_hash = self.pool.block_hash
        shown = self._shown.get(seq_id, full)  # held back past it: hashed, maybe not cached
        stale = len(hashes) != full or any(
            block_hash[table[i]] != h for i, h in enumerate(hashes[:shown])
        )
        if not stale and full:
            parent = hashes[-2] if full > 1 else ROOT_HASH
            stale = hashes[-1] != chain_hash(parent, slice_tokens(cur, (full - 1) * bs, full * bs))
        if stale or self._tail[seq_id] != rest(cur, *advance(cur, 0, 0, full * bs)):
            raise InvariantError(f"paged_hash: sequence {seq_id!r} hashes are stale")


@dataclass(slots=True, eq=False)  # a record is itself (compared by identity)
class _Pending:
    """A live sequence's appends not hashed yet (``HashIndex.join``)."""

    #: the core's live table (kept: ``PrefixIndex.admitted``); the new blocks are read
    #: from it at the join
    table: list[int]
    full_blocks: int  # its full blocks after the last pending append
    pieces: list = field(default_factory=list)  # each append's normal content, in order
    #: (serial, full blocks after it) of each pending append that filled a block
    fills: list[tuple[int, int]] = field(default_factory=list)
