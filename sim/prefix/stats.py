"""Prefix-cache counters of an allocator: F17 as raw match and as tokens served.

Responsibility: record, per admitted request, its prompt tokens, the raw longest-prefix
match and the tokens actually served from cache (after the "at least one token computed"
cap and the tail policy), and aggregate them (``match_rate`` and ``hit_rate``) into a
``PrefixMetrics`` (defined in ``sim.memory.metrics``, the seam's result type).

Invariant: hit <= matched-or-copied <= prompt for every request; totals are the sums of
the per-request records.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from sim.memory.metrics import PrefixMetrics

__all__ = ["PrefixMetrics", "PrefixStats", "RequestHit"]


@dataclass(frozen=True, slots=True)
class RequestHit:
    """F17 inputs of one admitted request."""

    seq_id: Hashable
    prompt_tokens: int
    matched_tokens: int  # raw match (token-granular for radix, whole blocks for hash)
    hit_tokens: int  # served from cache: prefill skips these tokens


@dataclass
class PrefixStats:
    """Running totals plus the per-request records."""

    records: list[RequestHit] = field(default_factory=list)
    prompt_tokens: int = 0
    matched_tokens: int = 0
    hit_tokens: int = 0
    cow_tail_copies: int = 0

    def record(self, seq_id: Hashable, prompt: int, matched: int, hit: int) -> RequestHit:
        rec = RequestHit(seq_id, prompt, matched, hit)
        self.records.append(rec)
        self.prompt_tokens += prompt
        self.matched_tokens += matched
        self.hit_tokens += hit
        return rec

    @property
    def match_rate(self) -> float:
        return self.matched_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def metrics(self, *, cached_bytes: float, active_bytes: float, evicted_blocks: int):
        return PrefixMetrics(
            len(self.records),
            self.prompt_tokens,
            self.matched_tokens,
            self.hit_tokens,
            self.match_rate,
            self.hit_rate,
            cached_bytes,
            active_bytes,
            evicted_blocks,
            self.cow_tail_copies,
        )
