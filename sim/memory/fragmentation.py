"""Allocation efficiency and fragmentation (F8, F9, F10), one definition for every kind.

Invariant: these are pure functions of byte counts and hole sizes; every allocator's
``metrics()`` calls them with its own numbers and never re-implements them, so the same
formula is applied identically to static, contiguous, buddy and paged memory. A block pool
reports its free blocks as one hole (any free block serves any block request).
"""

from __future__ import annotations

from collections.abc import Iterable


def eta_alloc(useful_bytes: float, allocated_bytes: float) -> float | None:
    """F8: ``M_useful / M_allocated``; None when nothing is allocated (0/0)."""
    if allocated_bytes <= 0:
        return None
    return useful_bytes / allocated_bytes


def eta_effective(useful_bytes: float, pool_bytes: float) -> float:
    """F10: ``M_useful / M_pool``."""
    if pool_bytes <= 0:
        raise ValueError(f"pool_bytes must be positive, got {pool_bytes}")
    return useful_bytes / pool_bytes


def phi_ext(free_extents: Iterable[float], request_bytes: float | None,
            block_kind: bool = False) -> float | None:  # fmt: skip
    """F9: ``1 - sum(H_k >= R_req) / M_free``; the share of free memory a request cannot use.

    0 when every free byte lies in a hole large enough, 1 when no hole is. None (kvsim's own
    decision) when no request size is given or nothing is free. A block pool
    (``block_kind``) has none by construction (SPEC F9): every free block serves any block
    request, so 0 with anything free, however many blocks the request needs (a pool too
    small for it is short of memory, not fragmented: ``request_fits`` says that).
    """
    if request_bytes is None:
        return None
    holes = list(free_extents)
    free = sum(holes)
    if free <= 0:
        return None
    if block_kind:
        return 0.0
    fitting = sum(h for h in holes if h >= request_bytes)
    return 1.0 - fitting / free


def request_fits(largest_free_bytes: float, request_bytes: float | None) -> bool | None:
    """Whether one request of ``request_bytes`` fits the largest free hole now (a block
    pool's free blocks are one hole); None without a request size. Not F9: a paged pool
    that is merely short of memory does not fit a request and has no fragmentation."""
    if request_bytes is None:
        return None
    return largest_free_bytes >= request_bytes
