"""What one engine step runs: the scheduler's answer, and what committing it produced.

Invariant: a ``BatchPlan`` lists each scheduled request once with ``n_new >= 1`` tokens;
the decode entries are exactly those with ``is_decode`` true when scheduled, the rest are
prefill chunks; ``decode_history_tokens`` is the sum of the decode requests' computed
tokens before the step (the KV they attend to, besides the new token); ``run`` (set by
a scheduler that supports runs) bounds how many identical steps the batch may take.
With speculative decoding a decode is a *verify* of ``1 + d`` tokens: it is scheduled,
and priced, as the chunk of ``1 + d`` new tokens over its history that vLLM V1 runs
(``prefill_chunks``), and counted in ``verify_seqs`` / ``verify_tokens`` /
``verify_history_tokens`` so the tables count it as a decode, never as prompt work.
``run_steps_bound`` is what a ``RunLimit`` can mean for its plan (the engine caps a
plug-in scheduler's ``max_steps`` at it: steps past it would repeat a batch that has
changed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.cost import StepWork
from sim.sched.request import Request


@dataclass(frozen=True, slots=True)
class RunLimit:
    """How long a plan may run unchanged, as the scheduler sees it (memory is the
    engine's to check): at most ``max_steps`` steps; the plan's single prefill advances by
    ``chunks`` (one per step while it lasts; None: no prefill), and with ``late`` its
    request, once its prompt is done, decodes with the others for the rest of the run.
    A run's decodes each sample one token a step. ``max_steps`` is a whole number >= 1
    (a plug-in scheduler's other value is refused where the engine takes it, and a
    larger one than ``run_steps_bound`` is capped there)."""

    max_steps: int
    chunks: tuple[int, ...] | None = None
    late: bool = False

    def prefill_steps(self, steps: int) -> int:
        """Steps of a run of ``steps`` in which the prefill computes a chunk."""
        return 0 if self.chunks is None else min(len(self.chunks), steps)

    def prefill_tokens(self, steps: int) -> int:
        """Prompt tokens the prefill computes in a run of ``steps``."""
        return 0 if self.chunks is None else sum(self.chunks[:steps])


@dataclass(slots=True)
class BatchPlan:
    """The batch of one step plus the scheduling events that produced it."""

    scheduled: list[tuple[Request, int]] = field(default_factory=list)  # (request, new tokens)
    decodes: list[Request] = field(default_factory=list)  # the decode entries, in order
    n_decode: int = 0
    decode_history_tokens: int = 0
    prefill_chunks: list[tuple[int, int]] = field(default_factory=list)  # (new, cached before)
    admitted: list[Request] = field(default_factory=list)  # waiting -> running this step
    preempted: list[Request] = field(default_factory=list)  # running -> waiting (recompute)
    rejected: list[Request] = field(default_factory=list)  # can never run
    held_drops: int = 0  # idle held sequences dropped to make room
    waiting_blocked: bool = False  # a waiting request could not be admitted this step
    copy_bytes: float = 0.0  # allocator copies caused while scheduling (priced in this step)
    alloc_calls: int = 0  # cudaMalloc/cudaFree calls caused while scheduling
    #: how long this batch may repeat unchanged (None: one step); the engine alone decides
    #: whether to step or to run (``engine.exact``, memory), then commits the steps taken
    run: RunLimit | None = None
    # speculative decoding: verifies among ``prefill_chunks`` (sequences, their 1 + d
    # tokens, the tokens each had in KV before the step)
    verify_seqs: int = 0
    verify_tokens: int = 0
    verify_history_tokens: int = 0
    #: positions in ``prefill_chunks`` of the verifies (the cost split prices them as decodes)
    verify_chunks: list[int] = field(default_factory=list)
    #: the decodes' (longest, shortest) history when the scheduler kept it as it planned
    #: (its decode cohort); None: ``decode_span`` reads the decodes
    span: tuple[int | None, int | None] | None = None
    #: the decodes whose KV ledger is not on the clock (``KVManager.clock``), each with
    #: its order, when the scheduler knows the other decodes are exactly the clocked
    #: sequences; None: not known (the ledger then settles its clock before a run)
    apart: list[tuple[int, Request]] | None = None

    @property
    def empty(self) -> bool:
        return not self.scheduled

    @property
    def n_tokens(self) -> int:
        return self.n_decode + sum(c for c, _ in self.prefill_chunks)

    @property
    def is_pure_decode(self) -> bool:
        """Only decode tokens, no memory event: the shape a fast run can repeat."""
        return (
            not self.prefill_chunks
            and not self.admitted
            and not self.preempted
            and not self.rejected
            and not self.held_drops
            and self.copy_bytes == 0
            and self.alloc_calls == 0
        )

    def work(self) -> StepWork:
        """The step's work for the cost model."""
        hi, lo = self.decode_span()
        return StepWork(
            n_decode=self.n_decode,
            decode_history_tokens=self.decode_history_tokens,
            prefill_chunks=tuple(self.prefill_chunks),
            copy_bytes=self.copy_bytes,
            alloc_calls=self.alloc_calls,
            decode_max_history_tokens=hi,
            decode_min_history_tokens=lo,
        )

    def decode_span(self) -> tuple[int | None, int | None]:
        """(longest, shortest) decode history before the step (None without decodes):
        the kernel tables' skew correction prices decodes of unequal contexts."""
        if self.span is not None:
            return self.span
        if not self.decodes:
            return None, None
        hist = [r.num_computed for r in self.decodes]
        return max(hist), min(hist)


def steps_to_first_finish(decodes: list[Request]) -> int:
    """Steps until the first of ``decodes`` reaches its output limit (a large number
    without decodes)."""
    # a list comprehension: in Python 3.11, 1.7x faster than min(map(sub, map(attrgetter) ..))
    return min([r.output_limit - r.num_output for r in decodes], default=1 << 30)


def run_steps_bound(plan: BatchPlan, lim: RunLimit) -> int:
    """The most steps of ``plan`` that ``lim`` can describe (>= 1), whatever its
    ``max_steps``: the decodes' steps up to the first finish (each samples a token a
    step), and with a prefill (``chunks``) its steps, plus with ``late`` the decode steps
    left to its own output after the prompt (``output_limit - num_output - 1``); 1 when
    nothing repeats (no decode, no prefill run). O(decodes), as planning the run is."""
    bound = steps_to_first_finish(plan.decodes) if plan.decodes else None
    if lim.chunks is not None:
        steps = len(lim.chunks)
        if lim.late and plan.scheduled:
            req = plan.scheduled[-1][0]
            steps += max(0, req.output_limit - req.num_output - 1)
        bound = steps if bound is None else min(bound, steps)
    return max(1, 1 if bound is None else bound)


@dataclass(slots=True)
class CommitResult:
    """Requests that produced a token in a step (or run of steps), and those that finished."""

    emitted: list[Request] = field(default_factory=list)  # sampled a token in every step
    # (request, first step): sampled a token in every step from that one (0-based) on
    emitted_from: list[tuple[Request, int]] = field(default_factory=list)
    finished: list[Request] = field(default_factory=list)
    # speculative decoding: tokens sampled beyond one per ``emitted`` request (accepted
    # drafts), drafts verified, and verified tokens that produced no output (rejected
    # drafts, and accepted ones past the request's output limit)
    extra_tokens: int = 0
    drafts: int = 0
    wasted_tokens: int = 0
