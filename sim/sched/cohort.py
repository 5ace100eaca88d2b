"""A scheduler's decode cohort: running requests that decode one token every step, advanced
by one shared counter (the batch-level decode clock, step 1; docs/performance.md,
"Session 25").

Responsibility: membership by O(1) events (a request joins when its prompt is done and it
sampled, and leaves when it finishes, is preempted, cancelled, not scheduled in a step, or
any code writes its counters or its ``output_limit``), and what the scheduler asks of its decodes without a pass
over them: the sum of their computed tokens, the longest and shortest, the first finish.

A member's ``num_computed`` / ``num_output`` read ``stored + (tick - joined)``: its class is
switched to the cohort's ``Member`` (a ``Request`` subclass with no slots of its own, whose
two counters are properties, and ``output_limit`` one whose write settles it out: its
finish tick is taken at its join); a write settles it out first (the stored counts take the
ticks it decoded, its class is ``Request`` again), so every reader and writer sees today's
meaning. Leaving is lazy in the heaps: an entry is live while its request's ``_entry`` is it.

Invariant: every member is running and decodes (one token scheduled) in every step the
tick advances; ``size`` members; ``hist0 = sum(stored computed - joined)`` over members.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heapify, heappop, heappush
from typing import Any

from sim.sched.request import Request

_NC: Any = Request.__dict__["num_computed"]  # the slots' descriptors: a member's counts at its join
_NO: Any = Request.__dict__["num_output"]
_OL: Any = Request.__dict__["output_limit"]  # read as it is; a write settles the member out
_get_nc: Callable[[Request], int] = _NC.__get__
_set_nc: Callable[[Request, int], None] = _NC.__set__
_get_no: Callable[[Request], int] = _NO.__get__
_set_no: Callable[[Request, int], None] = _NO.__set__

_FAR = 1 << 30


class DecodeCohort:
    """The decodes that advance together; ``tick`` counts their steps."""

    def __init__(
        self,
        on_join: Callable[[Request], object] | None = None,
        on_leave: Callable[[Request], object] | None = None,
    ) -> None:
        self.on_join = on_join  # told after a request joined, and after it left
        self.on_leave = on_leave
        self.tick = 0
        self.size = 0
        self.hist0 = 0  # sum over members of (computed at join - joined tick)
        self._finish: list[tuple[int, int, Request]] = []  # (finish tick, join no, req)
        self._hi: list[tuple[int, int, Any]] = []  # (-(computed at join - joined), no, entry)
        self._lo: list[tuple[int, int, Any]] = []  # (computed at join - joined, no, entry)
        self._joins = 0
        cohort = self

        def get_nc(req: Request) -> int:
            return _get_nc(req) + cohort.tick - req._joined

        def get_no(req: Request) -> int:
            return _get_no(req) + cohort.tick - req._joined

        def set_nc(req: Request, value: int) -> None:
            cohort.leave(req)
            _set_nc(req, value)

        def set_no(req: Request, value: int) -> None:
            cohort.leave(req)
            _set_no(req, value)

        def set_ol(req: Request, value: int) -> None:  # its finish tick was taken at its join
            cohort.leave(req)
            _OL.__set__(req, value)

        self.Member: type[Request] = type(
            "CohortMember",
            (Request,),
            {
                "__slots__": (),
                "num_computed": property(get_nc, set_nc),
                "num_output": property(get_no, set_no),
                "output_limit": property(_OL.__get__, set_ol),
            },
        )

    def join(self, req: Request) -> None:
        """``req`` (running, its prompt done, a token sampled, not finished) decodes with
        the cohort from the next step on."""
        t = self.tick
        n = self._joins = self._joins + 1
        entry = (t + req.output_limit - _get_no(req), n, req)
        h = _get_nc(req) - t
        req._joined = t
        req._entry = entry
        req.__class__ = self.Member
        self.size += 1
        self.hist0 += h
        heappush(self._finish, entry)
        heappush(self._hi, (-h, n, entry))
        heappush(self._lo, (h, n, entry))
        if len(self._hi) > 4 * self.size + 64:
            self._compact()
        if self.on_join is not None:
            self.on_join(req)

    def leave(self, req: Request) -> None:
        """Settle a member out: its stored counts take the ticks it decoded."""
        if req.__class__ is not self.Member:
            return
        d = self.tick - req._joined
        nc = _get_nc(req)
        self.hist0 -= nc - req._joined
        _set_nc(req, nc + d)
        _set_no(req, _get_no(req) + d)
        req.__class__ = Request
        req._entry = None
        self.size -= 1
        if self.on_leave is not None:
            self.on_leave(req)

    def due(self) -> list[Request]:
        """The members whose output is complete at this tick, settled out, in running
        order (``Request._serial``)."""
        heap, tick, out = self._finish, self.tick, []
        while heap and heap[0][0] <= tick:
            entry = heappop(heap)
            req = entry[2]
            if req._entry is entry:
                self.leave(req)
                out.append(req)
        if len(out) > 1:
            out.sort(key=_serial)
        return out

    def first_finish(self) -> int:
        """Steps until the first member's output is complete (a large number without)."""
        heap = self._finish
        while heap and heap[0][2]._entry is not heap[0]:
            heappop(heap)
        return heap[0][0] - self.tick if heap else _FAR

    def hist_sum(self) -> int:
        """Sum of the members' computed tokens."""
        return self.hist0 + self.size * self.tick

    def span(self) -> tuple[int, int] | None:
        """(most, fewest) computed tokens of a member; None without members."""
        if not self.size:
            return None
        hi, lo = self._hi, self._lo
        while hi[0][2][2]._entry is not hi[0][2]:
            heappop(hi)
        while lo[0][2][2]._entry is not lo[0][2]:
            heappop(lo)
        return self.tick - hi[0][0], lo[0][0] + self.tick

    def _compact(self) -> None:
        """Drop the entries of members that left (the heaps keep them until they surface)."""
        for heap in (self._hi, self._lo):
            heap[:] = [e for e in heap if e[2][2]._entry is e[2]]
            heapify(heap)
        self._finish[:] = [e for e in self._finish if e[2]._entry is e]
        heapify(self._finish)

    def members(self) -> list[Request]:
        return [e[2] for e in self._finish if e[2]._entry is e]


def _serial(req: Request) -> int:
    return req._serial
