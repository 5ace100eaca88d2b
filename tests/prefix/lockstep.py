"""Lockstep driver for a prefix index's lazy form against its eager one (the radix lazy
leaf, ``test_lazy_leaf``; ``paged_hash``'s deferred hashing, ``test_lazy_hashes``): two
allocators driven by the same random operations, every result and the books compared after
each one; a kind adds its own operations (``act``) and its deep comparison (``deep``)."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from sim.prefix.spans import concat, n_tokens, slice_tokens

B = 4  # tokens per block

ADMIT = st.tuples(st.just("admit"), st.integers(0, 60), st.integers(1, 14))
GROW = st.tuples(st.just("grow"), st.integers(0, 60), st.integers(1, 9), st.integers(0, 5))
#: the operations every kind takes (admissions and growth weighted up)
COMMON_OPS = [
    ADMIT,
    ADMIT,
    GROW,
    GROW,
    GROW,
    # a live sequence appends the tokens another live one holds past its own length
    st.tuples(st.just("copy"), st.integers(0, 60), st.integers(0, 60), st.integers(1, 9)),
    st.tuples(st.just("fork"), st.integers(0, 60)),
    st.tuples(st.just("free"), st.integers(0, 60), st.booleans()),
    st.tuples(st.just("retain"), st.integers(0, 60), st.integers(0, 2)),
    st.tuples(st.just("held"), st.integers(0, 60), st.booleans()),
    st.tuples(st.just("probe"), st.integers(0, 60), st.integers(1, 14)),
    st.tuples(st.just("peek"), st.just(0)),
]


def books(alloc) -> tuple:
    """What the core and the engine read, without making the lazy index join."""
    pool = alloc.pool
    return (
        alloc.metrics(),
        alloc.kv_slots(),
        alloc.prefix_metrics(),
        alloc.take_activity(),
        alloc.available_blocks(),
        pool.free_queue(),
        list(pool.refcount),
        {s: list(t) for s, t in alloc._tables.items()},
    )


class Lockstep:
    """``allocs`` = (lazy, eager), driven in lockstep; ``content`` is each live sequence's;
    ``deep`` reads the whole cache (making the lazy one join)."""

    def __init__(self, allocs: list, deep: Callable) -> None:
        self.allocs = allocs
        self.deep = deep
        self.content: dict[str, tuple | None] = {}  # live sequence -> its content (None: unknown)
        self.finished: list[tuple] = []
        self.n = 0

    def both(self, op):
        lazy, eager = (op(a) for a in self.allocs)
        assert lazy == eager
        return lazy

    def pick(self, k: int) -> str | None:
        live = list(self.content)
        return live[k % len(live)] if live else None

    def base(self, k: int) -> tuple:
        known = [c for c in self.content.values() if c is not None] + self.finished
        if known and k % 3:
            return known[k % len(known)]
        return (("sys", 0, 1 + k % 13),)

    def act(self, op: tuple) -> None:
        """A kind's own single operation (then the common checks)."""

    def checked(self) -> None:
        """After the common checks of every operation (a kind's ``hypothesis.event`` s)."""

    def step(self, op: tuple) -> None:
        kind = op[0]
        if kind == "admit":
            self.n += 1
            seq = f"s{self.n}"
            content = concat(self.base(op[1]), ((f"obs-{seq}", 0, op[2]),))
            if self.both(lambda a: a.allocate(seq, n_tokens(content), content=content)):
                self.content[seq] = content
        elif kind == "grow" and (seq := self.pick(op[1])) is not None:
            cur = self.content[seq]
            if cur is None or op[3] == 0:  # unknown content from here on
                more, self.content[seq] = None, None
            else:
                done = sum(n for c, _, n in cur if c == f"out-{seq}")
                more = ((f"out-{seq}", done, op[2]),)
            if self.both(lambda a: a.append(seq, op[2], content=more)) and more is not None:
                self.content[seq] = concat(cur, more)
        elif kind == "copy" and (seq := self.pick(op[1])) is not None:
            src = self.content.get(self.pick(op[2]) or "")
            cur = self.content[seq]
            if cur is None or src is None or n_tokens(src) <= n_tokens(cur):
                return self.step(("grow", op[1], op[3], 1))
            n = min(op[3], n_tokens(src) - n_tokens(cur))
            more = slice_tokens(src, n_tokens(cur), n_tokens(cur) + n)
            if self.both(lambda a: a.append(seq, n, content=more)):
                self.content[seq] = concat(cur, more)
        elif kind == "fork" and (seq := self.pick(op[1])) is not None:
            self.n += 1
            child = f"s{self.n}"
            if self.both(lambda a: a.fork(seq, child)):
                self.content[child] = self.content[seq]
        elif kind == "free" and (seq := self.pick(op[1])) is not None:
            self.both(lambda a: (a.free_uncached if op[2] else a.free)(seq))
            content = self.content.pop(seq)
            if content is not None:
                self.finished.append(content)
        elif kind == "retain" and (seq := self.pick(op[1])) is not None:
            self.both(lambda a: a.set_retain(seq, op[2]))
        elif kind == "held" and (seq := self.pick(op[1])) is not None:
            self.both(lambda a: a.set_held(seq, op[2]))
        elif kind == "probe":
            content = concat(self.base(op[1]), (("probe", 0, op[2]),))
            self.both(lambda a: a.can_allocate(n_tokens(content), content=content))
        elif kind == "peek":
            self.both(self.deep)
        else:
            self.act(op)
        self.both(books)
        for a in self.allocs:
            a.check_invariants()
        self.checked()

    def release_all(self) -> None:
        """Free every live sequence (with the checks after each), then read everything."""
        for seq in list(self.content):
            self.step(("free", list(self.content).index(seq), False))
        self.both(self.deep)
