"""A paged hold counts the table as it is at the hold (issue 25 item 3: a hold touches the
table's shared blocks only, ``sim.memory.paused_blocks``; its private blocks move as one
figure): after growth, after a copy-on-write of the last block, and for a new sequence
under the same id."""

from __future__ import annotations

from alloc_cases import KIND_CASES


def test_a_hold_after_growth_or_a_copy_on_write_counts_the_table_as_it_is_now():
    case = next(c for c in KIND_CASES if c.id == "paged")
    a = case.make(20 * 16)
    a.allocate("x", 20)  # blocks 0, 1 (4 of 16 in the second)
    a.set_held("x", True)
    assert a.kv_slots().paused == 20
    a.set_held("x", False)
    a.append("x", 30)  # 50 tokens: blocks 0, 1, 2, 3
    a.set_held("x", True)
    assert a.kv_slots().paused == 50
    a.set_held("x", False)
    a.fork("x", "y")  # y shares all four; x's next write copies block 3
    a.append("x", 1)
    assert a.block_table("x")[:3] == a.block_table("y")[:3] != a.block_table("x")
    a.set_held("x", True)  # x's last block is its own copy; the three first are shared
    assert a.kv_slots().paused == 51 - 48  # shared blocks stay active (y maps them)
    a.check_invariants()
    a.free("x")
    a.allocate("x", 5)  # a new table under the same id
    a.set_held("x", True)
    assert a.kv_slots().paused == 5
    a.check_invariants()
