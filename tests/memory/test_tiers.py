"""Host-DRAM and NVMe frame pools and the tiered block table (rules 3.12, 3.14)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import InvariantError
from sim.memory.errors import AllocatorError
from sim.memory.tiers import (
    TIER_GPU,
    BlockFrame,
    FramePool,
    NvmeTier,
    Tier,
    TieredBlockTable,
    host_tier_for_node,
    nvme_tier_for_node,
)
from sim.profiles.registry import load_node


def test_allocate_is_all_or_nothing_and_fifo():
    pool = FramePool(Tier.HOST, 4, frame_bytes=100)
    assert pool.allocate("a", 3)
    assert pool.frames_of("a") == [BlockFrame(Tier.HOST, f) for f in (0, 1, 2)]
    assert not pool.allocate("b", 2)  # a miss changes nothing
    assert (pool.free_frames, pool.holds("b")) == (1, False)
    assert pool.allocate("b", 1) and pool.free_bytes == 0 and pool.used_bytes == 400
    assert pool.free("a") == 3
    assert pool.allocate("c", 1)
    assert pool.frames_of("c") == [BlockFrame(Tier.HOST, 0)]  # freed frames reused in order
    assert pool.allocate("c", 2) and [f.frame for f in pool.frames_of("c")] == [0, 1, 2]
    assert pool.peak_used_frames == 4
    pool.check_invariants()


def test_misuse_raises():
    pool = FramePool(Tier.NVME, 2, 1.0)
    with pytest.raises(AllocatorError, match="holds no frames"):
        pool.free("ghost")
    for bad in (-1, 1.5, True):
        with pytest.raises(AllocatorError, match="bad frame count"):
            pool.allocate("a", bad)
    with pytest.raises(ValueError, match="HBM"):
        FramePool(Tier.HBM, 1, 1.0)
    assert pool.allocate("a", 0) and pool.free("a") == 0


def test_node_tiers_from_profiles():
    dgx = load_node("dgx-h100")
    frame = 16 * 327680  # a 16-token block of Llama-3-70B, all ranks
    host = host_tier_for_node(dgx, frame)
    assert host.tier == Tier.HOST
    assert host.num_frames == int(2e12 * 0.5 // frame) and host.capacity_bytes <= 1e12
    nvme = nvme_tier_for_node(dgx, frame)
    assert isinstance(nvme, NvmeTier) and nvme.drives == 8
    assert nvme.bw_bytes_per_s == 8 * 7e9
    assert nvme.num_frames == int(8 * 3.84e12 // frame)
    assert nvme_tier_for_node(dgx.model_copy(update={"nvme_drives": 0}), frame) is None
    assert TIER_GPU is Tier.HBM


def test_block_table_tiers_and_readability():
    t = TieredBlockTable()
    hbm = [BlockFrame(Tier.HBM, b) for b in (7, 3, 9)]
    t.set("s", hbm)
    assert t.is_resident("s") and t.readable_blocks("s") == 3
    t.check_readable("s")
    host = [BlockFrame(Tier.HOST, f) for f in (0, 1, 2)]
    assert t.remap("s", 0, host) == hbm  # copy-out done: entries now point at host frames
    assert t.tier_counts("s") == {Tier.HBM: 0, Tier.HOST: 3, Tier.NVME: 0}
    with pytest.raises(InvariantError, match="block in HOST"):
        t.check_readable("s")
    t.check_readable("s", 0)
    # a pipelined reload brings the first block back first
    t.remap("s", 0, [BlockFrame(Tier.HBM, 4)])
    assert t.readable_blocks("s") == 1 and not t.is_resident("s")
    t.check_readable("s", 1)
    with pytest.raises(InvariantError):
        t.check_readable("s", 2)
    with pytest.raises(AllocatorError, match="out of range"):
        t.remap("s", 2, host[:2])
    with pytest.raises(AllocatorError, match="unknown"):
        t.get("x")
    assert len(t.drop("s")) == 3 and "s" not in t


ops = st.lists(
    st.tuples(st.sampled_from(["alloc", "free"]), st.integers(0, 5), st.integers(0, 7)),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 12), ops)
def test_capacity_is_never_exceeded(capacity, script):
    pool = FramePool(Tier.HOST, capacity, frame_bytes=10.0)
    model: dict[int, int] = {}
    for op, owner, n in script:
        if op == "alloc":
            ok = pool.allocate(owner, n)
            assert ok == (n <= capacity - sum(model.values()))
            if ok:
                model[owner] = model.get(owner, 0) + n
        elif owner in model:
            assert pool.free(owner) == model.pop(owner)
        else:
            with pytest.raises(AllocatorError):
                pool.free(owner)
        pool.check_invariants()
        assert pool.used_frames == sum(model.values()) <= capacity
        assert pool.used_bytes <= pool.capacity_bytes
        assert pool.peak_used_frames <= capacity
        for o, k in model.items():
            assert len(pool.frames_of(o)) == k
