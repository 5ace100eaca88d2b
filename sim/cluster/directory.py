"""The cluster's global prefix directory: chained chunk hashes -> nodes (rule 3.15, F19).

Responsibility: know, for every node, which prefixes its prefix cache holds as chained
16-token chunk hashes, so a router can ask per node how long a prompt's cached prefix is
(Match_j of F20) without asking the nodes. Each node's prefix index reports the full blocks
it caches and evicts through ``sim.memory.PrefixListener`` (``attach`` subscribes; keys are
the index's own: radix block ids, paged_hash block hashes). A per-node feed chains the F19
chunk hashes (``h_k = H(h_{k-1} || c_k)`` from ``ROOT_HASH``) through each new block from
the state the block before it left (each block hashed once, never the whole prompt) and
publishes, per block that ends on a chunk boundary, the hash of the prefix it ends; an
eviction withdraws it. ``match_tokens`` hashes a prompt chunk by chunk and keeps, per
node, the longest leading run it holds, stopping at the first chunk no node holds.

Block-size rule: node j answers for prefixes that end on both a chunk and one of its block
boundaries, multiples of ``L_j = lcm(16, B_j)`` (a cache shares whole blocks only, F18).
Exactness with no delay: for B a multiple of 16 (16, 32, ...) ``match_tokens[j]`` equals
the node's own leading match in whole blocks, for both kinds; for B dividing 16 (8, 4, ...)
it is that match floored to a multiple of 16, exactly for ``radix`` (its cached blocks are
prefix-closed), while for ``paged_hash`` it is never less but may be more: a chunk is
published by the block ending it, and vLLM's cache can drop an earlier block (LRU order,
``free_uncached`` of a shared trunk) while keeping later ones (with B a multiple of 16 each
block publishes its own prefix, so the leading run sees the gap); for other B (24, ...)
the match is floored to a multiple of ``L_j`` (48 for B = 24).

Delay: an update made at simulation time t becomes visible at t + ``update_delay_s``.
Nothing is scheduled: updates wait in a FIFO with their due time and are applied when the
directory is next read at or after it (delay 0: at once). The feeds always know the
present (they chain hashes from it); only what ``match_tokens`` sees lags.

Invariants: a (chunk hash, node) entry is visible exactly while the node's applied
updates hold a cached block ending that prefix (a per-node count); entries exist only for
cached blocks (memory bounded by the caches); ``match_tokens`` costs one hash per chunk of
the longest prefix some node holds, plus one, plus O(segments), and a prompt segment hashed
to its end before (a bounded LRU memo, ``memo_limit``) costs one lookup, its chunks'
masks then checked in one C-level pass per run of such segments; no answer depends on the
memo (masks are always read as visible now).

Speed (answers unchanged): a node whose cached blocks have always been prefix-closed (each
one's predecessors cached, as in a radix tree; the feed counts each block's cached
successors and clears the node's bit in ``_closed`` for good at the first gap) holds a
leading run of any prompt's chunks, so a memoised run costs it one look-up when it holds the
run's last chunk and a bisection otherwise; other nodes are walked chunk by chunk. A query
and a B = 16 feed hand each other the chunk hashes they make (``_chunks``, bounded): a
prompt's new chunks are cached by its node next, and a node's output blocks come back in
its next prompt, so each chunk is hashed about once. With a ``line`` (the front passes the
sequence id) a prompt whose leading spans equal those of the line's last prompt starts
from their remembered hashes (``_lines``, bounded): O(new spans) Python steps a query.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence
from hashlib import blake2b
from itertools import accumulate, repeat
from math import lcm
from operator import and_
from typing import Any

from sim.errors import InvariantError
from sim.memory.kv_manager import KVManager
from sim.prefix.spans import (
    HASH_BYTES,
    ROOT_HASH,
    Segment,
    Segments,
    advance,
    chain_hash,
    join,
    rest,
    segments,
    slice_tokens,
    take,
)
from sim.prefix.spans import hash_blocks_from as _hash_chunks
from sim.prefix.spans import n_tokens as _n_tokens

#: what a feed keeps per cached block: (the chunk hash it publishes or None, the chain
#: hash at its last whole chunk, its tokens past that chunk (fewer than a chunk))
_BlockChunks = tuple[int | None, int, Segments]
_START: _BlockChunks = (None, ROOT_HASH, ())


class _NodeFeed:
    """One node's ``PrefixListener``: cached blocks -> chunk hashes it publishes."""

    def __init__(self, directory: PrefixDirectory, node_id: int, block_size: int) -> None:
        self.directory = directory
        self.node_id = node_id
        self.block_size = block_size
        #: whether the index's keys are the chunk hashes themselves (paged_hash hashes
        #: blocks with the same ``chain_hash`` from ``ROOT_HASH``, so with B = the chunk
        #: size a block's key is its chunk hash); None = not known yet: decided on the
        #: first block from token 0 by comparing, so no kind is trusted by its name
        self.keys_are_chunks: bool | None = None
        if block_size != directory.chunk_tokens:
            self.keys_are_chunks = False
        self.blocks: dict[Hashable, _BlockChunks] = {}  # cached key -> its chain state
        #: prefix closure: cached key -> the key of the block before it (None: token 0), and
        #: cached key -> its cached successors; a block dropped while a successor stays
        #: cached (or one cached after an uncached block) breaks closure for good
        self.parent_of: dict[Hashable, Hashable | None] = {}
        self.children: dict[Hashable, int] = {}

    def _broken(self) -> None:
        """The node's cached blocks stopped being prefix-closed: never assume it again."""
        self.directory._closed &= ~(1 << self.node_id)

    def cached(self, parent: Hashable | None, keys: Sequence[Hashable], content: Any) -> None:
        blocks = self.blocks
        if self.keys_are_chunks is None and parent is None and keys:
            first = take(content, 0, 0, self.block_size)[0]
            self.keys_are_chunks = keys[0] == chain_hash(ROOT_HASH, first)
        if self.keys_are_chunks:  # nothing to hash: each key is its block's chunk hash
            new = []
            parent_of, children, prev = self.parent_of, self.children, parent
            if prev is not None and prev not in blocks:
                self._broken()
            for k in keys:
                if k not in blocks:
                    blocks[k] = (k, k, ())
                    parent_of[k] = prev
                    if prev is not None:
                        children[prev] = children.get(prev, 0) + 1
                    new.append(k)
                prev = k
            if new:
                self.directory._publish(self.node_id, new, +1)
            return
        if self.block_size == self.directory.chunk_tokens:
            self._cached_chunks(parent, keys, content)
            return
        state = _START if parent is None else blocks.get(parent)
        if state is None:
            raise InvariantError(
                f"directory: node {self.node_id} cached a block after {parent!r}, "
                "which it never reported"
            )
        _, h, partial = state
        added: list[int] = []
        qi = qoff = 0
        bs, chunk = self.block_size, self.directory.chunk_tokens
        parent_of, children, prev = self.parent_of, self.children, parent
        for key in keys:
            block, qi, qoff = take(content, qi, qoff, bs)
            known = blocks.get(key)
            if known is None:  # chain the chunks it completes from the state before it
                parent_of[key] = prev
                if prev is not None:
                    children[prev] = children.get(prev, 0) + 1
                seq = join(partial, block) if partial else block
                hs, ci, co = _hash_chunks(seq, 0, 0, chunk, h)
                tail = tuple(rest(seq, ci, co))
                pub = hs[-1] if hs and not tail else None  # it ends on a chunk boundary
                known = blocks[key] = (pub, hs[-1] if hs else h, tail)
                if pub is not None:
                    added.append(pub)
            _, h, partial = known
            prev = key
        if added:
            self.directory._publish(self.node_id, added, +1)

    def _cached_chunks(
        self, parent: Hashable | None, keys: Sequence[Hashable], content: Any
    ) -> None:
        """``cached`` for blocks of one chunk each (B = 16): a block's chunk hash chains
        from the one before it, with no carried tokens to join or split."""
        blocks = self.blocks
        if parent is None:
            h = ROOT_HASH
        else:
            state = blocks.get(parent)
            if state is None:
                raise InvariantError(
                    f"directory: node {self.node_id} cached a block after {parent!r}, "
                    "which it never reported"
                )
            h = state[1]
        added: list[int] = []
        qi = qoff = 0
        bs = self.block_size
        parent_of, children, prev = self.parent_of, self.children, parent
        # one span of exactly these blocks (almost always): each block's segment made directly
        one = content[0] if len(content) == 1 and content[0][2] == len(keys) * bs else None
        for key in keys:
            known = blocks.get(key)
            if known is None:
                if one is not None:
                    block = ((one[0], one[1] + qoff, bs),)
                    qoff += bs
                else:
                    block, qi, qoff = take(content, qi, qoff, bs)
                h = self.directory._chunk_hash(h, block)
                blocks[key] = (h, h, ())
                added.append(h)
                parent_of[key] = prev
                if prev is not None:
                    children[prev] = children.get(prev, 0) + 1
            else:
                if one is not None:
                    qoff += bs
                else:
                    qi, qoff = advance(content, qi, qoff, bs)
                h = known[1]
            prev = key
        if added:
            self.directory._publish(self.node_id, added, +1)

    def evicted(self, keys: Sequence[Hashable]) -> None:
        blocks, parent_of, children = self.blocks, self.parent_of, self.children
        removed: list[int] = []
        gone: list[Hashable] = []
        for key in keys:
            known = blocks.pop(key, None)
            if known is None:
                continue
            gone.append(key)
            if known[0] is not None:
                removed.append(known[0])
            prev = parent_of.pop(key)
            if prev is not None and prev in children:
                children[prev] -= 1
        for key in gone:  # successors dropped in the same call were counted off above
            if children.pop(key, 0) > 0:
                self._broken()
        if removed:
            self.directory._publish(self.node_id, removed, -1)


class PrefixDirectory:
    """Chained 16-token chunk hashes -> the nodes whose prefix caches hold them."""

    #: bound on the prompt-hash memo: chunk hashes plus entries (~50 bytes each)
    memo_limit = 1 << 18
    #: bound on the chunk-hash hand-over between queries and feeds (~300 bytes each)
    chunk_memo_limit = 1 << 15

    def __init__(
        self,
        env: Any,
        n_nodes: int,
        *,
        chunk_tokens: int = 16,
        update_delay_s: float = 0.0,
    ) -> None:
        if isinstance(n_nodes, bool) or not isinstance(n_nodes, int) or n_nodes < 1:
            raise ValueError(f"n_nodes must be a whole number >= 1, got {n_nodes!r}")
        if isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be a whole number >= 1, got {chunk_tokens!r}")
        if not update_delay_s >= 0:  # also rejects NaN
            raise ValueError(f"update_delay_s must be >= 0, got {update_delay_s!r}")
        if update_delay_s > 0 and env is None:
            raise ValueError("a directory with an update delay needs the simulation env")
        self.env = env
        self.n_nodes = n_nodes
        self.chunk_tokens = chunk_tokens
        self.update_delay_s = float(update_delay_s)
        self.feeds: dict[int, _NodeFeed] = {}
        self._mask: dict[int, int] = {}  # chunk hash -> bit j set: visible on node j
        self._refs: list[dict[int, int]] = [{} for _ in range(n_nodes)]  # visible counts
        self._attached = 0  # bit j set: node j reports to the directory
        #: bit j set: node j's cached blocks have always been prefix-closed (each one's
        #: predecessors cached: radix), so along a prompt its held chunks are a leading run
        #: and a binary search finds where it ends; cleared for good at the first gap
        self._closed = 0
        #: chunks per lcm(chunk, B_j) -> the attached nodes with that period (B = 16: 1)
        self._periods: dict[int, int] = {}
        #: (due time, node, +1 add / -1 remove, chunk hashes, made at): waiting updates
        self._queue: deque[tuple[float, int, int, list[int], float]] = deque()
        self._entries = 0
        self._updates = 0
        self._staleness_sum_s = 0.0
        #: (chain hash, tokens carried over, segment) -> (its chunk hashes, chain hash and
        #: carry after it): prompts' segments already hashed, least recently used first
        self._memo: OrderedDict[tuple, tuple[tuple[int, ...], int, Segments]] = OrderedDict()
        self._memo_size = 0  # chunk hashes + entries held by the memo (<= memo_limit)
        #: (chain hash, chunk) -> its chain hash, made by a query or a B = 16 feed and
        #: taken (popped) by the other: a prompt's new chunks are cached by its node right
        #: after routing, and a node's output blocks come back in the next prompt; emptied
        #: when it outgrows ``chunk_memo_limit``
        self._chunks: dict[tuple[int, Segments], int] = {}
        #: line -> (its last prompt's leading spans hashed to their end, their chunk
        #: hashes, chain hash and carry after them), least recently used first
        self._lines: OrderedDict[Hashable, tuple[Any, list[int], int, Segments]] = OrderedDict()
        self._lines_size = 0  # chunk hashes + entries held by ``_lines`` (<= memo_limit)

    # ------------------------------------------------------------------ wiring
    def attach(self, node_id: int, kv: KVManager) -> bool:
        """Subscribe to node ``node_id``'s prefix cache (``radix`` or ``paged_hash``);
        False (and nothing done) when its allocator has none. Attach before the node runs:
        the directory learns only what its cache does from now on."""
        if isinstance(node_id, bool) or not isinstance(node_id, int):
            raise ValueError(f"node_id must be a whole number, got {node_id!r}")
        if not 0 <= node_id < self.n_nodes:
            raise ValueError(f"node_id {node_id!r} is not in 0..{self.n_nodes - 1}")
        if node_id in self.feeds:
            raise ValueError(f"node {node_id} is attached already")
        metrics = kv.prefix_metrics()
        if metrics is None:
            return False
        if kv.num_sequences or metrics.cached_bytes:
            raise ValueError(f"node {node_id}: attach the directory before the node runs")
        feed = _NodeFeed(self, node_id, kv.block_size)
        if not kv.subscribe_prefix(feed):
            return False
        self.feeds[node_id] = feed
        self._attached |= 1 << node_id
        self._closed |= 1 << node_id
        period = lcm(self.chunk_tokens, kv.block_size) // self.chunk_tokens
        self._periods[period] = self._periods.get(period, 0) | 1 << node_id
        return True

    # ------------------------------------------------------------------ updates
    def _publish(self, node_id: int, hashes: list[int], sign: int) -> None:
        """A node's cache added (+1) or dropped (-1) the prefixes with these hashes, now."""
        if not self.update_delay_s:
            self._apply(node_id, hashes, sign)
            return
        now = self.env.now
        self._catch_up(now)
        self._queue.append((now + self.update_delay_s, node_id, sign, hashes, now))

    def _apply(self, node_id: int, hashes: list[int], sign: int) -> None:
        refs, mask = self._refs[node_id], self._mask
        bit = 1 << node_id
        if sign > 0:
            for h in hashes:
                n = refs.get(h, 0)
                refs[h] = n + 1
                if not n:
                    mask[h] = mask.get(h, 0) | bit
                    self._entries += 1
        else:
            for h in hashes:
                n = refs[h] - 1
                if n:
                    refs[h] = n
                    continue
                del refs[h]
                m = mask[h] & ~bit
                if m:
                    mask[h] = m
                else:
                    del mask[h]
                self._entries -= 1
        self._updates += len(hashes)

    def _catch_up(self, now: float) -> None:
        """Apply every waiting update due at or before ``now``, in the order made."""
        queue = self._queue
        while queue and queue[0][0] <= now:
            due, node_id, sign, hashes, made = queue.popleft()
            self._apply(node_id, hashes, sign)
            self._staleness_sum_s += (due - made) * len(hashes)

    def _visible(self) -> None:
        if self._queue:
            self._catch_up(self.env.now)

    # ------------------------------------------------------------------ queries
    def match_tokens(
        self, content: Any, n_tokens: int, line: Hashable | None = None
    ) -> list[int]:
        """Per node, its cached prefix of a prompt in tokens: chunk size x the longest k
        such that the node holds h_1..h_k of the prompt's first ``n_tokens`` tokens (at its
        block boundaries; module docstring). ``content`` (spans or normal segments, as
        ``Request.content``) None -> all zeros. Work: one hash per chunk until no node
        holds the next one. ``line`` (optional, e.g. the sequence id) names prompts that
        grow by appending spans: the chunk hashes of the leading spans of its last prompt
        hashed to their end are kept, and a prompt whose first spans equal them (compared
        in C) starts from there (``_line_start``); no answer depends on it."""
        out = [0] * self.n_nodes
        alive = self._attached
        chunk = self.chunk_tokens
        if content is None or not alive or n_tokens < chunk:
            return out
        self._visible()
        if line is not None and type(content) is tuple:
            start = self._line_start(content, n_tokens, line)
            if start is not None:
                return self._walk_prompt(out, alive, *start)
        segs = segments(content)
        total = _n_tokens(segs)
        if n_tokens < total:
            segs = slice_tokens(segs, 0, n_tokens)
        n_chunks = min(n_tokens, total) // chunk  # only whole chunks are hashed
        return self._walk_prompt(out, alive, segs, n_chunks, [], ROOT_HASH, (), None)

    def _line_start(self, content: tuple, n_tokens: int, line: Hashable) -> tuple | None:
        """``_walk_prompt``'s arguments for a prompt of ``line``: its first spans' state
        from ``_lines`` when they equal those remembered, the rest as one segment per span
        (hashes do not depend on where spans are cut: chunks are joined across them);
        None (the plain path) when the prompt holds other than ``n_tokens`` tokens."""
        chunk = self.chunk_tokens
        m, hs, h, partial = 0, [], ROOT_HASH, ()
        got = self._lines.get(line)
        if got is not None:
            raw = got[0]
            if content[: len(raw)] == raw:
                m, hs, h, partial = len(raw), list(got[1]), got[2], got[3]
        tokens = len(hs) * chunk + _n_tokens(partial)
        segs: list[Segment] = []
        ends: list[int] = []  # per segment, the spans of content it completes
        for i in range(m, len(content)):
            seg = segments((content[i],))
            if seg:
                segs.append(seg[0])
                ends.append(i + 1)
                tokens += seg[0][2]
        if tokens != n_tokens:
            return None
        return segs, n_tokens // chunk, hs, h, partial, (line, content, m, ends)

    def _walk_prompt(
        self,
        out: list[int],
        alive: int,
        segs: Sequence[Segment],
        n_chunks: int,
        pending: list[int],
        h: int,
        partial: Segments,
        line: tuple | None,
    ) -> list[int]:
        """Walk a prompt's segments from chain state ``(h, partial)`` after the chunks
        ``pending`` (not walked yet); with ``line``, remember where it got to."""
        memo_get, hit = self._memo.get, self._memo.move_to_end
        done_hs = list(pending) if line is not None else []  # segments hashed to their end
        k = done = 0  # chunks walked; segments hashed to their end
        for seg in segs:
            key = (h, partial, seg)
            got = memo_get(key)
            if got is not None:  # hashed to its end before: its hashes join the run
                hit(key)
                pending += got[0]
                done_hs += got[0]
                h, partial = got[1], got[2]
                done += 1
                continue
            if pending:  # walk the run first: a new segment is hashed only if needed
                alive = self._walk_run(out, alive, pending, k)
                k += len(pending)
                pending = []
                if not alive:
                    break
            alive, k, h2, partial2, hs = self._hash_segment(out, alive, k, key)
            if not alive:
                break
            h, partial = h2, partial2
            done_hs += hs
            done += 1
        else:
            if pending:
                alive = self._walk_run(out, alive, pending, k)
            self._settle(out, alive, n_chunks)
        if line is not None:
            self._remember_line(line, done, done_hs, h, partial)
        return out

    def _remember_line(
        self, line: tuple, done: int, hs: list[int], h: int, partial: Segments
    ) -> None:
        """Keep a line's spans hashed to their end (bounded LRU over lines, ``memo_limit``
        chunk hashes and entries in all)."""
        key, content, m, ends = line
        lines = self._lines
        old = lines.pop(key, None)
        if old is not None:
            self._lines_size -= len(old[1]) + 1
        lines[key] = (content[: ends[done - 1] if done else m], hs, h, partial)
        self._lines_size += len(hs) + 1
        while self._lines_size > self.memo_limit:
            gone = lines.popitem(last=False)[1]
            self._lines_size -= len(gone[1]) + 1

    def _walk_run(self, out: list[int], alive: int, hs: list[int], k0: int) -> int:
        """Walk chunks ``k0 + 1 ..`` with hashes ``hs`` (from the memo): settle the nodes in
        ``alive`` that lack a chunk due for them, return those still alive. The answer of
        a chunk-by-chunk walk, but the per-chunk work (mask look-ups, running AND) runs in
        C loops: a re-sent ~1,300-chunk trunk of ~90 segments costs one call, not 1,300
        Python steps."""
        mask_of = self._mask.get
        for period, members in self._periods.items():
            group = alive & members
            if not group:
                continue
            first = -(k0 + 1) % period  # index in hs of the first chunk due for them
            due_hs = hs[first::period] if period > 1 else hs
            if not due_hs:
                continue
            closed, group = group & self._closed, group & ~self._closed
            if closed:
                alive = self._search_run(out, alive, closed, due_hs, k0 + first, period)
            if not group:
                continue
            # held[i]: the group's nodes holding due chunks 0..i-1; each is a submask of
            # the one before, hence never larger: bisect finds where it shrinks
            held = list(accumulate(map(mask_of, due_hs, repeat(0)), and_, initial=group))
            i = 0
            while held[-1] != group:
                i = bisect_left(held, True, lo=i, key=group.__gt__)
                lost = group & ~held[i]
                self._settle(out, lost, k0 + first + (i - 1) * period)  # up to the one before
                group = held[i]
                alive &= ~lost
        return alive

    def _search_run(
        self, out: list[int], alive: int, closed: int, due_hs: list[int], k: int, period: int
    ) -> int:
        """``_walk_run`` for prefix-closed nodes (``_closed``): a node holding the last due
        chunk holds them all; otherwise its held due chunks are a leading run, found by
        bisection (O(log chunks) look-ups). ``k``: chunks before ``due_hs[0]`` is due."""
        mask_of = self._mask.get
        last = mask_of(due_hs[-1], 0)
        j = 0
        while closed:
            if closed & 1 and not last >> j & 1:
                bit = 1 << j
                i = bisect_left(due_hs, True, key=lambda h, bit=bit: not mask_of(h, 0) & bit)
                self._settle(out, bit, k + i * period)  # up to the chunk before due_hs[i]
                alive &= ~bit
            closed >>= 1
            j += 1
        return alive

    def _hash_segment(
        self, out: list[int], alive: int, k: int, key: tuple
    ) -> tuple[int, int, int, Segments, tuple[int, ...]]:
        """Hash segment ``key = (chain hash, carried tokens, segment)`` chunk by chunk,
        walking each chunk as it is made and stopping (unmemoised) once no node is alive;
        a segment hashed to its end is memoised (bounded LRU, ``memo_limit``). Returns
        (alive, chunks walked, chain hash and carry after it, its chunk hashes)."""
        h, partial, seg = key
        periods, chunk, mask_of = self._periods, self.chunk_tokens, self._mask.get
        every = len(periods) == 1 and 1 in periods  # every node: asked at each chunk
        seq = join(partial, (seg,)) if partial else (seg,)
        hs: list[int] = []
        qi = qoff = 0
        n_seq = len(seq)
        while True:
            if qi < n_seq and seq[qi][2] - qoff >= chunk:  # the chunk lies in one segment
                cid, start, n = seq[qi]
                block = ((cid, start + qoff, chunk),)
                qoff += chunk
                if qoff == n:
                    qi, qoff = qi + 1, 0
            else:
                block, qi2, qoff2 = take(seq, qi, qoff, chunk)
                if _n_tokens(block) < chunk:
                    break
                qi, qoff = qi2, qoff2
            h = self._chunk_hash(h, block)
            hs.append(h)
            k += 1
            due = alive if every else alive & _due(periods, k)
            lost = due & ~mask_of(h, 0)
            if lost:  # their runs end at their last boundary before chunk k
                self._settle(out, lost, k - 1)
                alive &= ~lost
                if not alive:  # stop hashing: this segment is not memoised
                    return alive, k, h, (), ()
        partial = tuple(rest(seq, qi, qoff))
        memo = self._memo
        memo[key] = got = (tuple(hs), h, partial)
        self._memo_size += len(hs) + 1
        while self._memo_size > self.memo_limit:  # least recently used segments go
            old = memo.popitem(last=False)[1]
            self._memo_size -= len(old[0]) + 1
        return alive, k, h, partial, got[0]

    def _chunk_hash(self, h: int, chunk: Segments) -> int:
        """``chain_hash(h, chunk)``, taken from ``_chunks`` when the other side (a query or
        a feed) made it last; else made and left there for the other side."""
        key = (h, chunk)
        got = self._chunks.pop(key, None)
        if got is not None:
            return got
        got = _chunk_chain_hash(h, chunk)
        chunks = self._chunks
        if len(chunks) >= self.chunk_memo_limit:
            chunks.clear()  # a memo: losing it costs hashes, never answers
        chunks[key] = got
        return got

    def _settle(self, out: list[int], nodes: int, chunks: int) -> None:
        """Each node in ``nodes`` holds the first ``chunks`` chunks (those it was asked
        about): its match is the last of its block boundaries within them."""
        for period, members in self._periods.items():
            m = nodes & members
            j = 0
            tokens = chunks // period * period * self.chunk_tokens
            while m:
                if m & 1:
                    out[j] = tokens
                m >>= 1
                j += 1

    @property
    def entries(self) -> int:
        """(chunk hash, node) pairs visible now."""
        self._visible()
        return self._entries

    @property
    def updates(self) -> int:
        """(chunk hash, node) insertions and removals applied so far (visible)."""
        self._visible()
        return self._updates

    @property
    def pending_updates(self) -> int:
        """Update messages made but not visible yet (always 0 with no delay)."""
        self._visible()
        return len(self._queue)

    @property
    def mean_staleness_s(self) -> float:
        """Mean delay between a node's cache change and its visibility in the directory,
        over the applied updates (0 with no delay, or before any update applied)."""
        self._visible()
        return self._staleness_sum_s / self._updates if self._updates else 0.0

    def held_prefixes(self, node_id: int) -> int:
        """Chunk hashes visible for one node."""
        self._visible()
        return len(self._refs[node_id])


def _due(periods: dict[int, int], k: int) -> int:
    """Nodes whose block boundaries include chunk ``k``'s end (period divides ``k``)."""
    due = 0
    for period, members in periods.items():
        if k % period == 0:
            due |= members
    return due


def _chunk_chain_hash(parent: int, chunk: Segments) -> int:
    """``chain_hash(parent, chunk)``, the same bytes hashed, with a chunk of one segment
    (almost all of them) encoded inline: one BLAKE2b call on the joined bytes."""
    if len(chunk) == 1:
        cid, start, n = chunk[0]
        if type(cid) is str:
            raw = cid.encode("utf-8")
            enc = b"s%d:%s,%d,%d;" % (len(raw), raw, start, n)
        elif type(cid) is int:
            enc = b"i%d,%d,%d;" % (cid, start, n)
        else:
            return chain_hash(parent, chunk)
        digest = blake2b(parent.to_bytes(HASH_BYTES, "big") + enc, digest_size=HASH_BYTES)
        return int.from_bytes(digest.digest(), "big")
    return chain_hash(parent, chunk)
