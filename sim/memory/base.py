"""The allocator protocol: one interface for every way of placing KV bytes in a pool.

Responsibility: the public methods (``allocate``, ``append``, ``fork``, ``free``,
``metrics``, ``check_invariants`` and the engine's queries) live here once; they check for
misuse, keep the token counts, the fork lineage (useful bytes) and the copy counters, and
delegate the placement decision to a kind's ``_allocate``/``_append``/``_fork``/``_free``
(``_free_uncached`` for ``free_uncached``, ``_free`` unless a kind has a cache). Optional
abilities (``set_time``, ``prefix_metrics``, ``free_uncached``, ``uses_content``,
``subscribe_prefix``) are declared here with no-op defaults; ``PagedAllocator`` answers
them through its prefix index.
``set_held`` marks a live sequence as held (paused) or active, so that ``kv_slots`` can say
where the pool's slots are physically (active, paused, unfilled, cached, free) from
counters kept as operations happen (a kind with shared blocks keeps per-block counts), never
by scanning at query time.

Invariants (checked by ``check_invariants`` after any operation):
  * free + allocated + cached + remainder = pool, in bytes;
  * useful <= allocated and useful <= logical;
  * ``kv_slots``: allocated + cached + free = usable slots; unfilled + paused <= allocated;
    held sequences are live, and their tokens sum to ``_held_tokens``;
  * a miss (falsy return) changes nothing; misuse raises ``AllocatorError`` and changes
    nothing; a freed id may be allocated again.
"""

from __future__ import annotations

import math
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from operator import attrgetter, sub
from typing import Any, ClassVar, NamedTuple

from sim.errors import ConfigError, InvariantError
from sim.memory.errors import (
    AllocatorError,
    LiveSequenceError,
    UnknownSequenceError,
)
from sim.memory.fragmentation import eta_alloc, eta_effective, phi_ext
from sim.memory.lineage import TokenLineage
from sim.memory.metrics import Activity, AllocResult, KVSlots, MemoryMetrics, PrefixMetrics

#: a new sequence's first step as a function of the prompt tokens its prefix hit serves:
#: ``(computed, end)``, the tokens it computes, or None for a decode (``allocate``)
FirstStep = Callable[[int], tuple[int, int] | None]

#: a named tuple made from its fields in one C call (no Python ``__new__``)
_new_tuple = tuple.__new__


class Books(NamedTuple):
    """A kind's own part of the metrics: where the pool's bytes are (a named tuple: made
    at every engine decision)."""

    allocated_bytes: float
    free_bytes: float
    cached_bytes: float
    remainder_bytes: float
    free_extents: tuple[float, ...]  # contiguous holes in address order (bytes)


class _Counters:
    """Cumulative activity, one attribute per ``Activity`` field (the kinds add to them);
    ``Activity`` values are differences of two ``_snapshot``s."""

    __slots__ = Activity._fields

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)


#: the counters as a tuple in ``Activity`` field order (one C-level call)
_snapshot: Callable[[_Counters], tuple[Any, ...]] = attrgetter(*Activity._fields)


def positive_number(value: Any, field: str) -> float:
    """A positive finite byte figure; integral floats become ints so books stay exact."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"must be a number of bytes, got {value!r}", field=field)
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"must be positive, got {value!r}", field=field)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def positive_int(value: Any, field: str) -> int:
    """A positive whole number option (block sizes, token counts)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"must be a positive whole number, got {value!r}", field=field)
    return value


def flag(value: Any, field: str) -> bool:
    """A true/false option (YAML booleans only, not 0/1 or strings)."""
    if not isinstance(value, bool):
        raise ConfigError(f"must be true or false, got {value!r}", field=field)
    return value


def choice(value: Any, field: str, valid: tuple[str, ...]) -> str:
    """One of a closed set of names."""
    if value not in valid:
        raise ConfigError(f"must be one of {', '.join(valid)}; got {value!r}", field=field)
    return value


class Allocator(ABC):
    """Base of every allocator kind; subclasses implement the placement hooks."""

    kind: ClassVar[str] = "?"
    #: tokens per block for block kinds; None for contiguous kinds
    block_size: int | None = None
    #: whether ``allocate``/``append`` need the tokens' content (a prefix cache does)
    uses_content: ClassVar[bool] = False

    # ------------------------------------------------ optional abilities (no-op defaults)
    def set_time(self, now_s: float) -> None:  # noqa: B027 (an optional ability)
        """The engine's clock (a prefix cache stamps access times with it); no-op here."""

    def prefix_metrics(self) -> PrefixMetrics | None:
        """A prefix cache's own statistics (F17, cached vs active bytes, evictions); None
        for a kind without a prefix cache."""
        return None

    def reserve_tokens(self, n_tokens: int, final_tokens: int | None) -> int:
        """Tokens a new sequence of ``n_tokens`` (growing to ``final_tokens``) would take
        at allocation: just its tokens here; a reserving kind (``reservation``) more."""
        return n_tokens

    #: the groups counted beside the block table (``use_kv_groups``); None: every layer
    #: keeps every token, as before layer groups existed
    kv_groups: Any = None
    #: whether ``use_kv_groups`` counts a hybrid model's groups (``make_allocator`` gives
    #: a kind that does not the every-layer bytes per token instead)
    counts_kv_groups: ClassVar[bool] = False

    def use_kv_groups(self, groups: Any) -> None:
        """Count a hybrid model's other layer groups (``sim.sizing.group_demand.KVGroups``)
        in this empty allocator; a kind that cannot refuses with a ConfigError."""
        if groups is None or not groups.hybrid:
            return
        raise ConfigError(
            f"allocator kind {self.kind!r} does not count hybrid layer groups (sliding "
            "window, chunked local, state-space); use paged, radix or paged_hash",
            field="kind",
        )

    def subscribe_prefix(self, listener: Any) -> bool:
        """Add a ``PrefixListener`` to the prefix cache's (``PrefixIndex.subscribe``; every
        subscriber is told every report, in subscription order); False for a kind without
        a prefix cache."""
        return False

    def set_step(self, seq_id: Hashable, computed: int | None, end: int = 0) -> bool:
        """The step a live sequence runs now computes its tokens ``[computed, end)`` (a
        prefill chunk): a kind that counts a hybrid model's sliding-window or chunked
        groups per block holds their blocks of that step, as vLLM V1 does
        (``sim.sizing.group_demand.SPANS``), until the next ``set_step``, ``append``,
        hold or free; ``computed`` None: back to the decode rule of its tokens. False =
        no room (nothing changed). No-op (True) here: a kind without per-step groups."""
        return True

    def step_of(self, seq_id: Hashable) -> tuple[int, int] | None:
        """The ``(computed, end)`` of a live sequence's ``set_step``, or None (the decode
        rule of its tokens)."""
        return None

    def appends_in_bulk(self, seq_ids: Iterable[Hashable]) -> bool:
        """Whether the appends of a run of decode steps to these sequences may be made one
        per sequence (its whole growth, content and all) instead of block by block in step
        order, with the same outcome up to which free block ids each sequence gets: a prefix
        cache that says so (``PrefixIndex.appends_in_bulk``). False here: step order."""
        return False

    def publishes_apart(self, seq_id: Hashable) -> bool:
        """Whether publishing what ``hold_back`` keeps of live ``seq_id`` can only cache
        blocks of its own, none cached now that it would share and pin
        (``PrefixIndex.publishes_apart``): a run may then evict before its publication.
        False here (always correct)."""
        return False

    def append_in_bulk(
        self,
        items: Sequence[tuple[Hashable, int]],
        contents: Sequence[Any],
        times_s: Sequence[float | None],
    ) -> bool:
        """A decode run's appends one per sequence (``appends_in_bulk``), if the kind takes
        them so: for each item ``i`` in order, ``set_time(times_s[i])`` where that is not
        None, then ``append(seq_id, n_tokens, content=contents[i])``; True. The run was
        planned, so a miss is a broken book (``InvariantError``). False, with nothing
        changed, where the order of the appends could matter: the caller makes them in
        step order. A kind may make them in one pass, with the outcome of the appends one
        by one (the same block ids, cache, counters and peak). Lists of unequal lengths
        (``ValueError``) or an unknown sequence raise before anything changes."""
        if not len(items) == len(contents) == len(times_s):
            raise ValueError(
                f"{self.kind}: append_in_bulk: {len(items)} items, {len(contents)} contents, "
                f"{len(times_s)} times"
            )
        tokens = self._tokens
        for seq_id, _ in items:
            if seq_id not in tokens:
                raise self._unknown("append_in_bulk", seq_id)
        done = self._append_each_content(items, contents, times_s)
        if done is None:
            return False
        if not done:
            self._append_one_by_one(items, contents, times_s)
        return True

    def _append_each_content(
        self,
        items: Sequence[tuple[Hashable, int]],
        contents: Sequence[Any],
        times_s: Sequence[float | None],
    ) -> bool | None:
        """A kind's one pass over ``append_in_bulk``'s checked lists: True when it made the
        appends; None when the kind does not take them in bulk (step order), False when it
        does but they go one by one (nothing changed for either). Here no pass: None or
        False, as ``appends_in_bulk`` says."""
        return None if not self.appends_in_bulk([seq_id for seq_id, _ in items]) else False

    def _append_one_by_one(
        self,
        items: Sequence[tuple[Hashable, int]],
        contents: Sequence[Any],
        times_s: Sequence[float | None],
    ) -> None:
        for (seq_id, n_tokens), content, now_s in zip(items, contents, times_s, strict=True):
            if now_s is not None:
                self.set_time(now_s)
            if not self.append(seq_id, n_tokens, content=content):
                raise InvariantError(f"{self.kind}: append_in_bulk: {seq_id!r} missed")

    def bulk_free_blocks(self) -> int | None:
        """How many free blocks a batch of appends (``append_each``) may take, where an
        append into a sequence's own blocks does nothing but take free blocks (a block kind
        with no prefix cache and no side layer groups); None where an append can do more
        (evict, copy, resize a buffer): such appends are made one at a time. None here."""
        return None

    def appends_unordered(self) -> bool:
        """Whether a batch of appends that fit (``append_each``, within
        ``bulk_free_blocks``) has the same outcome in any order of its items (no block ids
        handed out: ``PagedAllocator`` in count mode), so a caller need not sort them.
        False here (always safe: the caller keeps its order)."""
        return False

    def append_each(self, items: Iterable[tuple[Hashable, int]]) -> None:
        """``append(seq_id, n_tokens)`` for each item, in order, without content: the caller
        knows they fit (``bulk_free_blocks``), so a miss is a broken book
        (``InvariantError``). A kind may make them in one pass, with the outcome of the
        appends one by one: the same block ids, counters and peak."""
        for seq_id, n_tokens in items:
            if not self.append(seq_id, n_tokens):
                raise InvariantError(f"{self.kind}: append_each: {seq_id!r} missed")

    def set_retain(self, seq_id: Hashable, priority: float) -> None:  # noqa: B027
        """A live sequence's retain priority (an agent hint): a prefix cache evicts its
        blocks, once released, after those of lower priority; no-op without a cache."""

    #: when a prefix cache lets look-ups see KV held back by ``hold_back`` (the engine's
    #: caller publishes it): ``"scheduled"`` (vLLM V1: ``cache_blocks`` in
    #: ``allocate_slots``, as the step that fills a block is scheduled), ``"computed"``
    #: (SGLang: the radix tree takes a chunk once its forward ran); None: no prefix cache,
    #: nothing is ever held back
    publish_rule: str | None = None

    def publish(self, seq_id: Hashable, tokens: int) -> bool:
        """Let look-ups see the first ``tokens`` tokens (whole blocks) of ``seq_id`` that
        ``hold_back`` kept from them; True when nothing of it is held back any more (its
        later appends are then seen as their blocks fill). Here nothing is ever held."""
        return True

    def _hold_back(self, seq_id: Hashable, tokens: int) -> bool:
        """Keep look-ups from seeing ``seq_id`` past ``tokens`` tokens (``allocate`` and
        ``append`` with ``hold_back``); True when a hold was set by this call. No-op here."""
        return False

    def _unhold(self, seq_id: Hashable) -> None:  # noqa: B027 (an optional ability)
        """Drop the hold ``_hold_back`` just set: its operation missed, nothing was cached."""

    def free_uncached(self, seq_id: Hashable) -> None:
        """Free a sequence and drop its context from a prefix cache too (a pause dropped for
        recompute that must really recompute); a kind without a cache just frees it."""
        self._drop(seq_id, self._free_uncached)

    def __init__(self, *, pool_bytes: float, kv_bytes_per_token: float) -> None:
        self.pool_bytes = positive_number(pool_bytes, "pool_bytes")
        self.kv_bytes_per_token = positive_number(kv_bytes_per_token, "kv_bytes_per_token")
        self._tokens: dict[Hashable, int] = {}  # live sequence -> tokens written
        self._lineage = TokenLineage()
        self._count = _Counters()
        self._mark = _snapshot(self._count)  # counters at the last take_activity()
        self._copied_mark = 0  # bytes_copied at the last take_copied_bytes()
        self._peak_allocated_bytes = 0
        self._held: set[Hashable] = set()  # live sequences held (paused): set_held
        self._held_tokens = 0  # their tokens
        #: a hybrid model's side token states (``KVGroups.useful_side_bytes`` of each live
        #: sequence, a fork's child from its fork on), kept per operation: bytes
        self._side_useful = 0.0
        self._side_since: dict[Hashable, int] = {}  # fork child -> tokens at its fork
        self._held_side_slack = 0.0  # held sequences' side slots less their side states
        #: state changes so far (a success of ``allocate``, ``append``, ``fork``, a
        #: ``free``, a prefix cache's ``set_retain``): while it stays put, an ``allocate``
        #: that missed misses again, changing nothing (``KVManager.admit`` skips such a
        #: retry). A miss never counts, nor ``set_held``: whether a sequence is paused
        #: changes which slots ``kv_slots`` calls paused, never what an allocation finds
        self.changes = 0

    # ----------------------------------------------------------------- public operations
    def allocate(
        self,
        seq_id: Hashable,
        n_tokens: int,
        *,
        content: Any = None,
        final_tokens: int | None = None,
        hold_back: bool = False,
        first_step: FirstStep | None = None,
    ) -> AllocResult:
        """Admit ``seq_id`` with an ``n_tokens`` prompt; falsy result = does not fit.

        ``final_tokens`` is the length the sequence is expected to reach (prompt + the
        output it may generate; None = unknown): a kind with a reservation policy turns it
        into the size it reserves now (``contiguous``/``buddy`` ``reservation``: Orca's
        window, next power of two, or exact oracle); every other kind ignores it.
        ``hold_back``: a prefix cache caches none of the prompt past its hit until
        ``publish`` says its KV is there (the engine's rule, ``publish_rule``).
        ``first_step``: the first step the sequence runs, as a function of the prompt
        tokens its prefix hit serves (``(computed, end)``, or None for a decode): a kind
        that counts a hybrid model's sliding-window or chunked groups per step holds that
        step's blocks from the admission on (as ``set_step``), counted with the table's
        before any block is taken, so a miss leaves the cache as it was (vLLM V1's
        ``allocate_slots``); every other kind ignores it.
        """
        n = _count(n_tokens, "allocate", minimum=1)
        if seq_id in self._tokens:
            raise LiveSequenceError(f"{self.kind}: allocate: sequence {seq_id!r} is already live")
        held = hold_back and self._hold_back(seq_id, 0)
        final = None
        if final_tokens is not None:
            final = _count(final_tokens, "allocate (final_tokens)", minimum=1)
        if first_step is not None:
            result = self._allocate_stepped(seq_id, n, content, final, first_step)
        elif final is None:
            result = self._allocate(seq_id, n, content)
        else:
            result = self._allocate_reserved(seq_id, n, content, final)
        if not result and held:
            self._unhold(seq_id)
        if result:
            self.changes += 1
            self._tokens[seq_id] = n
            self._lineage.add(seq_id, n)
            if self.kv_groups is not None:  # its first step's side states, or its tokens'
                self._side_useful += self._side_useful_of(seq_id, n)
            self._note_peak(self._allocated_bytes())
        return result

    def append(
        self, seq_id: Hashable, n_tokens: int = 1, *, content: Any = None, hold_back: bool = False
    ) -> bool:
        """Write ``n_tokens`` more tokens; False = does not fit (nothing changed).
        ``hold_back``: a prefix cache caches none of them until ``publish``."""
        tokens = self._tokens.get(seq_id)
        if tokens is None:
            raise self._unknown("append", seq_id)
        if hold_back:
            held = self._hold_back(seq_id, tokens)
            try:
                ok = self.append(seq_id, n_tokens, content=content)
            finally:
                if held and seq_id in self._tokens and self._tokens[seq_id] == tokens:
                    self._unhold(seq_id)  # it missed (or raised): nothing was cached
            return ok
        if self._held and seq_id in self._held:  # rare: the KV manager never grows one
            return self._append_held(seq_id, n_tokens, content)
        if n_tokens.__class__ is int and n_tokens > 0:  # the hot path: skip the full check
            n = n_tokens
        else:
            n = _count(n_tokens, "append", minimum=0)
            if n == 0:
                return True
        if not self._append(seq_id, tokens, n, content):
            return False
        self.changes += 1
        self._tokens[seq_id] = tokens + n
        self._lineage.extend(seq_id, n)
        if self.kv_groups is not None:
            self._side_grew(seq_id, tokens, tokens + n)
        allocated = self._allocated_bytes()
        if allocated > self._peak_allocated_bytes:
            self._peak_allocated_bytes = allocated
        return True

    def fork(self, parent_id: Hashable, child_id: Hashable) -> bool:
        """``child_id`` starts with all of ``parent_id``'s tokens; False = does not fit."""
        tokens = self._tokens.get(parent_id)
        if tokens is None:
            raise self._unknown("fork", parent_id)
        if child_id in self._tokens:
            raise LiveSequenceError(f"{self.kind}: fork: child {child_id!r} is already live")
        if not self._fork(parent_id, child_id, tokens):
            return False
        self.changes += 1
        self._tokens[child_id] = tokens
        self._lineage.fork(parent_id, child_id, tokens)
        if self.kv_groups is not None:
            self._side_since[child_id] = tokens  # the parent's states, counted once
        self._note_peak(self._allocated_bytes())
        return True

    def free(self, seq_id: Hashable) -> None:
        """Release ``seq_id``; its id may be allocated again afterwards."""
        self._drop(seq_id, self._free)

    def _drop(self, seq_id: Hashable, release: Callable[[Hashable, int], None]) -> None:
        tokens = self._tokens.get(seq_id)
        if tokens is None:
            raise self._unknown("free", seq_id)
        self.changes += 1
        if seq_id in self._held:
            self.set_held(seq_id, False)
        if self.kv_groups is not None:
            self._side_useful -= self._side_useful_of(seq_id, tokens)
            self._side_since.pop(seq_id, None)
        release(seq_id, tokens)
        del self._tokens[seq_id]
        self._lineage.remove(seq_id, tokens)

    # ------------------------------------------------------- held (paused) sequences
    def set_held(self, seq_id: Hashable, held: bool) -> None:
        """Mark a live sequence held (paused: its KV idles between two turns) or active
        again; ``kv_slots`` counts the filled slots only held sequences map as paused.
        O(1) for buffer kinds, O(its shared blocks) for block kinds (``PausedBlocks``)."""
        tokens = self._live_tokens(seq_id, "set_held")
        if (seq_id in self._held) == held:
            return
        if held:
            self._held.add(seq_id)
            self._held_tokens += tokens
        else:
            self._held.discard(seq_id)
            self._held_tokens -= tokens
        if self.kv_groups is not None:  # fixed while held: a held sequence never grows
            slack = self._side_slack_of(seq_id, tokens)
            self._held_side_slack += slack if held else -slack
        self._held_changed(seq_id, tokens, held)

    def is_held(self, seq_id: Hashable) -> bool:
        return seq_id in self._held

    # --------------------------------------------- side token states (hybrid models)
    def _side_grew(self, seq_id: Hashable, old: int, new: int) -> None:
        """A live sequence went from ``old`` to ``new`` tokens: its side states follow."""
        groups, since = self.kv_groups, self._side_since.get(seq_id, 0)
        self._side_useful += groups.useful_side_bytes(new, since) - groups.useful_side_bytes(old, since)

    def _side_useful_of(self, seq_id: Hashable, tokens: int) -> float:
        """A live sequence's side states: of its tokens, or of the prefill chunk it runs
        (``set_step``), less what a fork's child shares."""
        since = self._side_since.get(seq_id, 0)
        step = self.step_of(seq_id)
        if step is None:
            return self.kv_groups.useful_side_bytes(tokens, since)
        return self.kv_groups.useful_step_side_bytes(step[0], step[1], since)

    def _seq_side_slots(self, seq_id: Hashable) -> int:
        """Slots of the side blocks or extent a live sequence maps (0 here: no side)."""
        return 0

    def _side_slack_of(self, seq_id: Hashable, tokens: int) -> float:
        """Bytes of a live sequence's side slots that hold none of its side states (vLLM's
        padding layers, whole blocks' unfilled slots, a fork's shared states)."""
        own = self._seq_side_slots(seq_id) * self.kv_bytes_per_token
        return max(0.0, own - self._side_useful_of(seq_id, tokens))

    def _side_waste_slots(self, room: int) -> int:
        """Side slots of active sequences that hold no side state, whole (the states
        rounded to the nearest slot), at most ``room`` (the filled active slots): what
        ``kv_slots`` moves from the side groups' full slots to ``unfilled``. A held
        sequence's side slots stay paused in full (the HBM it keeps idle)."""
        m = self.kv_bytes_per_token
        waste = self._side_allocated_bytes() - self.side_useful_bytes() - self._held_side_slack
        return min(max(round(waste / m), 0), room)

    def side_useful_bytes(self) -> float:
        """A hybrid model's side token states resident (part of ``useful_bytes``): each
        live sequence's window, chunk and state (``KVGroups.useful_side_bytes``), a fork's
        child counting only what it wrote after its fork; 0 for a dense model. O(1).

        Never more than the side groups' allocated bytes: a fork's child writes into side
        blocks it still shares with its parent without copying them (the engine's model of
        side blocks: the child maps them until it moves past them), so its new states are
        counted within the bytes held, not beyond them."""
        if not self._side_useful:
            return 0.0
        return min(self._side_useful, self._side_allocated_bytes())

    def _append_held(self, seq_id: Hashable, n_tokens: int, content: Any) -> bool:
        """Append to a held sequence: as active for the write, held again after."""
        self.set_held(seq_id, False)
        try:
            return self.append(seq_id, n_tokens, content=content)
        finally:
            self.set_held(seq_id, True)

    def _held_changed(self, seq_id: Hashable, tokens: int, held: bool) -> None:  # noqa: B027
        """A kind whose blocks can be shared updates its per-block counts (none here)."""

    def kv_slots(self) -> KVSlots:
        """Where the usable slots are now (``KVSlots``), from the books: exact for kinds
        whose sequences share nothing (each holds its own tokens); the paged core and the
        buffer kinds answer from their own counters in O(1)."""
        b = self._books()
        m = self.kv_bytes_per_token
        allocated, cached, free = (round(x / m) for x in (b.allocated_bytes, b.cached_bytes,
                                                          b.free_bytes))  # fmt: skip
        unfilled = allocated - self._lineage.logical_tokens
        return KVSlots(allocated, unfilled, self._held_tokens, cached, free,
                       allocated + cached + free)  # fmt: skip

    # ------------------------------------------------------------------------ queries
    def seq_tokens(self, seq_id: Hashable) -> int:
        """Tokens written by a live sequence."""
        tokens = self._tokens.get(seq_id)
        if tokens is None:
            raise self._unknown("seq_tokens", seq_id)
        return tokens

    def sequences(self) -> Iterator[Hashable]:
        """Live sequence ids, in admission order."""
        return iter(self._tokens)

    def is_live(self, seq_id: Hashable) -> bool:
        return seq_id in self._tokens

    @property
    def num_sequences(self) -> int:
        return len(self._tokens)

    def useful_tokens(self) -> int:
        """Distinct token states of live sequences (see ``lineage``)."""
        return self._lineage.distinct_tokens

    def logical_tokens(self) -> int:
        return self._lineage.logical_tokens

    def take_copied_bytes(self) -> float:
        """Bytes copied since the previous call (for the step that caused them)."""
        now = self._count.bytes_copied
        copied, self._copied_mark = now - self._copied_mark, now
        return copied

    def take_activity(self) -> Activity:
        """Everything done since the previous call (copies, buffers, blocks)."""
        now = _snapshot(self._count)
        activity = _new_tuple(Activity, map(sub, now, self._mark))  # (``_make``, no Python frame)
        self._mark = now
        return activity

    @abstractmethod
    def can_allocate(self, n_tokens: int, *, content: Any = None) -> bool:
        """Whether ``allocate`` of ``n_tokens`` (with ``content``) would succeed now."""

    @abstractmethod
    def can_append(self, seq_id: Hashable, n_tokens: int = 1) -> bool:
        """Whether ``append(seq_id, n_tokens)`` would succeed now."""

    @abstractmethod
    def can_fork(self, parent_id: Hashable) -> bool:
        """Whether ``fork(parent_id, new_id)`` would succeed now."""

    @abstractmethod
    def blocks_needed(self, seq_id: Hashable, n_tokens: int = 1) -> int:
        """Pool units an append would take: blocks (CoW included), or 0/1 new buffer."""

    @abstractmethod
    def seq_capacity_tokens(self, seq_id: Hashable) -> int:
        """Token slots reserved for a live sequence (buffer size or blocks * block_size)."""

    @property
    @abstractmethod
    def max_sequence_tokens(self) -> int:
        """The longest prompt an empty pool of this kind admits."""

    # ------------------------------------------------------------------------ metrics
    def free_bytes(self) -> float:
        """``metrics().free_bytes`` without the rest of the snapshot (a pause decision
        reads only this); the block and buffer kinds answer from one counter."""
        return self._books().free_bytes

    def metrics(self, request_bytes: float | None = None) -> MemoryMetrics:
        """Snapshot of F7-F10; ``phi_ext`` is F9 for a request of ``request_bytes``.

        Made at every engine decision (the memory row): the tuple is made in one C call (a
        named tuple's ``__new__`` is Python code)."""
        books = self._books()
        m = self.kv_bytes_per_token
        side = self.side_useful_bytes()
        useful = self.useful_tokens() * m + side
        allocated, free_extents, pool = books.allocated_bytes, books.free_extents, self.pool_bytes
        return _new_tuple(MemoryMetrics, (
            pool,  # pool_bytes
            useful,  # useful_bytes
            # the side states are each sequence's own (not shared), so logical counts them
            # as useful does: logical / useful stays the sharing gain on a hybrid model
            self.logical_tokens() * m + side,  # logical_bytes
            allocated,  # allocated_bytes
            books.free_bytes,  # free_bytes
            books.cached_bytes,  # cached_bytes
            books.remainder_bytes,  # remainder_bytes
            free_extents,  # free_extents
            max(free_extents) if free_extents else 0,  # largest_free_bytes
            eta_alloc(useful, allocated),  # eta_alloc (F8)
            eta_effective(useful, pool),  # eta_effective (F10)
            phi_ext(free_extents, request_bytes, self.block_size is not None),  # phi_ext (F9)
            self._peak_allocated_bytes,  # peak_allocated_bytes
            self._count.bytes_copied,  # bytes_copied
            self._count.cow_copies,  # cow_copies
            len(self._tokens),  # num_sequences
            self._side_allocated_bytes(),  # side_allocated_bytes
        ))  # fmt: skip

    def check_invariants(self) -> None:
        """Raise InvariantError naming the first broken invariant."""
        self._lineage.check(self._tokens)
        self._check_kind()
        b = self._books()
        total = b.free_bytes + b.allocated_bytes + b.cached_bytes + b.remainder_bytes
        if not _same(total, self.pool_bytes):
            raise InvariantError(
                f"{self.kind}: free {b.free_bytes} + allocated {b.allocated_bytes} + cached "
                f"{b.cached_bytes} + remainder {b.remainder_bytes} = {total} != pool "
                f"{self.pool_bytes}"
            )
        if not _same(sum(b.free_extents), b.free_bytes):
            raise InvariantError(f"{self.kind}: free extents do not sum to free bytes")
        if min(b.free_bytes, b.allocated_bytes, b.cached_bytes, b.remainder_bytes) < 0:
            raise InvariantError(f"{self.kind}: a negative figure in the books: {b}")
        useful = self.useful_tokens() * self.kv_bytes_per_token + self.side_useful_bytes()
        self._check_side_useful()
        if useful > b.allocated_bytes + 1e-9 * self.pool_bytes:
            raise InvariantError(f"{self.kind}: useful {useful} > allocated {b.allocated_bytes}")
        if self.useful_tokens() > self.logical_tokens():
            raise InvariantError(f"{self.kind}: useful tokens exceed logical tokens")
        if b.allocated_bytes > self._peak_allocated_bytes:
            raise InvariantError(f"{self.kind}: allocated bytes above the recorded peak")
        self._check_slots()

    def _check_side_useful(self) -> None:
        """The side states' running figures against a scan of the live sequences, and,
        without forks, within the side groups' allocated bytes (no clipping needed)."""
        groups = self.kv_groups
        if groups is None:
            return
        since = self._side_since
        scan = sum(self._side_useful_of(s, t) for s, t in self._tokens.items())
        if not math.isclose(scan, self._side_useful, rel_tol=1e-9, abs_tol=1e-3):
            raise InvariantError(f"{self.kind}: side states {self._side_useful} != a scan {scan}")
        if not since and scan > self._side_allocated_bytes() + 1e-9 * self.pool_bytes:
            raise InvariantError(f"{self.kind}: side states {scan} > side bytes allocated")
        held = sum(self._side_slack_of(s, self._tokens[s]) for s in self._held)
        if not math.isclose(held, self._held_side_slack, rel_tol=1e-9, abs_tol=1e-3):
            raise InvariantError(f"{self.kind}: held side slack {self._held_side_slack} != {held}")
        if not since.keys() <= self._tokens.keys():
            raise InvariantError(f"{self.kind}: a fork's side start names a sequence not live")

    def _check_slots(self) -> None:
        """``kv_slots`` against the books and the held sequences."""
        if not self._held <= self._tokens.keys():
            raise InvariantError(f"{self.kind}: a held sequence is not live")
        if sum(self._tokens[s] for s in self._held) != self._held_tokens:
            raise InvariantError(f"{self.kind}: held tokens counter != their sum")
        s, m = self.kv_slots(), self.kv_bytes_per_token
        b = self._books()
        if s.allocated + s.cached + s.free != s.usable or not _same(
            s.usable * m + b.remainder_bytes, self.pool_bytes
        ):
            raise InvariantError(f"{self.kind}: slots {s} do not tile the pool")
        if min(s) < 0 or s.unfilled + s.paused > s.allocated:
            raise InvariantError(f"{self.kind}: slots {s} out of range")
        if not _same(s.allocated * m, b.allocated_bytes):
            raise InvariantError(f"{self.kind}: allocated slots {s.allocated} != the books")

    # ------------------------------------------------------------- hooks for the kinds
    @abstractmethod
    def _allocate(self, seq_id: Hashable, n_tokens: int, content: Any) -> AllocResult:
        """Place a new sequence; return a falsy result (changing nothing) on a miss."""

    def _allocate_reserved(
        self, seq_id: Hashable, n_tokens: int, content: Any, final_tokens: int
    ) -> AllocResult:
        """``_allocate`` knowing the sequence's expected final length; a kind without a
        reservation policy places the prompt alone (the default)."""
        return self._allocate(seq_id, n_tokens, content)

    def _allocate_stepped(
        self,
        seq_id: Hashable,
        n_tokens: int,
        content: Any,
        final_tokens: int | None,
        first_step: FirstStep,
    ) -> AllocResult:
        """``_allocate`` knowing the sequence's first step (``allocate``'s ``first_step``);
        a kind without per-step groups places the prompt as without it (the default).

        The hook of a kind that implements ``set_step``: it counts the first step's
        blocks with the prompt's (asking ``first_step``) before it takes any. A kind that
        implements ``set_step`` but not this hook never asks ``first_step``; the KV
        manager then gives the new sequence its first step by ``set_step`` after the
        admission, if its blocks fit (else the decode rule for that step)."""
        if final_tokens is None:
            return self._allocate(seq_id, n_tokens, content)
        return self._allocate_reserved(seq_id, n_tokens, content, final_tokens)

    @abstractmethod
    def _append(self, seq_id: Hashable, tokens: int, n_tokens: int, content: Any) -> bool:
        """Make room for ``n_tokens`` after ``tokens``; False (changing nothing) on a miss."""

    @abstractmethod
    def _fork(self, parent_id: Hashable, child_id: Hashable, tokens: int) -> bool:
        """Give ``child_id`` the parent's state; False (changing nothing) on a miss."""

    @abstractmethod
    def _free(self, seq_id: Hashable, tokens: int) -> None:
        """Release a live sequence's memory."""

    def _free_uncached(self, seq_id: Hashable, tokens: int) -> None:
        """Release it and drop its context from a prefix cache (none here: ``_free``)."""
        self._free(seq_id, tokens)

    @abstractmethod
    def _allocated_bytes(self) -> float:
        """Bytes reserved by live sequences now (cheap: called after every operation)."""

    def _side_allocated_bytes(self) -> float:
        """Allocated bytes of the groups counted beside the block table (none here)."""
        return 0

    @abstractmethod
    def _books(self) -> Books:
        """Where the pool's bytes are now."""

    @abstractmethod
    def _check_kind(self) -> None:
        """Kind-specific invariants; raise InvariantError."""

    # ---------------------------------------------------------------------- helpers
    def _note_peak(self, allocated_bytes: float) -> None:
        if allocated_bytes > self._peak_allocated_bytes:
            self._peak_allocated_bytes = allocated_bytes

    def _add_copy(self, n_bytes: float) -> None:
        self._count.bytes_copied += n_bytes

    def _unknown(self, op: str, seq_id: Hashable) -> UnknownSequenceError:
        return UnknownSequenceError(
            f"{self.kind}: {op}: sequence {seq_id!r} is not live "
            "(never allocated, or already freed)"
        )

    def _live_tokens(self, seq_id: Hashable, op: str) -> int:
        tokens = self._tokens.get(seq_id)
        if tokens is None:
            raise self._unknown(op, seq_id)
        return tokens

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} pool_bytes={self.pool_bytes} "
            f"kv_bytes_per_token={self.kv_bytes_per_token} sequences={len(self._tokens)}>"
        )


def _count(value: Any, op: str, *, minimum: int) -> int:
    """A whole token count >= minimum (numpy integers accepted, floats and bools refused)."""
    if isinstance(value, bool):
        raise AllocatorError(f"{op}: token count must be a whole number, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise AllocatorError(f"{op}: token count must be a whole number, got {value!r}") from None
    if n < minimum:
        raise AllocatorError(f"{op}: token count must be >= {minimum}, got {n}")
    return n


def checked_count(value: Any, op: str, *, minimum: int = 0) -> int:
    """Public form of the token-count check, for the kinds' query methods."""
    return _count(value, op, minimum=minimum)


def _same(a: float, b: float) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-6)
