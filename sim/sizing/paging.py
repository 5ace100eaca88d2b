"""Reservation and block arithmetic: F6, F12-F16.

Invariant: token counts are whole tokens, byte results are ``tokens * kv_bytes_per_token``;
no function here keeps state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sim.errors import KvsimError


def static_efficiency(mean_tokens: float, max_tokens: int) -> float:
    """F6: ``eta_static = E[S] / S_max``."""
    if max_tokens <= 0:
        raise KvsimError("max_tokens must be positive")
    return mean_tokens / max_tokens


def static_efficiency_from_pmf(pmf: Mapping[int, float], max_tokens: int) -> float:
    """F6 from a length distribution ``{s: P(S=s)}`` over 1..S_max."""
    if any(s < 1 or s > max_tokens for s in pmf):
        raise KvsimError("lengths in the distribution must lie in [1, max_tokens]")
    total = sum(pmf.values())
    if not math.isclose(total, 1.0, rel_tol=1e-9):
        raise KvsimError(f"probabilities must sum to 1, got {total}")
    return sum(s * p for s, p in pmf.items()) / max_tokens


def geometric_slack_tokens(capacity_tokens: int, tokens: int) -> int:
    """F12: slack ``C - s`` of a doubling buffer of capacity C holding s tokens."""
    return capacity_tokens - tokens


def blocks_for_tokens(tokens: int, block_size: int) -> int:
    """F13: ``ceil(S / B)`` blocks."""
    return -(-tokens // block_size)


def pool_blocks(pool_bytes: float, block_bytes: float) -> int:
    """F13: ``floor(M_pool / M_block)`` whole blocks in a pool."""
    return math.floor(pool_bytes / block_bytes)


def logical_block(token_index: int, block_size: int) -> tuple[int, int]:
    """F14: (logical block l, offset o) of token t."""
    return divmod(token_index, block_size)


def tail_waste_tokens(tokens: int, block_size: int) -> int:
    """F15: ``(B - S mod B) mod B`` empty slots in the last block."""
    return (block_size - tokens % block_size) % block_size


def expected_tail_waste_tokens(block_size: int) -> float:
    """F15: ``(B - 1) / 2`` when ``S mod B`` is uniform."""
    return (block_size - 1) / 2


def node_tail_waste_bytes(n_sequences: int, block_size: int, kv_bytes_per_token: float) -> float:
    """F15: ``N_seq * E[Delta_tail] * m_token``."""
    return n_sequences * expected_tail_waste_tokens(block_size) * kv_bytes_per_token


def deep_copy_bytes(n_children: int, prefix_tokens: int, kv_bytes_per_token: float) -> float:
    """F16: bytes a contiguous (deep-copy) fork duplicates: ``n * S_prefix * m_token``."""
    return n_children * prefix_tokens * kv_bytes_per_token
