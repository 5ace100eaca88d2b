"""The chapter's worked examples (docs/model.md) as exact tests through the allocators.

Where the chapter's stated figure is wrong, the test asserts the corrected value and its
docstring says so (docs/model.md gives the recomputation).
"""

from __future__ import annotations

import pytest

from sim.memory import eta_alloc, make_allocator, phi_ext
from sim.units import GiB, KiB, MiB


def test_e5_geometric_slack_1025_in_2048():
    """E5: a request ending at 1025 tokens in a doubled 2048 buffer leaves 1023 slack."""
    a = make_allocator("contiguous", pool_bytes=8192, kv_bytes_per_token=1)
    a.allocate("r", 1024)
    assert a.append("r", 1)
    assert a.seq_capacity_tokens("r") == 2048
    m = a.metrics()
    assert m.allocated_bytes - m.useful_bytes == 1023
    assert m.bytes_copied == 1024  # the 1024 written tokens moved to the new buffer
    assert m.peak_allocated_bytes == 3 * 1024  # N and 2N coexist during the copy (F12)
    a.check_invariants()


def test_e6_contiguous_holes_corrected_phi_ext_20_percent():
    """E6 (T9): A 4 GiB, B 1 GiB, C 6 GiB, free B, D needs 2 GiB.

    The chapter says D stalls (Phi_ext 100 %); with the 4 GiB unallocated tail the free
    holes are {1 GiB, 4 GiB}, so Phi_ext(2 GiB) = 1 - 4/5 = 20 % and D fits in the tail.
    """
    kv = MiB  # one token slot = 1 MiB keeps the sizes whole
    a = make_allocator("contiguous", pool_bytes=15 * GiB, kv_bytes_per_token=kv)
    for seq, gib in (("A", 4), ("B", 1), ("C", 6)):
        assert a.allocate(seq, gib * 1024)
    a.free("B")
    m = a.metrics(request_bytes=2 * GiB)
    assert m.free_extents == (1 * GiB, 4 * GiB)
    assert m.free_bytes == 5 * GiB and m.largest_free_bytes == 4 * GiB
    assert m.phi_ext == pytest.approx(0.20)
    assert a.allocate("D", 2048)
    assert a.seq_buffer("D") == (11 * 1024, 2048)  # first fit skips the 1 GiB hole: the tail
    a.check_invariants()


def test_e6_the_chapters_failure_needs_a_tail_below_2_gib():
    """E6 variant: with a 1.5 GiB tail, 2.5 GiB is free, no hole fits: Phi_ext = 100 %."""
    a = make_allocator("contiguous", pool_bytes=12.5 * GiB, kv_bytes_per_token=MiB)
    for seq, tokens in (("A", 4096), ("B", 1024), ("C", 6144)):
        a.allocate(seq, tokens)
    a.free("B")
    m = a.metrics(request_bytes=2 * GiB)
    assert m.free_bytes == 2.5 * GiB
    assert m.phi_ext == 1.0
    assert not a.allocate("D", 2048)
    assert a.metrics(request_bytes=2 * GiB) == m  # the miss changed nothing


def test_e6_reservation_efficiency_of_a_and_c():
    """E6: A uses 1.8 of 4 GiB, C 2.4 of 6 GiB: (1.8 + 2.4) / 10 = 42 %."""
    assert eta_alloc(1.8 * GiB + 2.4 * GiB, 10 * GiB) == pytest.approx(0.42)


def test_e8_static_scenario_a():
    """E8 (T10): 10.00 GiB pool, 160 KiB/token, S_max 16 384, E[S] 2048.

    Each reservation is 2.50 GiB, B_max = 4, eta_alloc = eta_effective = 12.5 %, 8.75 GiB
    of the pool reserved but unwritten; a fifth request does not fit.
    """
    a = make_allocator(
        "static", pool_bytes=10 * GiB, kv_bytes_per_token=160 * KiB, max_tokens=16384
    )
    for i in range(4):
        assert a.allocate(i, 2048)
    assert not a.allocate(4, 2048)
    m = a.metrics(request_bytes=2.5 * GiB)
    assert a.seq_capacity_tokens(0) * 160 * KiB == 2.5 * GiB
    assert m.useful_bytes == 1.25 * GiB and m.allocated_bytes == 10 * GiB
    assert m.eta_alloc == m.eta_effective == 0.125
    assert m.allocated_bytes - m.useful_bytes == 8.75 * GiB
    assert m.free_bytes == 0 and m.phi_ext is None  # nothing free: F9 undefined
    assert m.remainder_bytes == 0
    assert not a.append(0, 16384 - 2048 + 1)  # past S_max: a static buffer never grows
    assert a.append(0, 16384 - 2048)
    a.check_invariants()


BUDDY_B_HOLES_MIB = (512, 256, 1024, 768, 1024)


def test_e9_buddy_scenario_b_corrected():
    """E9 (T11): useful 4.20 GiB of 6.40 GiB allocated; holes {512, 256, 1024, 768, 1024} MiB.

    eta_alloc = 65.625 %. The holes sum to 3.50 GiB (the chapter's 3.60 GiB is wrong).
    Phi_ext = 100 % for the chapter's 1536 MiB request and 42.9 % (= 1 - 2048/3584) for
    the 1024 MiB that a 4096-token prompt at 160 KiB/token really needs once rounded.
    """
    holes = [h * MiB for h in BUDDY_B_HOLES_MIB]
    assert eta_alloc(4.20 * GiB, 6.40 * GiB) == pytest.approx(0.65625)
    assert sum(holes) == 3.5 * GiB
    assert phi_ext(holes, 1536 * MiB) == 1.0
    assert phi_ext(holes, 1024 * MiB) == pytest.approx(1 - 2048 / 3584)
    assert round(phi_ext(holes, 1024 * MiB), 3) == 0.429
    assert phi_ext(holes, 640 * MiB) == pytest.approx(1 - 2816 / 3584)  # 21.4 %
    assert 4096 * 160 * KiB == 640 * MiB


def test_e9_a_live_buddy_pool_refuses_with_free_memory_more_than_twice_the_need():
    """E9's phenomenon on a real buddy pool: 3 GiB free in 1 GiB holes, a 1.5 GiB request
    rounds to 2 GiB and no aligned 2 GiB block is free: a miss with Phi_ext = 100 %."""
    a = make_allocator("buddy", pool_bytes=8 * GiB, kv_bytes_per_token=MiB, min_block_tokens=256)
    for i in range(8):
        assert a.allocate(i, 1024)  # eight 1 GiB blocks
    for i in (0, 3, 5):
        a.free(i)
    m = a.metrics(request_bytes=1536 * MiB)
    assert m.free_extents == (1 * GiB, 1 * GiB, 1 * GiB)
    assert m.phi_ext == 1.0
    assert not a.allocate("new", 1536)
    a.check_invariants()


@pytest.mark.parametrize(
    ("block_size", "tail_mib", "share"), [(16, 75, 0.00122), (64, 315, 0.00513)]
)
def test_e11_block_counts_and_tail_waste(block_size, tail_mib, share):
    """E11 (T13, T14): 60 GiB pool, 40 KiB/token: 98 304 blocks of 640 KiB at B = 16
    (1 572 864 tokens). 256 sequences whose lengths cover every residue mod B equally
    (so the mean tail is exactly (B - 1)/2) waste 75 MiB (0.12 %) at B = 16 and 315 MiB
    (0.51 %) at B = 64 of the pool."""
    a = make_allocator(
        "paged", pool_bytes=60 * GiB, kv_bytes_per_token=40 * KiB, block_size=block_size
    )
    if block_size == 16:
        assert a.num_blocks == 98_304 and a.block_bytes == 640 * KiB
        assert a.max_sequence_tokens == 1_572_864
    else:
        assert a.block_bytes == 2.5 * MiB
    for i in range(256):
        assert a.allocate(i, 2048 + i % block_size)
    m = a.metrics()
    waste = m.allocated_bytes - m.useful_bytes
    assert waste == tail_mib * MiB
    assert waste / m.pool_bytes == pytest.approx(share, rel=2e-3)
    assert m.remainder_bytes == 0
    a.check_invariants()


def test_e12_block_table_at_b4():
    """E12: 32 768 tokens at B = 4 need 8 192 block-table entries."""
    a = make_allocator("paged", pool_bytes=32768 * 4, kv_bytes_per_token=4, block_size=4)
    a.allocate(0, 32768)
    assert len(a.block_table(0)) == 8192


@pytest.mark.parametrize("kind", ["static", "contiguous", "buddy"])
def test_e13_four_child_deep_copy_is_10_gib(kind):
    """E13 (T15): four forks of an 8192-token prefix at 320 KiB/token copy 10.00 GiB on a
    contiguous kind (the chapter's 10.24 GiB divides 2560 MiB by 1000)."""
    opts = {"max_tokens": 8192} if kind == "static" else {}
    a = make_allocator(kind, pool_bytes=16 * GiB, kv_bytes_per_token=320 * KiB, **opts)
    a.allocate("parent", 8192)
    for c in range(4):
        assert a.fork("parent", c)
    m = a.metrics()
    assert m.bytes_copied == 10 * GiB
    assert m.allocated_bytes == 5 * 2.5 * GiB
    assert m.useful_bytes == 2.5 * GiB  # the four copies are waste, not useful
    assert m.logical_bytes == 12.5 * GiB


def test_e13_paged_fork_copies_nothing():
    """E13: the same four forks on paged blocks copy zero bytes and allocate nothing."""
    a = make_allocator("paged", pool_bytes=16 * GiB, kv_bytes_per_token=320 * KiB)
    a.allocate("parent", 8192)
    before = a.metrics().allocated_bytes
    for c in range(4):
        assert a.fork("parent", c)
    m = a.metrics()
    assert m.bytes_copied == 0 and m.cow_copies == 0
    assert m.allocated_bytes == before == 2.5 * GiB
    assert m.logical_bytes / m.useful_bytes == 5  # the sharing gain
    assert set(a.pool.refcount[b] for b in a.block_table("parent")) == {5}


def _pool_handing_out(order: list[int], n_blocks: int, block_size: int):
    """A paged pool whose FIFO free queue is exactly ``order``: fill every block with a
    one-block sequence (sequence i holds block i), then free the sequences holding
    ``order`` in that order; freed blocks join the tail of the (then empty) queue."""
    a = make_allocator(
        "paged", pool_bytes=n_blocks * block_size, kv_bytes_per_token=1, block_size=block_size
    )
    a.track_block_ids()  # the test names blocks: ids from the start
    for i in range(n_blocks):
        a.allocate(("filler", i), block_size)
    for b in order:
        a.free(("filler", b))
    assert a.pool.free_queue() == order
    return a


def test_e14_t16_cow_fork_shares_blocks_7_and_3():
    """E14 / T16 (B = 4): A holds 8 tokens in physical blocks 7 and 3; a fork shares both
    (refcount 2, zero bytes copied). A's next token goes to block 1 and the child's
    divergent token to a new block 12; A's logical block 2 stays block 1.

    The FIFO free queue makes the ids: a 13-block pool is filled, then the holders of
    blocks 7, 3, 1, 12 are freed in that order, so the queue hands out 7, 3, 1, 12.
    """
    a = _pool_handing_out([7, 3, 1, 12], n_blocks=13, block_size=4)
    a.allocate("A", 8)
    assert a.block_table("A") == (7, 3)
    assert a.fork("A", "B")
    assert a.block_table("B") == (7, 3)
    assert a.pool.refcount[7] == a.pool.refcount[3] == 2
    assert a.append("A", 1)
    assert a.append("B", 1)  # the child's divergent write
    assert a.block_table("A") == (7, 3, 1)
    assert a.block_table("B") == (7, 3, 12)
    assert [a.pool.refcount[b] for b in (7, 3, 1, 12)] == [2, 2, 1, 1]
    m = a.metrics()
    assert m.bytes_copied == 0 and m.cow_copies == 0  # S_prefix mod B = 0: nothing to copy
    a.check_invariants()


def test_cow_inside_a_shared_partial_block_copies_for_the_writer_only():
    """F16 / rule 3.5: a fork at 9 tokens (B = 4) shares a partly filled block; the first
    writer gets a private copy (one block copied), the other keeps the original block."""
    a = _pool_handing_out([7, 3, 1, 12, 5], n_blocks=13, block_size=4)
    a.allocate("A", 9)
    a.fork("A", "B")
    assert a.blocks_needed("B", 1) == 1  # the copy
    assert a.append("B", 1)
    assert a.block_table("A") == (7, 3, 1)
    assert a.block_table("B") == (7, 3, 12)
    assert a.pool.refcount[1] == 1
    m = a.metrics()
    assert m.cow_copies == 1 and m.bytes_copied == 4  # one block of 4 one-byte slots
    assert a.append("A", 1)  # the block is private again: no second copy
    assert a.metrics().cow_copies == 1
    a.check_invariants()
