"""Token content as ordered spans: block descriptors, chained block hashes, edge labels.

Responsibility: say which tokens two sequences share without materialising one Python
int per token. A user-facing span is ``(content_id, n_tokens)``: the first ``n_tokens``
tokens of the content named ``content_id`` (an ``int`` or a ``str``). Equal ids are equal
tokens, so ``("sys", 100)`` is the first 100 tokens of ``("sys", 2000)``. Inside, a span is
a *segment* ``(content_id, start, n_tokens)``: tokens ``start .. start + n_tokens - 1`` of
that content (labels cut from the middle of a content need the offset).

Invariant: every segment tuple returned here is *normal*: no empty segment and no two
neighbours that continue the same content (``(a, 0, 5), (a, 5, 3)`` becomes ``(a, 0, 8)``).
The normal form of a token sequence is unique, so two sequences are equal exactly when their
normal tuples are equal, and a block's normal tuple is its content descriptor. All work is
O(segments) or O(blocks), never O(tokens). Block hashes are deterministic across processes
(BLAKE2b over a canonical byte encoding; never Python's salted ``hash``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from hashlib import blake2b
from operator import itemgetter
from typing import Any

from sim.memory.errors import AllocatorError

ContentId = int | str
#: ``(content_id, start, n_tokens)``
Segment = tuple[ContentId, int, int]
Segments = tuple[Segment, ...]

#: bytes in a block hash (128 bits: collisions are not a modelling concern)
HASH_BYTES = 16
#: h_0 of the chain (F19 sim decision: a fixed seed)
ROOT_HASH: int = int.from_bytes(blake2b(b"kvsim/prefix/root", digest_size=HASH_BYTES).digest())


def _check_id(cid: object) -> None:
    if isinstance(cid, bool) or not isinstance(cid, (int, str)):
        raise TypeError(f"content id must be an int or a str, got {cid!r}")


#: the content id types a segment takes as they are (no conversion, no check)
PLAIN_IDS = frozenset({int, str})


def segments(spans: Iterable[Sequence]) -> Segments:
    """Normalise spans ``(content_id, n_tokens)`` and/or segments ``(content_id, start, n)``.

    Zero-length spans are dropped; neighbours that continue the same content are merged.
    """
    out: list[Segment] = []
    last = None  # out[-1]
    for sp in spans:
        k = len(sp)
        if k == 3:
            cid, start, n = sp
        elif k == 2:
            cid, n = sp
            start = 0
        else:
            raise ValueError(f"a span is (content_id, n_tokens), got {sp!r}")
        if type(cid) not in PLAIN_IDS or type(n) is not int or type(start) is not int:
            _check_id(cid)  # the slow path: subclasses, bools, wrong types
            if not isinstance(n, int) or not isinstance(start, int):
                raise ValueError(f"span {sp!r}: start and n_tokens must be whole numbers >= 0")
        if n <= 0 or start < 0:
            if n < 0 or start < 0:
                raise ValueError(f"span {sp!r}: start and n_tokens must be whole numbers >= 0")
            continue
        if last is not None and last[0] == cid and last[1] + last[2] == start:
            last = out[-1] = (cid, last[1], last[2] + n)
        else:
            last = (cid, start, n)
            out.append(last)
    return tuple(out)


def checked_content(content: Any, n: int, op: str, kind: str) -> Segments:
    """An allocator's ``content=`` argument as normal segments of ``n`` tokens; misuse (not
    spans, or another length) raises ``AllocatorError`` naming the kind and operation.

    One segment of plain types (what a decode's content is) is normal as it stands: it is
    returned without a walk (``segments`` would return an equal tuple)."""
    if type(content) is tuple and len(content) == 1:
        seg = content[0]
        if (
            type(seg) is tuple
            and len(seg) == 3
            and type(seg[0]) in PLAIN_IDS
            and type(seg[1]) is int
            and type(seg[2]) is int
            and seg[1] >= 0
            and seg[2] == n > 0
        ):
            return content
    try:
        segs = segments(content)
    except (TypeError, ValueError) as exc:
        raise AllocatorError(f"{kind}: {op}: bad content: {exc}") from None
    if n_tokens(segs) != n:
        raise AllocatorError(f"{kind}: {op}: content holds {n_tokens(segs)} tokens, not {n}")
    return segs


def n_tokens(segs: Segments) -> int:
    """Total tokens of a segment tuple."""
    if len(segs) == 1:
        return segs[0][2]
    return sum([s[2] for s in segs])


def concat(*parts: Segments) -> Segments:
    """Concatenation of normal tuples, normalised at the joins.

    The first part, when it is a tuple of segments, is taken as normal (as everything here
    returns) and not re-walked, so a long context grows by one short part in O(1) Python
    steps; the other parts are normalised (any spans).
    """
    if not parts:
        return ()
    out = parts[0]
    if type(out) is not tuple or (out and (len(out[0]) != 3 or len(out[-1]) != 3)):
        out = segments(out)
    for part in parts[1:]:
        out = join(out, segments(part))
    return out


def slice_tokens(segs: Segments, start: int, stop: int) -> Segments:
    """Tokens ``[start, stop)`` of ``segs`` as a normal tuple (an edge label, a block).

    Walked from the nearer end (segments of ``n_tokens >= 0``; the result is the same
    either way): a turn's new tokens at the end of a long context (an agent's next prompt
    past what its sequence holds) cost the segments after ``start``, not all before it.
    The total that decides it is one C-level sum, taken for long tuples only."""
    if len(segs) > _WALK_FROM_START and start > 0:
        total = sum(map(_N_TOKENS, segs))
        if start > total - stop:
            return _slice_from_end(segs, start, stop, total)
    out: list[Segment] = []
    pos = 0
    for cid, s, n in segs:
        end = pos + n
        if end <= start:  # before the slice: only count it
            pos = end
            continue
        if pos >= stop:
            break
        a = start if start > pos else pos
        b = stop if stop < end else end
        if a < b:
            out.append((cid, s + a - pos, b - a))
        pos = end
    return tuple(out)


#: tuples up to this many segments are walked from the start without a look at the total
_WALK_FROM_START = 8
_N_TOKENS = itemgetter(2)


def _slice_from_end(segs: Segments, start: int, stop: int, total: int) -> Segments:
    """``slice_tokens`` walking back from the end (``total``: the tokens of ``segs``)."""
    out: list[Segment] = []
    end = total
    for i in range(len(segs) - 1, -1, -1):
        cid, s, n = segs[i]
        pos = end - n
        if pos >= stop:  # after the slice: only count it
            end = pos
            continue
        if end <= start:
            break
        a = start if start > pos else pos
        b = stop if stop < end else end
        if a < b:
            out.append((cid, s + a - pos, b - a))
        end = pos
    out.reverse()
    return tuple(out)


def drop_last(segs: Segments, n: int) -> Segments:
    """``segs`` without its last ``n`` tokens, walking from the end: O(segments dropped)."""
    i = len(segs)
    while n > 0 and i:
        i -= 1
        cid, s, k = segs[i]
        if k > n:
            return (*segs[:i], (cid, s, k - n))
        n -= k
    return segs[:i]


def common_prefix(a: Segments, b: Segments) -> int:
    """Length in tokens of the longest common prefix, compared span by span."""
    return match_at(a, 0, 0, b)[0]


def match_at(query: Segments, qi: int, qoff: int, label: Segments, limit: int | None = None):
    """Compare ``label`` (from its start) with ``query`` from cursor ``(qi, qoff)``.

    The cursor names segment ``qi`` of the query, ``qoff`` tokens into it. Returns
    ``(matched_tokens, qi, qoff)`` with the cursor advanced past the matched tokens; stops
    at the first differing token, at the end of either, or after ``limit`` tokens.
    """
    total = 0
    li = loff = 0
    nq, nl = len(query), len(label)
    while qi < nq and li < nl:
        qc, qs, qn = query[qi]
        lc, ls, ln = label[li]
        if qc != lc or qs + qoff != ls + loff:
            break
        run = min(qn - qoff, ln - loff)
        if limit is not None and total + run >= limit:
            run = limit - total
            total += run
            qoff += run
            if qoff == qn:
                qi, qoff = qi + 1, 0
            break
        total += run
        qoff += run
        loff += run
        if qoff == qn:
            qi, qoff = qi + 1, 0
        if loff == ln:
            li, loff = li + 1, 0
    return total, qi, qoff


def take(query: Segments, qi: int, qoff: int, n: int):
    """The next ``n`` tokens (fewer at the end) from a cursor: ``(segs, qi, qoff)``."""
    out: list[Segment] = []
    got = 0
    nq = len(query)
    while got < n and qi < nq:
        cid, s, sn = query[qi]
        run = min(sn - qoff, n - got)
        out.append((cid, s + qoff, run))
        got += run
        qoff += run
        if qoff == sn:
            qi, qoff = qi + 1, 0
    return tuple(out), qi, qoff


def advance(query: Segments, qi: int, qoff: int, n: int) -> tuple[int, int]:
    """The cursor ``n`` tokens further on."""
    nq = len(query)
    while n > 0 and qi < nq:
        run = min(query[qi][2] - qoff, n)
        n -= run
        qoff += run
        if qoff == query[qi][2]:
            qi, qoff = qi + 1, 0
    return qi, qoff


def blocks(segs: Segments, block_size: int, full_only: bool = True) -> list[Segments]:
    """Per-block content descriptors (normal tuples of ``block_size`` tokens).

    The partial last block is included only when ``full_only`` is false.
    """
    out: list[Segments] = []
    qi = qoff = 0
    while qi < len(segs):
        blk, qi, qoff = take(segs, qi, qoff, block_size)
        if full_only and n_tokens(blk) < block_size:
            break
        out.append(blk)
    return out


def encode(segs: Segments) -> bytes:
    """Canonical, unambiguous bytes of a normal tuple (length-prefixed strings)."""
    parts = []
    for cid, s, n in segs:
        if isinstance(cid, str):
            raw = cid.encode("utf-8")
            parts.append(b"s%d:%s,%d,%d;" % (len(raw), raw, s, n))
        else:
            parts.append(b"i%d,%d,%d;" % (cid, s, n))
    return b"".join(parts)


def chain_hash(parent: int, block: Segments, extra: bytes = b"") -> int:
    """F19: ``h_k = H(h_{k-1} || c_k)`` (plus optional extra keys, as vLLM's)."""
    h = blake2b(parent.to_bytes(HASH_BYTES, "big"), digest_size=HASH_BYTES)
    h.update(encode(block))
    if extra:
        h.update(b"|" + extra)
    return int.from_bytes(h.digest(), "big")


def block_hashes(
    segs: Segments, block_size: int, parent: int = ROOT_HASH, start_block: int = 0
) -> list[int]:
    """Chained hashes of the full blocks of ``segs`` (the partial tail is not hashed).

    ``parent``/``start_block`` continue a chain: hash blocks ``start_block..`` given the
    hash of block ``start_block - 1`` (so a growing sequence hashes each block once).
    """
    qi, qoff = advance(segs, 0, 0, start_block * block_size)
    return hash_blocks_from(segs, qi, qoff, block_size, parent)[0]


def hash_blocks_from(
    segs: Sequence[Segment], qi: int, qoff: int, block_size: int, parent: int = ROOT_HASH
) -> tuple[list[int], int, int]:
    """Chained hashes of the full blocks from cursor ``(qi, qoff)`` on, given the hash of
    the block before it: ``(hashes, qi, qoff)`` with the cursor after the last full block.

    Work is O(blocks hashed + segments crossed), so a growing sequence that keeps its
    chain hash and its cursor hashes each block once.
    """
    out: list[int] = []
    while True:
        blk, qi2, qoff2 = take(segs, qi, qoff, block_size)
        if n_tokens(blk) < block_size:
            return out, qi, qoff
        parent = chain_hash(parent, blk)
        out.append(parent)
        qi, qoff = qi2, qoff2


def rest(segs: Sequence[Segment], qi: int, qoff: int) -> list[Segment]:
    """The segments from cursor ``(qi, qoff)`` to the end (a normal list)."""
    if qi >= len(segs):
        return []
    if not qoff:
        return list(segs[qi:])
    cid, s, n = segs[qi]
    return [(cid, s + qoff, n - qoff), *segs[qi + 1 :]]


def split(segs: Sequence[Segment], n: int) -> tuple[Segments, list[Segment]]:
    """The first ``n`` tokens (``take`` from the start) and the segments after them
    (``rest``); one segment (a decode's tail) is cut without a walk."""
    if len(segs) == 1 and n > 0:
        seg = segs[0]
        cid, s, k = seg
        if n >= k:
            return (seg,), []
        return ((cid, s, n),), [(cid, s + n, k - n)]
    head, qi, qoff = take(segs, 0, 0, n)
    return head, rest(segs, qi, qoff)


def join(a: Segments, b: Segments) -> Segments:
    """Concatenation of two normal tuples, normalised at the join in O(1) Python steps
    (for growing a long label without re-normalising it)."""
    if a and b:
        x, y = a[-1], b[0]
        if x[0] == y[0] and x[1] + x[2] == y[1]:
            return (*a[:-1], (x[0], x[1], x[2] + y[2]), *b[1:])
    return a + b


def describe(segs: Segments) -> str:
    """Human form: ``sys[0:2000] tool:a[0:300]``."""
    return " ".join(f"{cid}[{s}:{s + n}]" for cid, s, n in segs)


def prefix_hashes(segs: Segments, positions: Sequence[int]) -> list[int]:
    """Hash of the prefix ``[0, p)`` for each ``p`` in ascending ``positions``.

    The hash depends only on the prefix's tokens (the encoding of its normal form), not
    on how spans were cut; it is not the block chain of F19 (prefixes need not end on a
    block boundary). Work: O(segments + positions).
    """
    out: list[int] = []
    h = blake2b(b"kvsim/prefix/prefix", digest_size=HASH_BYTES)
    i = pos = 0
    for p in positions:
        if p < pos:
            raise ValueError("positions must be ascending")
        while i < len(segs) and pos + segs[i][2] <= p:
            h.update(encode(segs[i : i + 1]))
            pos += segs[i][2]
            i += 1
        tail = h.copy()
        if p > pos:
            cid, s, _ = segs[i]
            tail.update(encode(((cid, s, p - pos),)))
        out.append(int.from_bytes(tail.digest(), "big"))
    return out


def extend_segments(cur: list[Segment], more: Iterable[Sequence]) -> None:
    """Append spans to a list of normal segments in place, keeping it normal."""
    for seg in segments(more):
        if cur:
            last = cur[-1]
            if last[0] == seg[0] and last[1] + last[2] == seg[1]:
                cur[-1] = (last[0], last[1], last[2] + seg[2])
                continue
        cur.append(seg)


def extend_normal(cur: list[Segment], segs: Segments) -> None:
    """``extend_segments`` for a ``segs`` that is already normal: only the join is checked."""
    if not segs:
        return
    if cur:
        last, first = cur[-1], segs[0]
        if last[0] == first[0] and last[1] + last[2] == first[1]:
            cur[-1] = (last[0], last[1], last[2] + first[2])
            cur.extend(segs[1:])
            return
    cur.extend(segs)
