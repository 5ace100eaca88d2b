"""Errors of the allocator layer: misuse (a caller bug or a bad trace) and broken invariants.

Invariant: a *miss* (the request does not fit) is never an exception, it is a falsy return
value; an exception here always means the caller asked for something meaningless (an
unknown or already live sequence id, a negative token count) or the allocator's own books
no longer balance. Misuse errors are ``KvsimError`` so a bad trace file prints one line;
broken books raise ``sim.errors.InvariantError`` (the one invariant-failure mechanism of
every layer, defined and imported from there alone).
"""

from __future__ import annotations

from sim.errors import KvsimError

__all__ = [
    "AllocatorError",
    "LiveSequenceError",
    "UnknownSequenceError",
]


class AllocatorError(KvsimError):
    """Misuse of an allocator: unknown id, double free, reuse of a live id, bad count."""


class UnknownSequenceError(AllocatorError):
    """The sequence id is not live: never allocated, or already freed (double free)."""


class LiveSequenceError(AllocatorError):
    """The sequence id is already live (allocate or fork onto an id in use)."""
