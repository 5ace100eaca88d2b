"""Orca's reservation policies on the contiguous kinds (``reservation: window|pow2|oracle``):
the reserve size reaches ``allocate`` as its declared ``final_tokens`` argument."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.memory import make_allocator
from sim.memory.kv_manager import KVManager
from sim.sched.request import Request

POOL = 4096  # slots (1 byte per token)


def _alloc(kind="contiguous", **options):
    return make_allocator(kind, pool_bytes=POOL, kv_bytes_per_token=1, **options)


@pytest.mark.parametrize(("reservation", "capacity"), [
    ("none", 100), ("window", 2048), ("pow2", 100 + 256), ("oracle", 300),
])  # fmt: skip
def test_first_buffer_is_the_policys_reserve(reservation, capacity):
    extra = {"window_tokens": 2048} if reservation == "window" else {}
    a = _alloc(reservation=reservation, **extra)
    assert a.allocate("s", 100, final_tokens=300)
    assert a.seq_capacity_tokens("s") == capacity
    for _ in range(200):  # the true length fits its reservation: no growth, no copy
        assert a.append("s", 1)
    assert a.metrics().bytes_copied == (0 if reservation != "none" else 100 + 200)
    a.check_invariants()


def test_buddy_rounds_the_reserve_to_a_block():
    a = _alloc("buddy", min_block_tokens=16, reservation="oracle")
    assert a.allocate("s", 100, final_tokens=300)
    assert a.seq_capacity_tokens("s") == 512  # 300 -> the next buddy block
    a.check_invariants()


def test_pow2_rounds_the_output_up_to_a_power_of_two_as_the_paper():
    """Kwon et al. 2023, 6.1: Orca (Pow2) "over-reserves the space for outputs by at most
    2x": a true output of 25 tokens gets 32 slots after the prompt."""
    a = _alloc(reservation="pow2")
    assert a.reserve_tokens(100, 125) == 132
    assert a.reserve_tokens(100, 100) == 100  # no output: nothing to reserve
    assert a.reserve_tokens(100, 101) == 101
    # never past the longest sequence when the window is known
    capped = _alloc(reservation="pow2", window_tokens=2048)
    assert capped.reserve_tokens(300, 1400) == 2048  # 300 + 2,048 would never fill
    assert capped.reserve_tokens(100, 125) == 132
    assert capped.allocate("s", 300, final_tokens=1400)
    assert capped.seq_capacity_tokens("s") == 2048


def test_on_buddy_pow2_and_oracle_differ_and_the_rounding_is_the_spaces():
    pow2 = _alloc("buddy", min_block_tokens=16, reservation="pow2")
    oracle = _alloc("buddy", min_block_tokens=16, reservation="oracle")
    assert pow2.allocate("s", 100, final_tokens=300) and oracle.allocate("s", 100, final_tokens=300)
    assert oracle.seq_capacity_tokens("s") == 512  # 300 -> one 512-slot block
    assert pow2.seq_capacity_tokens("s") == 512  # 100 + 256 = 356 -> the same block
    assert oracle.reserve_rounding_tokens(100, 300) == 512 - 300
    assert pow2.reserve_rounding_tokens(100, 300) == 512 - 356
    # the blocks differ once the output's power of two crosses the total's
    assert pow2.allocate("t", 100, final_tokens=250) and oracle.allocate("t", 100, final_tokens=250)
    assert (pow2.seq_capacity_tokens("t"), oracle.seq_capacity_tokens("t")) == (512, 256)
    pow2.check_invariants()
    oracle.check_invariants()
    # a contiguous space places the reserve exactly: no rounding
    assert _alloc(reservation="oracle").reserve_rounding_tokens(100, 300) == 0
    assert _alloc(reservation="pow2").reserve_rounding_tokens(100, 300) == 0


def test_without_a_final_length_only_the_window_reserves():
    assert _alloc(reservation="window", window_tokens=1024).allocate("s", 10)
    for r, cap in (("pow2", 10), ("oracle", 10), ("window", 1024)):
        a = _alloc(reservation=r, window_tokens=1024)
        a.allocate("s", 10)
        assert a.seq_capacity_tokens("s") == cap
    # the window also decides whether a prompt can be admitted
    a = _alloc(reservation="window", window_tokens=3000)
    a.allocate("s", 10)
    assert not a.can_allocate(10) and not a.allocate("t", 10)


def test_a_miss_changes_nothing():
    a = _alloc(reservation="oracle")
    assert a.allocate("s", 10, final_tokens=4000)
    assert not a.allocate("t", 10, final_tokens=200)
    assert list(a.sequences()) == ["s"]
    a.check_invariants()


def test_options_are_checked():
    with pytest.raises(ConfigError, match="reservation: window needs window_tokens"):
        _alloc(reservation="window")
    with pytest.raises(ConfigError, match="must be one of none, window, pow2, oracle"):
        _alloc(reservation="max")
    with pytest.raises(ConfigError, match="window_tokens"):
        _alloc(reservation="window", window_tokens=0)


def test_final_tokens_is_a_declared_argument_every_kind_accepts():
    for kind, opts in (("paged", {"block_size": 16}), ("static", {"max_tokens": 512}),
                       ("buddy", {}), ("contiguous", {})):  # fmt: skip
        a = make_allocator(kind, pool_bytes=POOL, kv_bytes_per_token=1, **opts)
        assert a.allocate("s", 100, final_tokens=300)
        a.check_invariants()
    from sim.memory.errors import AllocatorError

    with pytest.raises(AllocatorError):
        _alloc().allocate("s", 100, final_tokens=0)


def test_the_kv_manager_passes_prompt_plus_output_limit():
    kv = KVManager(_alloc(reservation="oracle"))
    req = Request(1, "s", prompt_tokens=100, max_output_tokens=250)
    req.output_limit = 200  # cut at the context window: the final length is 300
    assert kv.admit(req)
    assert kv.alloc.seq_capacity_tokens("s") == 300
