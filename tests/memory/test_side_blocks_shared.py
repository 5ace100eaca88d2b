"""A hybrid model's side window that moves past blocks a fork also maps (review 2026-12-02).

The dropped side blocks a fork still maps stay in use, so an append may count as freed
only the dropped blocks whose refcount is 1 (``PagedAllocator._side_need``). Counting them
all made ``can_append`` say yes and the append then raise halfway (``take(2) with 0 free
blocks``), leaving the allocator half-changed. Random runs of allocate, append (with and
without prefix hits), fork, hold and free in a pool small enough to fill: every refused
operation changes nothing, and the invariants hold after every step.
"""

from __future__ import annotations

import random

import pytest

from sim.memory import make_allocator
from sim.prefix.spans import n_tokens, segments, slice_tokens
from sim.sizing.group_demand import GroupDemand, KVGroups

KV = 1000.0
GROUPS = KVGroups(
    KV,
    (GroupDemand("sliding", "sliding_window", 3000.0, 100, 0.0),
     GroupDemand("state", "mamba", 0.0, 0, 40_000.0)),
    4000.0,
)  # fmt: skip
OPS = ("allocate", "append", "fork", "hold", "free", "free_uncached", "allocate", "append",
       "hold", "hold", "fork")  # fmt: skip


def _run(seed: int) -> None:
    a = make_allocator("paged", pool_bytes=160 * 16 * KV + 77, kv_bytes_per_token=KV,
                       block_size=16, kv_groups=GROUPS)  # fmt: skip
    rng = random.Random(seed)
    ops = [(rng.choice(OPS), rng.randrange(10_000), rng.randrange(1, 40 if rng.random() < 0.5 else 90))
           for _ in range(rng.randrange(10, 150))]  # fmt: skip
    content: dict[int, object] = {}
    gone: list[object] = []
    next_id = 0
    for op, pick, n in ops:
        live = list(content)
        if op == "allocate" or not live:
            bases = [*content.values(), *gone]
            base = bases[pick % len(bases)] if bases and pick % 4 else ()
            keep = min(n_tokens(base), pick % 200)
            segs = segments([*slice_tokens(base, 0, keep), (f"new{next_id}", n)])
            if a.allocate(next_id, n_tokens(segs), content=segs if a.uses_content else None):
                content[next_id] = segs
            next_id += 1
        else:
            seq = live[pick % len(live)]
            if op == "append":
                more = segments([(f"s{seq}-{pick}", n)])
                can = a.can_append(seq, n)
                before = (a.seq_tokens(seq), a.pool.num_free)
                ok = a.append(seq, n, content=more if a.uses_content else None)
                assert ok or not can  # can_append said yes: the append must succeed
                if ok:
                    content[seq] = segments([*content[seq], *more])
                else:
                    assert (a.seq_tokens(seq), a.pool.num_free) == before
            elif op == "fork":
                if a.fork(seq, next_id):
                    content[next_id] = content[seq]
                next_id += 1
            elif op == "hold":
                a.set_held(seq, not a.is_held(seq))
            else:
                getattr(a, op)(seq)
                gone.append(content.pop(seq))
        a.check_invariants()


@pytest.mark.parametrize("seed", [50, *range(0, 40)])
def test_appends_past_shared_side_blocks_are_refused_not_half_applied(seed):
    """Seed 50 raised ``InvariantError: block pool: take(2) with 0 free blocks`` before."""
    _run(seed)
