"""vLLM V1's scheduling loop (``vllm/v1/core/sched/scheduler.py``, 2025-2026), as a pure object.

Per step, with a token budget of ``max_num_batched_tokens``:
1. RUNNING requests in admission order: each gets ``num_tokens - num_computed`` new
   tokens, capped by ``long_prefill_token_threshold`` (0 = no cap) and by the budget left.
   If its KV cannot grow, preempt ``running.pop()`` (the most recently admitted): free its
   blocks (a prefix cache keeps them cached), reset its computed tokens to 0 and put it at
   the head of WAITING; repeat until the request fits or is itself the victim.
2. If nothing was preempted this step: WAITING requests in FCFS order while the budget
   lasts and ``len(running) < max_num_seqs``; admission looks up the prefix cache (or
   extends the trajectory's held sequence) and allocates the whole prompt (rule 3.4.2;
   vLLM V1 allocates per chunk). The first request that does not fit stops admission.
3. Each request's scheduled tokens are published to a prefix cache as it is scheduled
   (``KVManager.scheduled``: vLLM's ``cache_blocks`` in ``allocate_slots``, before the next
   admission looks up); the base class publishes computed KV after ``commit``.
4. A hybrid model's sliding-window and chunked groups follow vLLM per chunk: every prefill
   chunk scheduled (running or admitted) holds their blocks of ``w - 1`` tokens plus the
   chunk (``KVManager.step``); if they do not fit, a running request preempts as in 1.
   and a new one is not admitted (its admission undone); at the start of each decision
   the sequences whose prompt is done go back to the decode rule (``settle_steps``), and
   a batch with a prefill chunk is not run ahead (``run_chunks`` None).
``chunked_prefill: false`` is the monolithic mode: a prefill is never split; it must fit
the budget left, except that the first prefill of a step may exceed it (otherwise a
prompt longer than the budget could never run; vLLM instead requires the budget to be at
least ``max_model_len``). Running decodes still ride in that step.

Context window (vLLM's ``max_model_len``, by default the model's
``max_position_embeddings``; the run fills it in from the model profile): a prompt that
leaves no room for one output token is rejected (``rejected_too_long``), and generation
stops when prompt + generated tokens reach the window (finish reason ``length``). A
request whose prompt + output (so capped) can never fit the KV pool is rejected
(``rejected_never_fits``).

Additions for held agent state (sim decisions): when nothing runs and the head of
WAITING does not fit, the KV held by paused trajectories is dropped, the lowest retain
priority (an agent hint) first, most recently paused first among equals, then the held KV of other waiting requests, then the head's own; a request that
does not fit an otherwise empty pool is rejected (``rejected_never_fits``).

Speculative decoding (``speculative`` set; ``sim.sched.speculative`` has the rules): every
decode is a verify of ``1 + d`` tokens with ``1 + d + lookahead`` KV slots, its accepted
tokens the expected value; no step runs as part of a run (each is scheduled alone). A turn
whose KV is held for the next turn never reserves slots past its final token (the held
sequence must be exactly its tokens; vLLM would free the request and keep only its
computed blocks); a last turn reserves as vLLM does, to the end.

The decode clock (``sim.sched.cohort``, docs/engine.md "The decode cohort"): where the KV
ledger can clock them (no prefix cache, no hybrid side groups, a block kind, no
speculative decoding), running decodes advance by one shared counter and the ledger grows
their sequences by ticks, so a decision touches the requests that changed, not every
decode; elsewhere each decode is scheduled and committed one by one. Results are the same
either way.

Invariant: see ``sched.base``; plus: a step has at most ``max_num_batched_tokens`` tokens
except for a monolithic prefill alone in its step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from itertools import islice
from typing import Literal

from pydantic import ConfigDict, Field

from sim.config_model import ConfigModel
from sim.errors import InvariantError
from sim.memory.kv_manager import KVManager
from sim.prefix.spans import common_prefix
from sim.sched.base import Scheduler, register_scheduler
from sim.sched.cohort import DecodeCohort, _serial
from sim.sched.plan import BatchPlan, CommitResult, RunLimit, steps_to_first_finish
from sim.sched.request import (
    CANCELLED,
    CANCELLED_REASON,
    NEVER_FITS,
    REJECTED,
    RUNNING,
    TOO_LONG,
    WAITING,
    Request,
)
from sim.sched.speculative import accept


class VllmV1Config(ConfigModel):
    """Scenario key ``scheduler`` for ``kind: vllm_v1``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["vllm_v1"] = "vllm_v1"
    max_num_batched_tokens: int = Field(8192, ge=1)  # token budget per step (C_budget, F27)
    max_num_seqs: int = Field(1024, ge=1)  # running requests at most
    chunked_prefill: bool = True  # false: monolithic prefill (the chapter's ITL spike)
    long_prefill_token_threshold: int = Field(0, ge=0)  # chunk cap C_chunk; 0 = budget only
    # context window (prompt + output); None = the model profile's max_context_tokens
    # (filled in by the run; a profile without one has no window)
    max_model_len: int | None = Field(None, ge=2)
    # allow max_model_len above the model's window (vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN)
    allow_long_context: bool = False
    # vLLM's async scheduling (step N + 1 is planned while step N runs): the cost model's
    # per-step host overhead overlaps the GPU, a step costs max(host, GPU). auto = vLLM's
    # default, on (docs/validation.md); it changes nothing when cost.step_overhead_s is 0
    async_scheduling: bool | Literal["auto"] = "auto"

    @property
    def async_scheduling_on(self) -> bool:
        """``async_scheduling`` with ``auto`` resolved: on, vLLM 0.19's default."""
        return self.async_scheduling is not False


def lone_prefill_chunks(cfg: VllmV1Config, new_tokens: int) -> list[int]:
    """The chunks in which a ``vllm_v1`` scheduler of ``cfg`` prefills ``new_tokens`` of a
    request running alone: the budget, capped by ``long_prefill_token_threshold``; one
    chunk in monolithic mode (none for no tokens). ``kvsim breakeven`` asks it with the
    default config for the engine's count of a recompute."""
    if not cfg.chunked_prefill:
        return [new_tokens] if new_tokens > 0 else []
    cap = cfg.max_num_batched_tokens
    if 0 < cfg.long_prefill_token_threshold < cap:
        cap = cfg.long_prefill_token_threshold
    full, rest = divmod(new_tokens, cap)
    return [cap] * full + ([rest] if rest else [])


@register_scheduler
class VllmV1Scheduler(Scheduler):
    """Token budget, running first then waiting FCFS, chunked prefill, recompute preemption."""

    name = "vllm_v1"
    Config = VllmV1Config
    supports_runs = True
    publishes_scheduled = True
    supports_speculative = True
    config: VllmV1Config

    def __init__(self, config: VllmV1Config, kv: KVManager) -> None:
        super().__init__(config, kv)
        #: the running decodes advanced by one counter (``sim.sched.cohort``; not used
        #: with speculative decoding, whose decodes are verifies, nor where the KV
        #: ledger cannot clock them: ``_joins``)
        self.cohort = DecodeCohort(self._clock, self._unclock)
        self._serials = 0
        #: the last plan and its decodes outside the cohort (``_schedule_running``)
        self._plan: BatchPlan | None = None
        self._others: list[Request] = []
        self._on = False  # this decision keeps its decodes in the cohort (``_joins``)
        self._can_join: bool | None = None

    def _joins(self) -> bool:
        """Whether decodes join the cohort: not under speculative decoding (a decode is a
        verify), and only where the KV ledger can clock them too (without it the cohort
        saves nothing: the ledger's pass over the decodes would read every member's
        counters through its properties). Asked once: both are fixed when the run starts."""
        if self._can_join is None:
            self._can_join = self.speculative is None and self.kv.clockable
        return self._can_join

    def _clock(self, req: Request) -> None:
        self.kv.clock(req, req._serial)

    def _unclock(self, req: Request) -> None:
        self.kv.unclock(req.seq_id)

    @property
    def async_scheduling(self) -> bool:
        return self.config.async_scheduling_on

    @property
    def token_budget(self) -> int:
        return self.config.max_num_batched_tokens

    # ------------------------------------------------------------------ queues
    def add(self, req: Request) -> bool:
        """Queue a new request; False (and status REJECTED) if it can never run."""
        cap = self.config.max_model_len
        if cap is not None and req.prompt_tokens >= cap:
            req.end(REJECTED, TOO_LONG)
            return False
        req.cap_output(cap)
        if not self.kv.can_ever_fit(req.prompt_tokens + req.output_limit - 1):
            req.end(REJECTED, NEVER_FITS)
            return False
        req.status = WAITING
        self.waiting.append(req)
        return True

    def cancel(self, req: Request) -> bool:
        """Remove a queued or running request (a pruned branch); True if it was there."""
        if req.status == RUNNING:
            self.running.remove(req)
            self.cohort.leave(req)
        elif req.status == WAITING and req in self.waiting:
            self.waiting.remove(req)
        else:
            return False
        req.end(CANCELLED, CANCELLED_REASON)
        return True

    # ---------------------------------------------------------------- schedule
    def schedule(self) -> BatchPlan:
        """Build one step's batch (see the module docstring)."""
        plan = BatchPlan()
        if self.kv.steps_matter:  # finished prompts: windows back to the decode rule
            self.kv.settle_steps()
        on = self._can_join  # (``_joins``, asked once)
        self._on = self._joins() if on is None else on
        budget = self._schedule_running(plan, self.config.max_num_batched_tokens)
        n_running = len(plan.decodes)
        if not plan.preempted and self.waiting:  # (nothing to admit: no call)
            self._schedule_waiting(plan, budget)
        if self._on:
            self._close(plan, n_running)
        return plan  # the base class adds the allocator's activity, then asks run_limit

    def run_limit(self, plan: BatchPlan) -> RunLimit | None:
        """How long the batch repeats while nothing can change it, or None for one step:
        every running request scheduled and nothing in the decision (preemption,
        rejection, drop, copy, allocator call) that the next step would not do again; the
        same decodes up to the first completion, plus at most one chunked prefill
        (``run_chunks``) that, once its prompt is done, decodes with the others if no
        waiting request would be admitted meanwhile (``decodes_stay_alone``)."""
        if (
            not plan.scheduled
            or self.speculative is not None  # tokens per step vary: every step alone
            or len(plan.scheduled) != len(self.running)
            or plan.preempted
            or plan.rejected
            or plan.held_drops
            or plan.copy_bytes
            or plan.alloc_calls
        ):
            return None
        if self._plan is plan and plan.span is not None:  # the cohort's, and the others'
            k = self.cohort.first_finish()
            for r in self._others:
                k = min(k, r.output_limit - r.num_output)
        else:
            k = steps_to_first_finish(plan.decodes)
        if not plan.prefill_chunks:
            return RunLimit(k) if k > 1 and not plan.admitted else None
        chunks = self.run_chunks(plan, k)
        if chunks is None:
            return None
        req, n_pre = plan.scheduled[-1][0], len(chunks)
        if plan.waiting_blocked and self._head_may_hit(req):
            # this chunk's KV, once seen (its last chunk's too: a run would decode on past
            # it), may let the head of waiting fit: the next step may admit it
            return None
        left = req.output_limit - req.num_output  # tokens still to sample
        late = (
            sum(chunks) == req.num_tokens - req.num_computed
            and n_pre < k
            and left > 1
            and self.decodes_stay_alone(plan, plan.n_decode + 1)
        )
        k = min(k, n_pre + left - 1) if late else min(k, n_pre)
        return RunLimit(k, tuple(chunks), late) if k > 1 else None

    def _head_may_hit(self, req: Request) -> bool:
        """Whether the head of WAITING (blocked on memory) could hit KV of the prefill
        ``req`` that a prefix cache does not show yet: their prompts share a whole block
        past what ``req`` has computed (a head that extends its own held sequence looks
        nothing up)."""
        kv = self.kv
        if not self.waiting or not kv.is_behind(req):
            return False
        head = self.waiting[0]
        if head.content is None or req.content is None or kv.is_live(head.seq_id):
            return False
        bs = kv.block_size or 1
        return common_prefix(head.content, req.content) // bs > req.num_computed // bs

    def _new_tokens(
        self, req: Request, budget: int, has_prefill: bool, computed: int | None = None
    ) -> int:
        """Tokens to schedule for ``req`` now (computed up to ``computed``, by default its
        ``num_computed``); 0 = it does not fit this step."""
        n = req.num_tokens - (req.num_computed if computed is None else computed)
        cfg = self.config
        if cfg.chunked_prefill:
            if 0 < cfg.long_prefill_token_threshold < n:
                n = cfg.long_prefill_token_threshold
            return min(n, budget)
        if n > budget and (has_prefill or n == 1):
            return 0
        return n

    def _schedule_running(self, plan: BatchPlan, budget: int) -> int:
        running, kv = self.running, self.kv
        if not self._on:  # no cohort: every decode walked, as before it
            self._plan = None
            return self._schedule_each(plan, budget)
        cohort = self.cohort
        member = cohort.Member
        if cohort.size != kv.clocked:  # the ledger settled some: clock them again
            for req in cohort.members():
                kv.clock(req, req._serial)
        others: list[Request] = []  # decodes outside the cohort, in order
        i = 0
        while i < len(running) and budget > 0:
            n_others = len(others)
            j = _cohort_stretch(running, i, min(len(running), i + budget), member, others)
            if j > i:  # a stretch of decodes (the common case): grown in one call
                batch = running[i:j]
                if (
                    cohort.size
                    and cohort.size + len(others) - n_others == len(batch)
                    and kv.advance(
                        [(r._serial, r, r.num_computed + 1) for r in others[n_others:]]
                        if len(others) > n_others else [],
                        len(batch),
                    )
                ):  # the whole cohort: its clock
                    done = len(batch)
                else:
                    if kv.clocked:
                        kv.settle_clock()
                    done = kv.grow_each(batch)
                if done < len(batch):
                    del others[n_others:]
                    others += [r for r in batch[:done] if r.__class__ is not member]
                if done:
                    _add_stretch(plan, batch if done == len(batch) else batch[:done])
                    budget -= done
                    i += done
                if done < len(batch):  # running[i] missed: preempt from the back
                    req = running[i]
                    if not self._grow_or_preempt(req, 1, plan):
                        break
                    _add_stretch(plan, (req,))
                    if req.__class__ is not member:
                        others.append(req)
                    budget -= 1
                    i += 1
                continue
            n = self._schedule_one(plan, running[i], budget)
            if n == 0:
                break
            budget -= n
            i += 1
        if cohort.size and i < len(running):  # members not scheduled leave the cohort
            for req in running[i:]:
                cohort.leave(req)
        self._plan, self._others = plan, others
        return budget

    def _close(self, plan: BatchPlan, n_running: int) -> None:
        """The plan's decode history and span from the cohort and the decodes outside it
        (the running ones ``_schedule_running`` collected, then any admitted decode, a
        recompute's last token, whose history ``_add`` counted)."""
        cohort, others = self.cohort, self._others
        hist = [r.num_computed for r in others] if others else []  # (no frame for none)
        plan.decode_history_tokens += cohort.hist_sum() + sum(hist)
        if len(plan.decodes) > n_running:
            others += plan.decodes[n_running:]
            hist += [r.num_computed for r in plan.decodes[n_running:]]
        span = cohort.span()
        if hist:
            hi, lo = max(hist), min(hist)
            span = (hi, lo) if span is None else (max(span[0], hi), min(span[1], lo))
        plan.span = (None, None) if span is None else span
        if cohort.size == self.kv.clocked:
            plan.apart = [(r._serial, r) for r in others] if others else []

    def _schedule_each(self, plan: BatchPlan, budget: int) -> int:
        """``_schedule_running`` without a cohort: each decode's counters read."""
        running, spec = self.running, self.speculative is not None
        i = 0
        while i < len(running) and budget > 0:
            j = i if spec else _decodes_from(running, i, min(len(running), i + budget))
            if j > i:  # a stretch of decodes (the common case): grown in one call
                batch = running[i:j]
                done = self.kv.grow_each(batch)
                if done:
                    _add_decodes(plan, batch if done == len(batch) else batch[:done])
                    budget -= done
                    i += done
                if done < len(batch):  # running[i] missed: preempt from the back
                    req = running[i]
                    if not self._grow_or_preempt(req, 1, plan):
                        break
                    _add_decodes(plan, (req,))
                    budget -= 1
                    i += 1
                continue
            n = self._schedule_one(plan, running[i], budget)
            if n == 0:
                break
            budget -= n
            i += 1
        return budget

    def _schedule_one(self, plan: BatchPlan, req: Request, budget: int) -> int:
        """Schedule running ``req`` alone (a prefill chunk, a verify, a decode outside a
        stretch): the tokens it gets, 0 = none (the running pass ends)."""
        kv, spec = self.kv, self.speculative is not None
        n = self._new_tokens(req, budget, bool(plan.prefill_chunks))
        if n == 0:
            return 0
        slots = n
        if spec and req.is_decode:
            n, slots = self._verify(req, budget)
        if not kv.grow_to(req, req.num_computed + slots) and not self._grow_or_preempt(
            req, slots, plan
        ):
            req.spec_drafts = 0
            return 0
        if (
            self.kv.steps_matter
            and not req.spec_drafts
            and _prefill_chunk(req, n)
            and not self.kv.step(req, n)
            and not self._grow_or_preempt(req, n, plan, self.kv.step)
        ):
            return 0
        _add(plan, req, n)
        kv.scheduled(req, req.num_computed + n)  # (a prefill chunk: vLLM caches its blocks)
        if req.spec_drafts:
            plan.verify_chunks.append(len(plan.prefill_chunks) - 1)
            plan.verify_seqs += 1
            plan.verify_tokens += n
            plan.verify_history_tokens += req.num_computed
        return n

    def _verify(self, req: Request, budget: int) -> tuple[int, int]:
        """(tokens to compute, KV slots to hold beyond the computed ones) of a decode
        under speculative decoding; sets ``req.spec_drafts`` (``sim.sched.speculative``)."""
        spec = self.speculative
        assert spec is not None
        d = spec.num_speculative_tokens
        cap = self.config.max_model_len
        if cap is not None:  # vLLM: positions stay below max_model_len
            d = min(d, cap - 2 - req.num_computed)
        d = max(0, min(d, budget - 1))
        slots = 1 + d + spec.lookahead_tokens
        if not req.last_turn:  # its sequence is held for the next turn: no slot past the end
            slots = min(slots, req.prompt_tokens + req.output_limit - 1 - req.num_computed)
        req.spec_drafts = d
        return 1 + d, slots

    def _grow_or_preempt(
        self, req: Request, n: int, plan: BatchPlan, fits: Callable[[Request, int], bool] | None = None
    ) -> bool:
        """``req``'s KV could not grow (``fits``: ``kv.grow``, or ``kv.step`` for a prefill
        chunk's window blocks): preempt from the back until it can; False if it was the
        victim itself."""
        kv = self.kv
        fits = kv.grow if fits is None else fits
        while True:
            victim = self.running.pop()
            kv.preempt(victim)
            victim.status = WAITING
            victim.preemptions += 1
            self.waiting.appendleft(victim)
            plan.preempted.append(victim)
            if victim is req:
                if kv.num_sequences == 0:  # alone in an empty pool and still no room
                    self.waiting.popleft()
                    victim.end(REJECTED, NEVER_FITS)
                    plan.rejected.append(victim)
                return False
            if fits(req, n):
                return True

    def _schedule_waiting(self, plan: BatchPlan, budget: int) -> None:
        cfg, kv, waiting = self.config, self.kv, self.waiting
        while waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = waiting[0]
            if not cfg.chunked_prefill and plan.prefill_chunks:
                upper = req.num_tokens - kv.resident_tokens(req.seq_id)  # hits unknown yet
                if upper > budget:
                    plan.waiting_blocked = True
                    break
            has_prefill = bool(plan.prefill_chunks)
            first_chunk = None
            if kv.steps_matter:  # vLLM allocates the first chunk's window blocks with it
                first_chunk = partial(self._new_tokens, req, budget, has_prefill)
            if not kv.admit(req, first_chunk):
                if self.running or not self.relieve(plan, req):
                    plan.waiting_blocked = True
                    break
                continue
            n = self._new_tokens(req, budget, has_prefill)
            waiting.popleft()
            self._serials += 1
            req._serial = self._serials
            self.running.append(req)
            req.status = RUNNING
            plan.admitted.append(req)
            _add(plan, req, n)
            kv.scheduled(req, req.num_computed + n)  # before the next request looks up
            budget -= n

    # ------------------------------------------------------------------ runs
    def prefill_chunks(self, cached_tokens: int, new_tokens: int) -> list[int]:
        """A lone prefill's chunks (``lone_prefill_chunks`` of this scheduler's config)."""
        return lone_prefill_chunks(self.config, new_tokens)

    def run_chunks(self, plan: BatchPlan, max_steps: int) -> list[int] | None:
        """Chunk sizes of the plan's single prefill in this step and the next ones, while
        nothing else changes (same decodes, no admission); None when not predictable.

        The list ends with the chunk that completes the prompt, or after ``max_steps``. With
        requests waiting for budget, it ends before the first chunk that would leave budget
        for one of them (that step would admit it).
        """
        cfg = self.config
        if not cfg.chunked_prefill or len(plan.prefill_chunks) != 1 or not plan.scheduled:
            return None
        if self.kv.steps_matter:  # each chunk moves the windows' blocks: step by step
            return None
        req, first = plan.scheduled[-1]
        if (first, req.num_computed) != plan.prefill_chunks[0]:
            return None  # the prefill is not last: later requests would share its budget
        if plan.admitted and plan.admitted != [req]:
            return None
        cap = cfg.max_num_batched_tokens - plan.n_decode
        thr = cfg.long_prefill_token_threshold
        size = min(thr, cap) if thr > 0 else cap
        left = req.num_tokens - req.num_computed
        if first != min(size, left):
            return None
        starved = bool(self.waiting) and not plan.waiting_blocked  # waiting for budget only
        if starved and first != cap:
            return None
        chunks = [first]
        left -= first
        while left > 0 and len(chunks) < max_steps:
            c = min(size, left)
            if starved and c != cap:
                break
            chunks.append(c)
            left -= c
        return chunks

    # ------------------------------------------------------------------ commit
    def decodes_stay_alone(self, plan: BatchPlan, n_decodes: int) -> bool:
        """Whether ``n_decodes`` decodes fit one step's budget and no later step of this
        batch would admit a waiting request (the queue is empty, or its head did not fit
        in memory, which only shrinks while the batch runs)."""
        if self.waiting and not plan.waiting_blocked:
            return False
        return n_decodes <= self.config.max_num_batched_tokens

    def commit(self, plan: BatchPlan, steps: int = 1) -> CommitResult:
        """Apply a step, or ``steps`` steps of the same batch (a run within ``plan.run``):
        decodes sample one token per step; the run's single prefill computes its chunks
        in the first steps, samples its first token in the last of them if that completes
        its prompt, and then decodes in every later step. The cohort's members advance by
        its tick; a request outside it joins once it decodes."""
        out = CommitResult()
        cohort = self.cohort
        member = cohort.Member
        cohort.tick += steps  # every member is scheduled, one token a step
        finished: list[Request] = []
        join = self._on
        if steps > 1 or not plan.prefill_chunks:
            emitted = out.emitted
            decodes = plan.decodes
            others = self._others if self._plan is plan else None
            if (
                others is not None
                and cohort.size + len(others) == len(decodes)
                and (not others or all([r.status == RUNNING for r in others]))
            ):  # (no member left since the plan: none was cancelled)
                emitted += decodes
                for req in others:
                    req.num_computed += steps
                    out_n = req.num_output = req.num_output + steps
                    if out_n >= req.output_limit:
                        req.finish()
                        finished.append(req)
                    elif join:
                        cohort.join(req)
            else:
                for req in decodes:
                    if req.__class__ is member:
                        emitted.append(req)
                        continue
                    if req.status != RUNNING:
                        if steps > 1 and req.status != CANCELLED:
                            emitted.append(req)
                        continue  # cancelled while the step (or run) ran
                    emitted.append(req)
                    req.num_computed += steps
                    out_n = req.num_output = req.num_output + steps
                    if out_n >= req.output_limit:
                        req.finish()
                        finished.append(req)
                    elif join:
                        cohort.join(req)
            if steps > 1 and plan.prefill_chunks:
                run = plan.run
                if run is None or steps > run.max_steps:
                    raise InvariantError(f"{steps} steps committed past the plan's run limit")
                self._commit_prefill(
                    plan.scheduled[-1][0], steps, run.prefill_steps(steps), run.prefill_tokens(steps), out,
                    finished,
                )
        else:
            emitted = out.emitted
            for req, n in plan.scheduled:
                if req.__class__ is member:
                    emitted.append(req)
                    continue
                if req.status != RUNNING:
                    continue  # cancelled while the step ran
                if req.spec_drafts:
                    self._commit_verify(req, out)
                    continue
                computed = req.num_computed = req.num_computed + n
                if computed < req.prompt_tokens + req.num_output:  # Request.num_tokens
                    continue  # a chunk of a longer prefill: nothing sampled
                out_n = req.num_output = req.num_output + 1
                emitted.append(req)
                if out_n >= req.output_limit:
                    req.finish()
                    finished.append(req)
                elif join:
                    cohort.join(req)
        if cohort.size or finished or out.finished:
            due = cohort.due()
            for req in due:
                req.finish()
            if out.finished:  # verifies (no cohort then)
                finished += out.finished
            if due or out.finished:
                finished += due
                finished.sort(key=_serial)
            out.finished = finished
        if out.finished:
            self.running = [r for r in self.running if r.status == RUNNING]
        return out

    def _commit_verify(self, req: Request, out: CommitResult) -> None:
        """A verify's outcome: the expected accepted drafts plus the bonus token, cut at
        the output limit; the rest of the verified tokens are wasted."""
        spec, d = self.speculative, req.spec_drafts
        assert spec is not None
        req.spec_drafts = 0
        taken, req.spec_credit = accept(req.spec_credit, spec.expected_accepted(d), d)
        t = min(1 + taken, req.output_limit - req.num_output)
        req.num_computed += t
        req.num_output += t
        out.emitted.append(req)
        out.extra_tokens += t - 1
        out.drafts += d
        out.wasted_tokens += d + 1 - t
        if req.num_output >= req.output_limit:
            req.finish()
            out.finished.append(req)

    def _commit_prefill(
        self, req: Request, steps: int, prefill_steps: int, tokens: int, out: CommitResult,
        finished: list[Request],
    ) -> None:
        if req.status != RUNNING:
            return
        req.num_computed += tokens
        if req.num_computed < req.num_tokens:
            return
        decode_steps = steps - prefill_steps
        req.num_output += 1 + decode_steps
        req.num_computed += decode_steps
        out.emitted_from.append((req, prefill_steps - 1))
        if req.num_output >= req.output_limit:
            req.finish()
            finished.append(req)
        elif self._on:
            self.cohort.join(req)

    def check_invariants(self) -> None:
        """The base checks, the decode cohort's (its members running, its history sum and
        each member's finish tick), and no more running requests than ``max_num_seqs``."""
        super().check_invariants()
        cohort = self.cohort
        members = cohort.members()
        running = {id(r) for r in self.running}
        if len(members) != cohort.size or any(id(r) not in running for r in members):
            raise InvariantError("the decode cohort's members are not running requests")
        if sum(r.num_computed for r in members) != cohort.hist_sum():
            raise InvariantError("the decode cohort's history sum is out of sync")
        for r in members:  # its finish tick, taken at its join, still its output's end
            if r._entry[0] != cohort.tick + r.output_limit - r.num_output:
                raise InvariantError(f"{r!r}: the decode cohort's finish tick is out of sync")
        if len(self.running) > self.config.max_num_seqs:
            raise InvariantError("more running requests than max_num_seqs")


def _decodes_from(running: list[Request], i: int, end: int) -> int:
    """The end of the stretch of decodes ``running[i:end]`` starts with (a decode: one
    token to compute, a sampled one)."""
    for r in islice(running, i, end):  # faster than indexing in a while loop
        if not r.num_output or r.prompt_tokens + r.num_output - r.num_computed != 1:
            return i
        i += 1
    return i


def _cohort_stretch(running: list[Request], i: int, end: int, member: type, others: list[Request]) -> int:
    """``_decodes_from`` where a cohort ``member`` is a decode without reading its
    counters; the decodes outside the cohort in the stretch are added to ``others``."""
    for r in islice(running, i, end):
        if r.__class__ is not member:
            if not r.num_output or r.prompt_tokens + r.num_output - r.num_computed != 1:
                return i
            others.append(r)
        i += 1
    return i


def _add_decodes(plan: BatchPlan, reqs: Sequence[Request]) -> None:
    # list comprehensions: in Python 3.11 faster than map(attrgetter) and zip(repeat)
    plan.n_decode += len(reqs)
    plan.decode_history_tokens += sum([r.num_computed for r in reqs])
    plan.decodes.extend(reqs)
    plan.scheduled.extend([(r, 1) for r in reqs])


def _add_stretch(plan: BatchPlan, reqs: Sequence[Request]) -> None:
    """A stretch of decodes on the plan, without their history (``_close`` adds it for
    the whole plan from the cohort and the decodes outside it)."""
    # list comprehensions: in Python 3.11 faster than map(attrgetter) and zip(repeat)
    plan.n_decode += len(reqs)
    plan.decodes.extend(reqs)
    plan.scheduled.extend([(r, 1) for r in reqs])


def _prefill_chunk(req: Request, n: int) -> bool:
    """Whether computing ``n`` tokens of ``req`` is a prefill chunk (more than the one
    token a decode computes, or one that leaves prompt tokens to compute)."""
    return n > 1 or req.num_tokens - req.num_computed > 1


def _add(plan: BatchPlan, req: Request, n: int) -> None:
    if n == 1 and req.is_decode:
        plan.n_decode += 1
        plan.decode_history_tokens += req.num_computed
        plan.decodes.append(req)
    else:
        plan.prefill_chunks.append((n, req.num_computed))
    plan.scheduled.append((req, n))
