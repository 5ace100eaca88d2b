"""The one pricing interface: price a batch, or a run of steps of that batch's shape.

Responsibility: the contract every step pricer meets (``CostModel`` under each
``step_pricing``: ``roofline_max``, ``per_group``, ``kernel_tables``; and
``sim.cost.expert_parallel.LockstepPricer`` for data-parallel ranks that step together),
and the few helpers its implementations share.

A *run* of ``k`` steps of a batch shape is the batch's first step followed by ``k - 1``
steps of the same decodes, each decode's history one token longer per step
(``advanced(work, i)`` is step ``i``). A pricer computes a run's durations with the very
code that prices one step: its terms are written once over "step offsets" ``i``, which
are the integer 0 for one step and ``numpy.arange(k)`` for a run, so every term of step
``i`` of a run is the same sequence of IEEE operations as the single step
``advanced(work, i)``, and ``price_run(work, k)[i] == price(advanced(work, i)).total_s``
holds by construction (tests/cost/test_pricers.py checks it for every pricer with
hypothesis). A run has no prefill, copy or allocator call (only decodes repeat); a run of
length one may be any batch. ``CostModel`` also gives each step's attention seconds with
a run's durations (``price_run_attention``: the larger of the step's ``kv_read_s`` and
``attention_s``, from the same terms), for a run's steps the engine records without a
breakdown (``sim.cost.accuracy``'s share of unmeasured attention); a lockstep group's
ranks each take theirs from their own ``CostModel``.

``StepWork`` (what a step runs) lives here, with the contract that takes it;
``sim.cost.roofline`` and ``sim.cost`` re-export it.

Invariant: pure; a pricer never looks at simulation time or state.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sim.lazy_numpy import numpy_on_first_use

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())

#: entries a pricer's memo (prices or terms by batch shape) keeps at most; past it, a new
#: shape is priced and not kept (a bound on memory, not on correctness)
MEMO_ENTRIES_MAX = 65536


@dataclass(slots=True, unsafe_hash=True)
class StepWork:
    """The work of one engine step, as the scheduler planned it.

    Decode sequences are given in aggregate (their count and the sum of the tokens each
    had in KV before the step): every roofline term is linear in them. The longest and
    shortest decode history (None: not known, priced as equal contexts) serve only the
    kernel tables' skew correction.

    A value: never changed once built (``advanced`` makes a new one), hashable. Not a
    frozen dataclass: a frozen one's constructor sets each field through
    ``object.__setattr__`` (3.5 us against 0.6 us here), and several works are built per
    engine decision (docs/performance.md).
    """

    n_decode: int = 0
    decode_history_tokens: int = 0
    prefill_chunks: tuple[tuple[int, int], ...] = ()  # (new tokens, cached tokens before)
    copy_bytes: float = 0.0  # HBM-to-HBM bytes copied by the allocator this step
    alloc_calls: int = 0  # cudaMalloc/cudaFree calls the allocator made this step
    decode_max_history_tokens: int | None = None  # the longest decode's tokens in KV
    decode_min_history_tokens: int | None = None  # the shortest decode's tokens in KV

    @property
    def prefill_tokens(self) -> int:
        chunks = self.prefill_chunks
        if not chunks:  # asked several times per priced step: the common shapes first
            return 0
        if len(chunks) == 1:
            return chunks[0][0]
        return sum(c for c, _ in chunks)

    @property
    def n_tokens(self) -> int:
        return self.n_decode + self.prefill_tokens

W = TypeVar("W", contravariant=True)
C = TypeVar("C", covariant=True)


class StepPricer(Protocol[W, C]):
    """Prices one step (``price``: its breakdown ``C``) or a run of steps (``price_run``:
    one duration in seconds per step). ``W`` is what a step runs: a ``StepWork`` for one
    engine, one ``StepWork | None`` per rank for a lockstep group."""

    def price(self, work: W) -> C: ...

    def price_run(self, work: W, n_steps: int) -> np.ndarray: ...


def advanced(work: StepWork, steps: int) -> StepWork:
    """Step ``steps`` of a decode run starting with ``work``: every decode's history (and
    so the longest and shortest) ``steps`` tokens longer."""
    if steps == 0:
        return work
    hi, lo = work.decode_max_history_tokens, work.decode_min_history_tokens
    return replace(
        work,
        decode_history_tokens=work.decode_history_tokens + steps * work.n_decode,
        decode_max_history_tokens=None if hi is None else hi + steps,
        decode_min_history_tokens=None if lo is None else lo + steps,
    )


def check_run(work: StepWork, n_steps: int) -> None:
    """Refuse a run that is not one: fewer than one step, or more than one step of a batch
    that would not repeat (a prefill chunk, a copy or an allocator call)."""
    if n_steps < 1:
        raise ValueError(f"a run has at least one step, not {n_steps}")
    if n_steps > 1 and (work.prefill_chunks or work.copy_bytes or work.alloc_calls):
        raise ValueError("only a batch of decodes with no copy or allocator call repeats in a run")


def step_offsets(n_steps: int) -> Any:
    """The step offsets the terms are written over: 0 for one step (plain floats, the
    cheap path), ``arange(n_steps)`` for a run."""
    return 0 if n_steps == 1 else np.arange(n_steps, dtype=np.float64)


def vmax(a: Any, b: Any) -> Any:
    """``max`` of two step terms, scalars or arrays alike (the same IEEE comparison)."""
    if a.__class__ is float and b.__class__ is float:  # one step: the common case first
        return b if b > a else a  # Python's max (the first of equals, NaN as it does)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return b if b > a else a


def as_run(x: Any, n_steps: int) -> np.ndarray:
    """A term as one float64 per step of the run (a scalar repeats)."""
    if isinstance(x, np.ndarray) and x.shape == (n_steps,):
        return x
    return np.full(n_steps, x, dtype=np.float64)


def step_total(overhead_s: Any, alloc_s: Any, gpu_s: Any, more_s: Any, copy_s: Any, overlap: bool) -> Any:
    """A step's seconds from its host overhead and GPU terms, in one fixed order of
    additions: ``overhead + alloc + gpu + more + copy``, or with async scheduling (the
    host planned this step while the last one ran) ``max(overhead, alloc + gpu + more +
    copy)``."""
    if overlap:
        rest = alloc_s + gpu_s + more_s + copy_s
        if overhead_s.__class__ is float and rest.__class__ is float:  # ``vmax``'s first case
            return rest if rest > overhead_s else overhead_s
        return vmax(overhead_s, rest)
    return overhead_s + alloc_s + gpu_s + more_s + copy_s


def prefill_share(
    price: Callable[[StepWork], Any], work: StepWork, verify_chunks: Collection[int] = ()
) -> float:
    """``prefill_share_s`` with ``price`` returning a step's breakdown (its ``total_s``)."""
    return prefill_share_s(lambda w: price(w).total_s, work, verify_chunks)


def prefill_share_s(
    seconds: Callable[[StepWork], float], work: StepWork, verify_chunks: Collection[int] = ()
) -> float:
    """The share of a step's priced time its prefill tokens are charged (the capacity
    answer's cost per token, docs/capacity_planning.md): 0 without a prompt chunk, 1
    without a decode, else ``p / (p + d)`` where ``p`` prices the step's prompt chunks
    alone and ``d`` its decodes alone with ``seconds`` (the step's own pricer's seconds,
    ``CostModel.price_s``: no breakdown is built, this runs on every mixed step). Copies and
    allocator calls are in neither part (they belong to the step, so scaling shares them
    in the same ratio); what every step pays whatever it runs (weights streamed, host
    overhead) is in both parts alone, so it is shared in that ratio too. The chunks at
    positions ``verify_chunks`` of ``work.prefill_chunks`` are speculative decoding's
    verifies (``BatchPlan.verify_chunks``): output work, priced with the decodes."""
    chunks = work.prefill_chunks
    if verify_chunks:
        verify = set(verify_chunks)
        prompt = tuple(c for i, c in enumerate(chunks) if i not in verify)
        verifies = tuple(c for i, c in enumerate(chunks) if i in verify)
    else:
        prompt, verifies = tuple(chunks), ()
    if not prompt:
        return 0.0
    if not work.n_decode and not verifies:
        return 1.0
    # both parts built directly (no dataclasses.replace: it costs more than the pricing)
    p = seconds(StepWork(0, 0, prompt, 0.0, 0, None, None))
    d = seconds(StepWork(work.n_decode, work.decode_history_tokens, verifies, 0.0, 0,
                         work.decode_max_history_tokens, work.decode_min_history_tokens))  # fmt: skip
    return p / (p + d) if p + d > 0 else 0.0


__all__ = [
    "MEMO_ENTRIES_MAX", "StepPricer", "advanced", "as_run", "check_run", "prefill_share", "prefill_share_s",
    "step_offsets", "step_total", "vmax",
]  # fmt: skip
