"""The garbage collector during a command's start-up (``kvsim run``, ``kvsim validate``).

Responsibility: ``paused(on)`` (``sim.cli.main`` around the command) switches the
collector off while the command imports its modules, builds its validators and loads the
scenario: those objects live as long as the process, so every collection of them was
wasted work (a chat run's start-up paid 16 young and one full collection, ~40-50 ms, and
its simulation one more full collection over the same objects, ~30 ms). ``started()``
(the run command, once the simulation is built and before it runs) moves everything made
so far to the permanent generation (``gc.freeze``) and switches the collector back on:
the run's collections see only what the run makes. A command that never calls
``started()`` (``validate`` of a scenario) runs to its end with the collector off;
``validate`` of a sweep file calls it before checking the points (each point's check
makes garbage of its own: with the collector off a 256-point grid held ~290 MB more).

Invariant: after the command the collector is as the caller had it: on again, and nothing
left frozen: what the command made is in the oldest generation (a caller in the same
process, a test or a notebook, collects it at its next full collection; the cyclic
garbage of the start-up, a few hundred objects, is collected then). Nothing is paused when the collector was already off or the caller froze objects
of its own (``gc.get_freeze_count()``: theirs to unfreeze). Collection never changes what
a command computes, only when unreachable cycles are freed.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

_state = {"paused": False, "frozen": False}


@contextmanager
def paused(on: bool) -> Iterator[None]:
    """The collector off for the block when ``on`` (and it was on, nothing frozen)."""
    if not on or not gc.isenabled() or gc.get_freeze_count() or _state["paused"]:
        yield
        return
    gc.disable()
    _state["paused"] = True
    try:
        yield
    finally:
        # everything made while paused goes to the oldest generation as it is (freeze, then
        # unfreeze: no traversal), not to the youngest, whose next collection, due at once
        # when the collector comes back on, would traverse every object of the start-up
        gc.freeze()
        gc.unfreeze()
        _state["paused"] = _state["frozen"] = False
        gc.enable()


def started() -> None:
    """The start-up is over: freeze what it made and switch the collector back on
    (nothing when ``paused`` did not switch it off, or when called again)."""
    if _state["paused"] and not _state["frozen"]:
        gc.freeze()
        _state["frozen"] = True
        gc.enable()
