"""The KV manager: the only door to KV memory, for the scheduler, the engine and the pauses.

Responsibility: compose one allocator (any kind made by ``make_allocator``) with the
bookkeeping the engine needs around it: admitting a request (a fresh sequence with a
prefix-cache lookup, or a held sequence extended by the new turn), growing a running
request, a hybrid model's windows during a prefill chunk (``step``: vLLM V1 keeps
``w - 1`` tokens plus the chunk; a new request's first chunk is counted with its
admission, ``admit``'s ``first_chunk``; ``settle_steps`` returns them to the decode rule),
preemption (drop and recompute), forks, releases, the memory side of a pause
(the *pause verbs* ``hold``, ``drop``, ``resume``, ``restore``, ``restored``, called only
by the engine's pause lifecycle), the KV held by paused trajectories with its byte-seconds (F29:
one accumulator per pause key, per owner and in total), pressure relief
(``drop_paused``/``drop_idle``), publication (a prefix cache sees an admitted request's
new KV only once ``scheduled`` or ``computed`` publishes it, by the allocator's
``publish_rule``; a reloaded context's only once ``restored`` says its copy-in ended),
and the memory side of the engine's fast path. Appends
that fit in capacity a sequence already holds are deferred (``sim.memory.deferred``);
``metrics()`` reports the allocator as if they had been made. Callers above memory use
only this object, never its allocator (a test checks it).

It knows requests only through the ``KVRequest`` protocol below, so this layer imports
nothing above ``sim.memory``; it never asks which allocator kind it holds: optional
abilities (``set_time``, ``prefix_metrics``, ``free_uncached``, ``uses_content``) are
declared on ``Allocator`` with no-op defaults. Memory never calls up into the engine.

Invariants: a sequence is held (paused) only while it is live and no request of it is
running or waiting; ``paused_tokens`` = the sum of the held sequences' tokens (logical:
a block shared by several counts once per sequence), and the allocator marks exactly the
held sequences held (``set_held``: its ``kv_slots`` counts the physical paused slots);
``paused_side_bytes`` = the held sequences' side-group bytes (a hybrid model's windows,
chunks, states; 0 for a dense model); held token-seconds only grow; every operation
that fails (a miss) leaves the allocator unchanged (a new sequence's admission counts its
first chunk's window blocks with its table's, so a refused one evicts nothing and counts
no look-up); the deferred ledger's own invariants (``DeferredAppends.check``); a request
whose KV is held back from look-ups (``_behind``) has a live sequence, and so has a
sequence whose reload is in flight (``_reloading``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from sim.errors import InvariantError
from sim.memory.base import Allocator, MemoryMetrics
from sim.memory.deferred import DecodeRun, DeferredAppends
from sim.memory.metrics import KVSlots

#: a named tuple made from its fields in one C call (its ``__new__`` is Python code)
_new_tuple = tuple.__new__


class KVRequest(Protocol):
    """What the KV manager reads and writes of a request (``sim.sched.Request``)."""

    seq_id: Hashable
    prompt_tokens: int
    output_limit: int  # tokens it may generate (prompt + this = its final length)
    num_computed: int
    lookup_tokens: int
    hit_tokens: int
    preempted_lookup_tokens: int  # looked up again after preemptions (counted apart, as vLLM)
    preempted_hit_tokens: int
    held_tokens: int
    preemptions: int
    admitted_s: float | None
    remote_tokens: int  # prompt tokens whose KV a prefill instance shipped (0: none)

    @property
    def num_tokens(self) -> int: ...

    def content_slice(self, start: int, stop: int) -> Any: ...


@dataclass(slots=True)
class Hold:
    """KV held by one idle sequence between two turns (F29: bytes x seconds)."""

    seq_id: Hashable
    owner: int  # trajectory id
    tokens: int
    start_s: float
    key: Hashable | None  # the pause it belongs to (None: held by a fork's child)
    retain_priority: float = 0.0  # an agent hint's eviction bias: lower is dropped first


@dataclass(frozen=True, slots=True)
class HeldTokenSeconds:
    """Token-seconds held idle (F29 / bytes per token), closed and open holds alike."""

    total: float
    by_owner: dict[int, float]
    by_key: dict[Hashable, float]
    #: a hybrid model's side groups' byte-seconds held (not per token; 0 for a dense
    #: model), in total and by owner
    side_byte_s: float = 0.0
    side_by_owner: dict[int, float] = field(default_factory=dict)
    #: the part held under no pause key (token-seconds, and side byte-seconds): fork
    #: branches held with their paused parent (``KVManager.fork``), which no pause owns
    unkeyed: float = 0.0
    side_unkeyed: float = 0.0


class KVManager:
    """One allocator plus admission, growth, preemption, forks, pauses and the fast path."""

    #: True: every admission asks the allocator, even one that must miss again (the
    #: reference the repeated-miss shortcut is tested against)
    retry_misses = False

    def __init__(self, allocator: Allocator, *, uses_content: bool | None = None) -> None:
        self.alloc = allocator  # read only by this layer and tests
        self.kv_bytes_per_token = allocator.kv_bytes_per_token
        self.block_size = allocator.block_size
        self.pool_bytes = allocator.pool_bytes
        self.uses_content = allocator.uses_content if uses_content is None else uses_content
        self.ledger = DeferredAppends(allocator, self.uses_content)
        #: ``grow_to(req, tokens)``: make the request's sequence hold ``tokens`` (hot path)
        self.grow_to = self.ledger.grow
        self.capacity_tokens = allocator.max_sequence_tokens  # on the empty pool
        self.now = 0.0  # simulation time of the current step (prefix caches' access times)
        self.paused: dict[Hashable, Hold] = {}  # insertion order = pause order
        #: live sequences' retain priorities (agent hints; absent = 0)
        self._retain: dict[Hashable, float] = {}
        self.paused_tokens = 0
        #: a hybrid model's side groups (windows, chunks, states; ``Allocator.kv_groups``)
        #: and what they hold for the paused sequences, by vLLM's rules (bytes)
        self._groups = allocator.kv_groups
        self.paused_side_bytes = 0.0
        self._side_byte_s = 0.0  # closed holds: side byte-seconds, in total and by owner
        self._side_byte_s_owner: dict[int, float] = {}
        self._token_s = 0.0  # closed holds: token-seconds in total, by owner, by key
        self._token_s_owner: dict[int, float] = {}
        self._token_s_key: dict[Hashable, float] = {}
        self._token_s_unkeyed = 0.0  # closed holds under no key: token- and side byte-s
        self._side_byte_s_unkeyed = 0.0
        self.held_drops = 0  # paused/idle sequences dropped to relieve memory pressure
        #: the last request whose new sequence missed, and (its tokens, its final length,
        #: ``Allocator.changes``) then: asked again with all three unchanged, ``admit``
        #: answers the same miss without asking the allocator
        self._missed: KVRequest | None = None
        #: (tokens, final tokens, allocator changes, whether its first steps were counted)
        self._missed_at: tuple[int, int, int, bool] = (0, 0, -1, False)
        self.repeated_misses = 0  # admissions answered that way (a statistic, not an output)
        self.forks_failed = 0  # forks that did not fit (the child recomputes)
        #: when a prefix cache may show an admitted request's new KV to look-ups
        #: (``Allocator.publish_rule``): "scheduled" (vLLM V1), "computed" (SGLang), None
        #: (no prefix cache: nothing is held back)
        self.publish_rule = allocator.publish_rule if self.uses_content else None
        #: requests whose sequence's new KV is held back from look-ups until ``scheduled``
        #: or ``computed`` publishes it (admission order)
        self._behind: dict[Hashable, KVRequest] = {}
        #: restored sequences whose copy-in is still in flight: nothing of them is shown to
        #: look-ups until ``restored``, which publishes this many tokens (the reloaded
        #: context, or more if its turn, submitted meanwhile, had more published)
        self._reloading: dict[Hashable, int] = {}
        #: a hybrid model whose sliding-window or chunked groups hold a prefill chunk's
        #: blocks (``step``); the sequences that hold one now, with their requests
        self.steps_matter = bool(self._groups is not None and self._groups.steps_matter)
        self._stepping: dict[Hashable, KVRequest] = {}
        #: the first steps the last missed admission was counted with ((tokens its hit
        #: served, the step): ``first_chunk``'s answers, which the token budget moves)
        self._missed_steps: tuple[tuple[int, tuple[int, int] | None], ...] = ()

    # ------------------------------------------------------------ what it holds
    @property
    def num_sequences(self) -> int:
        """Live sequences (running, waiting with held KV, paused)."""
        return self.alloc.num_sequences

    def is_live(self, seq: Hashable) -> bool:
        """Whether ``seq`` has KV in HBM."""
        return self.alloc.is_live(seq)

    def resident_tokens(self, seq: Hashable) -> int:
        """Tokens of ``seq`` in HBM (deferred appends included); 0 if it is not live."""
        if not self.alloc.is_live(seq):
            return 0
        return self.ledger.tokens(seq) or self.alloc.seq_tokens(seq)

    def step_of(self, seq: Hashable) -> tuple[int, int] | None:
        """The ``(computed, end)`` of the prefill chunk a live sequence's side groups hold
        blocks for (``Allocator.step_of``), or None (the decode rule of its tokens)."""
        return self.alloc.step_of(seq)

    def is_held(self, seq: Hashable) -> bool:
        """Whether ``seq`` is held idle between two turns (paused)."""
        return seq in self.paused

    @property
    def free_bytes(self) -> float:
        """Free bytes of the pool (not counting cached, evictable blocks)."""
        return self.alloc.free_bytes()

    @property
    def pool_blocks(self) -> int:
        """The blocks of the pool a sequence may use (``usable_blocks``; a block kind's)."""
        return int(self.alloc.pool.usable_blocks)

    def prefix_metrics(self) -> Any:
        """The prefix cache's own statistics, or None without one."""
        return self.alloc.prefix_metrics()

    def subscribe_prefix(self, listener: Any) -> bool:
        """Tell ``listener`` (a ``PrefixListener``: a cluster's prefix directory, the
        prefix-churn count) which blocks the prefix cache caches and evicts from now on,
        besides any listener subscribed before; False without a cache."""
        return self.alloc.subscribe_prefix(listener)

    # ----------------------------------------------------------------- time
    def set_time(self, now: float) -> None:
        """The engine's clock (passed on to a prefix cache that wants it)."""
        self.now = now
        self.alloc.set_time(now)

    # ------------------------------------------------------------ scheduler
    def can_ever_fit(self, tokens: int) -> bool:
        """Whether a sequence of ``tokens`` fits the empty pool at all."""
        return tokens <= self.capacity_tokens

    def admit(self, req: KVRequest, first_chunk: Callable[[int], int] | None = None) -> bool:
        """Give a waiting request its KV: extend its held sequence, or allocate a new one.

        A new sequence is matched against the prefix cache (hit tokens need no prefill);
        a held one (the trajectory kept its KV over the pause) starts computed up to what
        it holds. The whole prompt is allocated now (rule 3.4.2). False = does not fit;
        nothing changed.

        ``first_chunk(computed)``: the tokens the scheduler computes in the request's
        first step when it starts computed up to ``computed`` (its rule, asked, never
        re-derived here). For a hybrid model with windows or chunks (``steps_matter``) the
        new sequence's groups hold that step's blocks from the admission on, counted with
        the prompt's table blocks before any is taken (vLLM V1's ``allocate_slots``): when
        they do not all fit, the admission misses and nothing changes, the prefix cache
        and its statistics included. A held turn's sequence takes its chunk's blocks if
        they fit, else keeps the decode rule for that step (``step``).

        A new sequence asked again after a miss, with the same tokens, nothing changed
        in the allocator since (``Allocator.changes``) and the same first steps, misses
        without asking: a miss leaves the allocator as it was, but for a radix match's
        split of the node where the hit ends, which the first miss made (the retry would
        find it made). Under memory pressure the waiting queue's head is asked at every
        decision.
        """
        alloc, seq = self.alloc, req.seq_id
        n = req.num_tokens
        if alloc.is_live(seq):
            return self._extend(req, n, first_chunk)
        # the length it may reach: a reserving allocator (Orca) sizes its buffer from it
        final = max(req.prompt_tokens + req.output_limit, n)
        steps = None
        if first_chunk is not None and self.steps_matter:
            steps = self._first_steps(req, n, first_chunk)
        if (
            self._missed is req
            and self._missed_at == (n, final, alloc.changes, steps is not None)
            and not self.retry_misses
            and (steps is None or all(steps(h) == step for h, step in self._missed_steps))
        ):
            self.repeated_misses += 1  # nothing changed since it missed: it misses again
            return False
        content = req.content_slice(0, n) if self.uses_content else None
        hold = self.publish_rule is not None
        asked: list[tuple[int, tuple[int, int] | None]] = []
        first_step = None
        if steps is not None:
            first_step = _asking(steps, asked)
        result = alloc.allocate(
            seq, n, content=content, final_tokens=final, hold_back=hold, first_step=first_step
        )
        if not result:
            self._missed, self._missed_at = req, (n, final, alloc.changes, steps is not None)
            self._missed_steps = tuple(asked)
            return False
        if hold:
            self._behind[seq] = req
        self.ledger.track(seq)
        matched = min(result.matched_tokens, n - 1)
        req.num_computed = max(matched, self._remote(req, n))
        if req.preemptions:  # vLLM counts a preempted request's lookup apart (PrefixCacheStats)
            req.preempted_lookup_tokens += n
            req.preempted_hit_tokens += matched
        else:
            req.lookup_tokens += n
            req.hit_tokens += matched
        if steps is not None:
            if not asked:  # a kind without ``_allocate_stepped``: its first step now
                self._first_step(req, first_chunk)
            elif alloc.step_of(seq) is not None:
                self._stepping[seq] = req
        return True

    def _first_step(self, req: KVRequest, first_chunk: Callable[[int], int] | None) -> None:
        """The first chunk's window blocks of a sequence just admitted or extended without
        them (a held turn, or an allocator that does not count them with the admission):
        ``step`` if they fit, else the decode rule for that step."""
        if first_chunk is not None and self.steps_matter:
            chunk = first_chunk(req.num_computed)
            if chunk > 0:
                self.step(req, chunk)

    def _extend(self, req: KVRequest, n: int, first_chunk: Callable[[int], int] | None) -> bool:
        """``admit`` of a held sequence: its new turn's tokens, then its first chunk's
        window blocks if they fit (else the decode rule for that step)."""
        alloc, seq = self.alloc, req.seq_id
        self.ledger.flush(seq)
        held = alloc.seq_tokens(seq)
        if held >= n:
            raise InvariantError(f"{req!r}: sequence holds {held} tokens, request has {n}")
        content = req.content_slice(held, n) if self.uses_content else None
        hold = self.publish_rule is not None
        if not alloc.append(seq, n - held, content=content, hold_back=hold):
            return False
        if hold:
            self._behind[seq] = req
        self.ledger.track(seq)
        if req.admitted_s is None and req.preemptions == 0:
            req.held_tokens = held
        req.num_computed = max(held, self._remote(req, n))
        self._first_step(req, first_chunk)
        return True

    def _first_steps(
        self, req: KVRequest, n: int, first_chunk: Callable[[int], int]
    ) -> Callable[[int], tuple[int, int] | None]:
        """A new sequence's first step, ``(computed, end)``, when its prefix hit serves so
        many tokens: computed as ``admit`` will set it (the hit, at most ``n - 1``, or the
        shipped tokens), then the scheduler's chunk; None when it computes nothing."""
        remote = self._remote(req, n)

        def step(served: int) -> tuple[int, int] | None:
            computed = max(min(served, n - 1), remote)
            chunk = first_chunk(computed)
            return (computed, computed + chunk) if chunk > 0 else None

        return step

    # ---------------------------------------------------------- publication
    def scheduled(self, req: KVRequest, tokens: int) -> None:
        """The scheduler scheduled ``req`` up to ``tokens`` tokens this step (computed plus
        new). Under the "scheduled" rule (vLLM V1: ``cache_blocks`` inside
        ``allocate_slots``) the full blocks those tokens fill become visible to look-ups
        now, before the next request of the same pass looks up; else nothing changes."""
        if self.publish_rule == "scheduled" and req.seq_id in self._behind:
            self._publish(req.seq_id, min(tokens, req.num_tokens))

    def computed(self) -> None:
        """A step (or a run of steps) was committed: each held-back request's computed
        tokens have their KV, so look-ups see their full blocks from now on (SGLang's
        ``cache_unfinished_req`` after a chunk's forward; under the "scheduled" rule a
        run's later chunks, scheduled without a decision). ``sim.sched.Scheduler`` calls it
        after every commit (the engine has set the clock to the step's end), before the
        engine releases or holds a finished request's KV."""
        behind = self._behind
        if behind:
            for seq, req in list(behind.items()):
                self._publish(seq, req.num_computed)

    @property
    def holds_back(self) -> bool:
        """Some admitted request's KV is still held back from look-ups."""
        return bool(self._behind)

    def publishes_late(self, req: KVRequest) -> bool:
        """Whether ``req``'s KV is held back until its step is computed (the "computed"
        rule): a run of steps publishes each of its chunks at the start of the step after
        it, as stepping would (``apply_decode_run``), and evicts nothing meanwhile unless
        its publication can only cache blocks of its own (``plan_decode_run``)."""
        return self.publish_rule == "computed" and req.seq_id in self._behind

    def is_behind(self, req: KVRequest) -> bool:
        """Whether some of ``req``'s KV is still held back from look-ups."""
        return req.seq_id in self._behind

    def _publish(self, seq: Hashable, tokens: int) -> None:
        reloading = self._reloading
        if reloading and seq in reloading:  # its blocks are still being copied in
            reloading[seq] = max(reloading[seq], tokens)
            return
        if not self.alloc.is_live(seq) or self.alloc.publish(seq, tokens):
            del self._behind[seq]  # (nothing held back any more)

    @staticmethod
    def _remote(req: KVRequest, n: int) -> int:
        """Prompt tokens whose KV arrived from a prefill instance: computed without a step,
        but the last one, which the decode instance recomputes for its logits (vLLM
        does the same on a full prefix hit)."""
        return min(req.remote_tokens, n - 1)

    def step(self, req: KVRequest, n_new: int) -> bool:
        """A prefill chunk of ``n_new`` tokens of a request that holds them: its sliding
        windows and chunks hold, for this step, every block with a token in range of one
        it computes (vLLM V1: blocks behind ``num_computed - w + 1`` are freed, then the
        chunk's are allocated), until its next step; False = no room (nothing changed).
        No-op (True) for a model without such groups."""
        if not self.steps_matter:
            return True
        seq = req.seq_id
        start = req.num_computed
        if not self.alloc.set_step(seq, start, start + n_new):
            return False
        self._stepping[seq] = req
        return True

    def settle_steps(self) -> None:
        """At the start of a scheduling pass: a sequence whose prefill is done (its next
        step is a decode) goes back to the decode rule (vLLM frees the blocks behind the
        window at that step's allocation); O(sequences in a prefill chunk)."""
        stepping = self._stepping
        if not stepping:
            return
        alloc = self.alloc
        for seq, req in list(stepping.items()):
            if not alloc.is_live(seq) or alloc.step_of(seq) is None:
                del stepping[seq]
            elif (
                req.num_computed + 1 >= req.num_tokens
                and not alloc.is_held(seq)
                and alloc.set_step(seq, None)
            ):
                del stepping[seq]

    def _end_step(self, seq: Hashable) -> None:
        """Back to the decode rule before a hold or a fork: it only shrinks after a chunk
        that reached the sequence's end; one cut short (cancelled mid-prompt) keeps its
        chunk's blocks where the decode rule's do not fit."""
        req = self._stepping.pop(seq, None)
        if req is not None and not self.alloc.set_step(seq, None):
            self._stepping[seq] = req

    def grow(self, req: KVRequest, n_new: int) -> bool:
        """Room for ``n_new`` more computed tokens of a running request; False = miss."""
        return self.ledger.grow(req, req.num_computed + n_new)

    def grow_each(self, requests: Sequence[KVRequest], n_new: int = 1) -> int:
        """``grow(req, n_new)`` for each request in order (a step's decodes at once);
        returns how many grew: it stops at the first miss, which changes nothing."""
        return self.ledger.grow_each(requests, n_new)

    # ------------------------------------------------- the clock (``deferred``)
    def clock(self, req: KVRequest, order: int) -> bool:
        """``req`` decodes a token every step from now on (a scheduler's decode cohort):
        its ledger grows by the clock (``DeferredAppends.clock``); False where it cannot."""
        return self.ledger.clock(req, order)

    def unclock(self, seq: Hashable) -> None:
        self.ledger.settle(seq)

    @property
    def clocked(self) -> int:
        return self.ledger.clocked

    @property
    def clockable(self) -> bool:
        return self.ledger.clockable

    def settle_clock(self) -> None:
        self.ledger.settle_all()

    def advance(self, others: Sequence[tuple[int, KVRequest, int]], n_requests: int) -> bool:
        """One step's growth of the clocked sequences and of ``others`` (``(order,
        request, target)``) in one go (``DeferredAppends.advance``); False: nothing
        changed, grow them one by one."""
        return self.ledger.advance(1, others, n_requests)

    def preempt(self, req: KVRequest) -> None:
        """Drop a running request's KV (vLLM V1 recompute); it prefills again later."""
        self._free(req.seq_id)
        req.num_computed = 0
        req.remote_tokens = 0  # shipped KV (disaggregation) is gone too: recomputed here

    # ------------------------------------------------------------- workload
    def fork(self, parent: Hashable, child: Hashable) -> bool:
        """The child shares the parent's KV (copy-on-write or a deep copy, per kind); a
        child of a held parent is held too (by the same owner, under no pause key)."""
        if not self.alloc.is_live(parent):
            self.forks_failed += 1
            return False
        self.ledger.flush(parent)
        if self._stepping:
            self._end_step(parent)
        ok = bool(self.alloc.fork(parent, child))
        if not ok:
            self.forks_failed += 1
            return False
        self.ledger.track(parent, shared_tail=True)  # the next write copies the last block
        self.ledger.track(child, shared_tail=True)
        held = self.paused.get(parent)
        if parent in self._retain:
            self.retain(child, self._retain[parent])
        if held is not None:
            self._hold(child, held.owner, self.alloc.seq_tokens(child), None)
        return True

    def release(self, seq: Hashable) -> None:
        """Free a sequence nobody needs any more (no-op if already gone)."""
        self._unhold(seq)
        self._free(seq)

    # ------------------------------------------ pause verbs (the pause lifecycle's)
    def hold(self, seq: Hashable, owner: int, key: Hashable) -> None:
        """Keep an idle live sequence resident as a paused one (its turn ended; or KV
        prefetched before its tool returned): counted in the held byte-seconds of
        ``key`` and droppable under pressure."""
        if seq in self.paused or not self.alloc.is_live(seq):
            raise InvariantError(f"hold: sequence {seq!r} is held already or not live")
        self.ledger.flush(seq)
        if self._stepping:
            self._end_step(seq)
        self._hold(seq, owner, self.alloc.seq_tokens(seq), key)

    def retain(self, seq: Hashable, priority: float) -> None:
        """A live sequence's retain priority (an agent hint, vLLM #51428's Retain; 0 =
        none): its holds are dropped under pressure after those of lower priority, and a
        prefix cache evicts its blocks, once freed, after those of lower priority."""
        if not self.alloc.is_live(seq):
            raise InvariantError(f"retain: sequence {seq!r} is not live")
        if priority:
            self._retain[seq] = float(priority)
        elif self._retain.pop(seq, None) is None:
            return  # 0 and never set: nothing to change
        self.alloc.set_retain(seq, float(priority))
        held = self.paused.get(seq)
        if held is not None:
            held.retain_priority = float(priority)

    def drop(self, seq: Hashable, uncache: bool = False) -> None:
        """Free a sequence's KV now (drop and recompute); ``uncache`` drops its context
        from a prefix cache too."""
        self._unhold(seq)
        self._free(seq, uncache)

    def resume(self, seq: Hashable) -> None:
        """The trajectory's next turn was submitted: its hold ends (the KV stays)."""
        self._unhold(seq)

    def restore(self, seq: Hashable, tokens: int, content: Any = None) -> bool:
        """Take HBM blocks for ``tokens`` of an offloaded sequence about to be copied back
        (before the copy-in starts); False = no room, nothing changed. The sequence is
        live but neither held nor queued until its next turn is submitted. With a prefix
        cache its reloaded blocks (past what it hit) are held back from look-ups until
        ``restored`` says the copy-in ended (vLLM's KV connector caches a loaded request's
        blocks once the load is reported finished; SGLang's HiCache load-back makes its
        nodes usable once the load is done); freed before that, they are never cached."""
        if self.alloc.is_live(seq):
            raise InvariantError(f"restore: sequence {seq!r} is already resident")
        hold = self.publish_rule is not None
        if not self.alloc.allocate(seq, tokens, content=content, hold_back=hold):
            return False
        if hold:
            self._reloading[seq] = tokens
        self.ledger.track(seq)
        return True

    def restored(self, seq: Hashable) -> None:
        """The copy-in of a restored sequence ended: look-ups see its reloaded blocks
        from now on (and what its turn, submitted while it streamed, had published).
        No-op when nothing of ``seq`` waits for a copy-in (freed meanwhile, or no
        prefix cache)."""
        tokens = self._reloading.pop(seq, None)
        if tokens is None or not self.alloc.is_live(seq):
            return
        if self.alloc.publish(seq, tokens):
            self._behind.pop(seq, None)  # nothing of it is held back any more

    # -------------------------------------------------------------- pressure
    def drop_paused(self) -> Hashable | None:
        """Relieve pressure: drop the held KV of the lowest retain priority, the most
        recently held first among equals (LIFO, like vLLM's victim choice); its next turn
        recomputes. None when nothing is held."""
        if not self.paused:
            return None
        if self._retain:  # min keeps the first of equals: the most recent, iterated backwards
            seq = min(reversed(self.paused), key=lambda s: self.paused[s].retain_priority)
        else:
            seq = next(reversed(self.paused))
        self.release(seq)
        self.held_drops += 1
        return seq

    def drop_idle(self, seq: Hashable) -> bool:
        """Drop the held KV of a waiting request's sequence (pressure relief)."""
        if not self.alloc.is_live(seq):
            return False
        self.release(seq)
        self.held_drops += 1
        return True

    # --------------------------------------------------------------- inside
    def _free(self, seq: Hashable, uncache: bool = False) -> None:
        self.ledger.untrack(seq)
        if self._stepping:
            self._stepping.pop(seq, None)
        self._retain.pop(seq, None)
        self._behind.pop(seq, None)  # what it held back is freed, never cached
        if self._reloading:
            self._reloading.pop(seq, None)  # an abandoned reload: freed, never cached
        if not self.alloc.is_live(seq):
            return
        if uncache:
            self.alloc.free_uncached(seq)
        else:
            self.alloc.free(seq)

    def _hold(self, seq: Hashable, owner: int, tokens: int, key: Hashable | None) -> None:
        self.paused[seq] = Hold(seq, owner, tokens, self.now, key, self._retain.get(seq, 0.0))
        self.paused_tokens += tokens
        if self._groups is not None:
            self.paused_side_bytes += self._side_bytes(tokens)
        self.alloc.set_held(seq, True)

    def _side_bytes(self, tokens: int) -> float:
        """Bytes a sequence of ``tokens`` holds in the side groups (its windows' last
        blocks, its chunk, its states: ``KVGroups.side_bytes``); 0 for a dense model."""
        if self._groups is None:
            return 0.0
        return float(self._groups.side_bytes(tokens, self.block_size))

    def _unhold(self, seq: Hashable) -> None:
        held = self.paused.pop(seq, None)
        if held is None:
            return
        self.paused_tokens -= held.tokens
        self.alloc.set_held(seq, False)
        if self._groups is not None:
            side = self._side_bytes(held.tokens)
            self.paused_side_bytes = max(0.0, self.paused_side_bytes - side)
            side_s = side * (self.now - held.start_s)
            self._side_byte_s += side_s
            self._side_byte_s_owner[held.owner] = self._side_byte_s_owner.get(held.owner, 0.0) + side_s
            if held.key is None:
                self._side_byte_s_unkeyed += side_s
        token_s = held.tokens * (self.now - held.start_s)
        self._token_s += token_s
        self._token_s_owner[held.owner] = self._token_s_owner.get(held.owner, 0.0) + token_s
        if held.key is not None:
            self._token_s_key[held.key] = self._token_s_key.get(held.key, 0.0) + token_s
        else:
            self._token_s_unkeyed += token_s

    def held_token_seconds(self, now: float) -> HeldTokenSeconds:
        """Token-seconds held idle up to ``now`` (open holds counted until then), and a
        hybrid model's side groups' byte-seconds beside them."""
        total, owner, key = self._token_s, dict(self._token_s_owner), dict(self._token_s_key)
        side_byte_s, side_owner = self._side_byte_s, dict(self._side_byte_s_owner)
        unkeyed, side_unkeyed = self._token_s_unkeyed, self._side_byte_s_unkeyed
        for held in self.paused.values():
            token_s = held.tokens * (now - held.start_s)
            total += token_s
            owner[held.owner] = owner.get(held.owner, 0.0) + token_s
            if held.key is not None:
                key[held.key] = key.get(held.key, 0.0) + token_s
            else:
                unkeyed += token_s
            if self._groups is not None:
                side_s = self._side_bytes(held.tokens) * (now - held.start_s)
                side_byte_s += side_s
                side_owner[held.owner] = side_owner.get(held.owner, 0.0) + side_s
                if held.key is None:
                    side_unkeyed += side_s
        return HeldTokenSeconds(total, owner, key, side_byte_s, side_owner, unkeyed, side_unkeyed)

    @property
    def n_paused(self) -> int:
        """Sequences held idle between two turns."""
        return len(self.paused)

    @property
    def paused_bytes(self) -> float:
        """KV held by paused sequences (each sequence's tokens; shared blocks per
        sequence); a hybrid model's side groups add what each paused sequence holds in
        them by vLLM's rules (the last window's blocks, the current chunk, one state per
        state layer), so a paused sequence weighs what its groups really keep."""
        return self.paused_tokens * self.kv_bytes_per_token + self.paused_side_bytes

    def side_bytes_by_group(self) -> tuple[float, ...]:
        """Bytes each side group holds for the live sequences (``KVGroups.side`` order;
        a block a fork shares counted per sequence): O(live sequences), asked only to
        share the side bytes among several side groups; () for a dense model."""
        groups = self._groups
        if groups is None:
            return ()
        totals = [0.0] * len(groups.side)
        step_of, bs = self.alloc.step_of, self.block_size
        for seq in self.alloc.sequences():
            step = step_of(seq)
            if step is not None:  # a prefill chunk's blocks
                for i, g in enumerate(groups.side):
                    totals[i] += g.step_bytes(step[0], step[1], bs)
                continue
            tokens = self.resident_tokens(seq)
            for i, g in enumerate(groups.side):
                totals[i] += g.held_bytes(tokens, bs)
        return tuple(totals)

    # ---------------------------------------------------------------- engine
    def memory_state(self) -> tuple[MemoryMetrics, float]:
        """(the allocator's ``MemoryMetrics``, bytes of deferred tokens to add to its
        useful and logical bytes): the cheap form of ``metrics()`` for the recorder."""
        return self.alloc.metrics(), self.ledger.pending_tokens * self.kv_bytes_per_token

    def kv_slots(self) -> KVSlots:
        """Where the pool's slots are physically (``Allocator.kv_slots``), deferred tokens
        written (they fill slots their sequences already hold): O(1)."""
        slots = self.alloc.kv_slots()
        pending = self.ledger.pending_tokens
        if not pending:
            return slots
        allocated, unfilled, paused, cached, free, usable = slots
        return _new_tuple(KVSlots, (allocated, unfilled - pending, paused, cached, free, usable))

    def request_bytes(self, req: KVRequest) -> float:
        """KV bytes admitting waiting ``req`` would ask for (memory.parquet's
        ``phi_ext_next``): the tokens its held sequence lacks, or a reserving kind's
        reservation for a new one (before the address space rounds it), else its tokens."""
        alloc, n = self.alloc, req.num_tokens
        if alloc.is_live(req.seq_id):
            n -= alloc.seq_tokens(req.seq_id)
        else:  # contiguous/buddy with a ``reservation`` reserve more than the tokens
            n = alloc.reserve_tokens(n, max(req.prompt_tokens + req.output_limit, n))
        return max(n, 1) * self.kv_bytes_per_token

    def metrics(self, request_bytes: float | None = None) -> MemoryMetrics:
        """The allocator's ``MemoryMetrics`` as if every deferred token had been appended."""
        m = self.alloc.metrics(request_bytes)
        pending = self.ledger.pending_tokens
        if not pending:
            return m
        extra = pending * self.kv_bytes_per_token
        useful = m.useful_bytes + extra
        return m._replace(
            useful_bytes=useful,
            logical_bytes=m.logical_bytes + extra,
            eta_alloc=useful / m.allocated_bytes if m.allocated_bytes > 0 else None,
            eta_effective=useful / m.pool_bytes,
        )

    def flush_all(self) -> None:
        """Make every deferred append (before inspecting the allocator directly)."""
        self.ledger.flush_all()

    def take_step_activity(self) -> tuple[float, int]:
        """(bytes copied, cudaMalloc/cudaFree calls) since the previous call."""
        act = self.alloc.take_activity()
        return act.bytes_copied, act.buffer_allocs + act.buffer_frees

    def plan_decode_run(
        self,
        requests: Sequence[Any],
        max_steps: int,
        base_allocated: float | None = None,
        late: tuple[Any, int] | None = None,
        prefill: Any = None,
        apart: Sequence[tuple[int, Any]] | None = None,
    ) -> DecodeRun:
        """How many more decode steps of ``requests`` (and of ``late`` from its first
        step on) memory allows (see ``deferred``). ``prefill``: the run's prefill, if
        any; while its KV is held back until computed, the run evicts nothing (its chunks,
        published step by step, may lock cached blocks that an eviction would take) unless
        the allocator says its publication can only cache blocks of its own
        (``Allocator.publishes_apart``: then no eviction can take what it would lock)."""
        if base_allocated is None:
            base_allocated = self.alloc.metrics().allocated_bytes
        evict = (
            prefill is None
            or not self.publishes_late(prefill)
            or self.alloc.publishes_apart(prefill.seq_id)
        )
        return self.ledger.plan_run(requests, max_steps, base_allocated, late, evict, apart)

    def apply_decode_run(
        self,
        requests: Sequence[Any],
        steps: int,
        starts: Sequence[float],
        late: tuple[Any, int] | None = None,
        prefill: tuple[Any, Sequence[int]] | None = None,
        apart: Sequence[tuple[int, Any]] | None = None,
    ) -> None:
        """Append one token per step to each request's sequence, as ``grow`` would have.
        ``prefill``: the run's prefill and its chunks, one a step from the run's step 0;
        if its KV is published once computed, each chunk computed before the run's last
        step is published at the start of the step after it (the ``late`` request's last
        one at the start of its first decode step), stamped then, as the commit of its
        step would; the commit of the run's last step publishes the rest."""
        publishes: list[tuple[int, Callable[[], None]]] = []
        if prefill is not None and self.publishes_late(prefill[0]):
            req, chunks = prefill
            publish, seq, done = self._publish, req.seq_id, req.num_computed
            for f in range(1, min(len(chunks), steps) + 1):
                done += chunks[f - 1]
                publishes.append((f, partial(publish, seq, done)))
        self.ledger.apply_run(requests, steps, starts, self.set_time, late, publishes, apart)

    def check_invariants(self) -> None:
        """The allocator's own books, the deferred ledger's and the held set's."""
        self.alloc.check_invariants()
        self.ledger.check()
        for seq in self._behind:
            if not self.alloc.is_live(seq):
                raise InvariantError(f"held-back sequence {seq!r} is not live")
        for seq in self._reloading:
            if not self.alloc.is_live(seq):
                raise InvariantError(f"reloading sequence {seq!r} is not live")
        total = 0
        for seq, held in self.paused.items():
            if not self.alloc.is_live(seq):
                raise InvariantError(f"paused sequence {seq!r} is not live")
            if self.alloc.seq_tokens(seq) != held.tokens:
                raise InvariantError(f"paused sequence {seq!r} changed size while paused")
            total += held.tokens
            if not self.alloc.is_held(seq):
                raise InvariantError(f"paused sequence {seq!r} is not held in the allocator")
        if total != self.paused_tokens:
            raise InvariantError(f"paused tokens {self.paused_tokens} != {total}")
        side = sum(self._side_bytes(h.tokens) for h in self.paused.values())
        if abs(side - self.paused_side_bytes) > 1e-6 * max(side, 1.0):
            raise InvariantError(f"paused side bytes {self.paused_side_bytes} != {side}")
        if sum(map(self.alloc.is_held, self.alloc.sequences())) != len(self.paused):
            raise InvariantError("the allocator holds sequences the KV manager does not")


def _asking(
    steps: Callable[[int], tuple[int, int] | None],
    asked: list[tuple[int, tuple[int, int] | None]],
) -> Callable[[int], tuple[int, int] | None]:
    """``steps``, noting each question and its answer in ``asked``."""

    def step(served: int) -> tuple[int, int] | None:
        answer = steps(served)
        asked.append((served, answer))
        return answer

    return step


__all__ = ["DecodeRun", "HeldTokenSeconds", "Hold", "KVManager", "KVRequest"]
