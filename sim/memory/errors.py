"""Errors of the allocator layer: misuse (a caller bug or a bad trace) and broken invariants.

Invariant: a *miss* (the request does not fit) is never an exception, it is a falsy return
value; an exception here always means the caller asked for something meaningless (an
unknown or already live sequence id, a negative token count) or the allocator's own books
no longer balance. Misuse errors are ``KvsimError`` so a bad trace file prints one line;
``InvariantError`` is ``sim.errors.InvariantError`` (the one invariant-failure mechanism of
every layer), importable from here too.
"""

from __future__ import annotations

from sim.errors import InvariantError, KvsimError

__all__ = [
    "AllocatorError",
    "InvariantError",
    "LiveSequenceError",
    "UnknownSequenceError",
]


class AllocatorError(KvsimError):
    """Misuse of an allocator: unknown id, double free, reuse of a live id, bad count."""


class UnknownSequenceError(AllocatorError):
    """The sequence id is not live: never allocated, or already freed (double free)."""


class LiveSequenceError(AllocatorError):
    """The sequence id is already live (allocate or fork onto an id in use)."""
