"""The allocator kinds every contract and property test runs over: the one place to add a kind.

A case builds an allocator over ``pool_tokens`` token slots of ``KV`` bytes each, plus a
``REMAINDER`` of bytes that make no whole slot, so every kind has books with a remainder.
Add the radix prefix cache (issue 4) here, e.g. ``KindCase("radix", {"block_size": 16})``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.memory import Allocator, make_allocator

KV = 1024  # bytes per token in the contract tests: small and exact
REMAINDER = 100  # bytes at the end of every test pool that make no whole slot


@dataclass(frozen=True)
class KindCase:
    kind: str
    options: dict = field(default_factory=dict)
    label: str | None = None

    @property
    def id(self) -> str:
        return self.label or self.kind

    def make(self, pool_tokens: int, kv: int = KV, **overrides) -> Allocator:
        return make_allocator(
            self.kind,
            pool_bytes=pool_tokens * kv + REMAINDER,
            kv_bytes_per_token=kv,
            **{**self.options, **overrides},
        )


KIND_CASES: list[KindCase] = [
    KindCase("static", {"max_tokens": 128}),
    KindCase("contiguous"),
    KindCase(
        "contiguous", {"placement": "best_fit", "grow_in_place": True}, "contiguous-bf-inplace"
    ),
    KindCase("buddy", {"min_block_tokens": 8}),
    KindCase("buddy", {"min_block_tokens": 4, "grow_in_place": True}, "buddy-inplace"),
    KindCase("paged", {"block_size": 16}),
    KindCase("paged", {"block_size": 5}, "paged-b5"),
    KindCase("radix", {"block_size": 16}),
    KindCase("paged_hash", {"block_size": 16}),
]

CASE_IDS = [c.id for c in KIND_CASES]


def snapshot(a: Allocator) -> tuple:
    """Everything observable about an allocator's state (to prove a miss changed nothing)."""
    seqs = tuple(
        (s, a.seq_tokens(s), a.seq_capacity_tokens(s), _where(a, s)) for s in a.sequences()
    )
    return a.metrics(request_bytes=64 * KV), seqs, _pool_state(a)


def _where(a: Allocator, seq) -> tuple:
    if hasattr(a, "block_table"):  # a paged kind in count mode names no block
        return a.block_table(seq) if a.tracks_block_ids else ()
    return a.seq_buffer(seq)


def _pool_state(a: Allocator) -> tuple:
    pool = getattr(a, "pool", None)
    if pool is None:
        return ()
    if not a.tracks_block_ids:  # count mode: only the free count
        return (pool.num_free,)
    return tuple(pool.free_queue()), tuple(pool.refcount)
