"""memory.parquet's physical HBM breakdown per GPU (issue 13 item 2): the eight
``gpu_*_bytes`` columns partition one GPU's HBM exactly on every row, for every allocator
kind, with pauses (hold, offload), forks and copy-on-write; shared blocks count once and a
block shared by an active and a paused sequence is active. The counters behind them
(``Allocator.kv_slots``) are kept as operations happen and equal a scan of the tables."""

from __future__ import annotations

import random

import numpy as np
import pytest

from sim.memory import make_allocator
from sim.memory.kv_manager import KVManager
from sim.memory.metrics import KVSlots
from sim.metrics.recorder import GPU_PARTS, HbmLayout, Recorder
from sim.metrics.schema import MEMORY_TABLE
from sim.run import run_scenario

H100_HBM = 85_899_345_920  # 80 GiB, the profile's memory_bytes
AGENTS = "workloads/agent_swarm.yaml"  # hold pauses, forks (copy-on-write), radix cache
KINDS = {
    "static": {"kind": "static", "max_tokens": 16384},
    "contiguous": {"kind": "contiguous"},
    "buddy": {"kind": "buddy"},
    "paged": {"kind": "paged"},
    "radix": {"kind": "radix"},
    "paged_hash": {"kind": "paged_hash"},
}
SMALL_POOL = {"workload.num_trajectories": 6, "hardware.kv_pool_bytes_per_gpu": 3e9,
              "engine.check_invariants": True}  # fmt: skip


@pytest.fixture(scope="module", params=list(KINDS))
def agent_run(request):
    return request.param, run_scenario(AGENTS, allocator=KINDS[request.param], **SMALL_POOL)


def _parts(memory) -> np.ndarray:
    return memory[list(GPU_PARTS)].to_numpy()


def test_the_columns_are_declared_integers_in_stacking_order():
    declared = [c.name for c in MEMORY_TABLE]
    assert declared[-len(GPU_PARTS) :] == list(GPU_PARTS)
    assert {c.dtype for c in MEMORY_TABLE if c.name in GPU_PARTS} == {"int"}


def test_every_row_sums_exactly_to_the_gpu_hbm(agent_run):
    kind, r = agent_run
    m = r.memory
    parts = _parts(m)
    assert parts.dtype == np.int64
    assert (parts.sum(axis=1) == H100_HBM).all()
    assert (parts >= 0).all()  # the reserve too: the explicit pool fits the GPU
    assert (m.gpu_weights_bytes == 16_060_000_000).all()  # Llama-3.1-8B's weights on one GPU
    # the KV parts are the pool's usable bytes, the reserve the rest of the HBM (with
    # paged_hash's default vLLM rules, block 0 is the null block: reserved, not KV)
    kv = parts[:, 2:].sum(axis=1)
    blocks_left_out = 2 if kind == "paged_hash" else 1
    assert (kv == kv[0]).all()
    assert 0 <= 3e9 - kv[0] < r.summary["kv_bytes_per_token"] * 16 * blocks_left_out
    assert (m.gpu_paused_kv_bytes > 0).any()  # the run exercised pauses


def test_the_parts_agree_with_the_allocator_books(agent_run):
    kind, r = agent_run
    m = r.memory
    n = r.summary["num_gpus"]
    held = m.gpu_active_kv_bytes + m.gpu_paused_kv_bytes + m.gpu_internal_waste_bytes
    assert (held * n == m.allocated_bytes).all()
    assert (m.gpu_cached_kv_bytes * n == m.cached_bytes).all()
    assert ((m.gpu_free_bytes + m.gpu_external_waste_bytes) * n == m.free_bytes).all()
    if kind in ("radix", "paged_hash"):
        assert (m.gpu_cached_kv_bytes > 0).any()
    else:
        assert (m.gpu_cached_kv_bytes == 0).all()
    if KINDS[kind]["kind"] in ("paged", "radix", "paged_hash"):
        assert (m.gpu_external_waste_bytes == 0).all()  # any free block serves
    else:  # external waste is phi_ext's share of the free KV
        free = m.free_bytes > 0
        ext = m.gpu_external_waste_bytes[free] * n / m.free_bytes[free]
        assert np.allclose(ext, m.phi_ext[free], rtol=0, atol=1e-12)


def test_physical_paused_never_exceeds_the_logical_figure(agent_run):
    kind, r = agent_run
    m, s = r.memory, r.summary
    physical = m.gpu_paused_kv_bytes * s["num_gpus"]
    assert (physical <= m.paused_kv_bytes).all()
    assert s["paused_hbm_bytes_peak"] == physical.max()
    if kind in ("static", "contiguous", "buddy"):  # nothing shared: the same figure
        assert (physical == m.paused_kv_bytes).all()
        assert s["paused_hbm_bytes_mean"] == pytest.approx(s["paused_kv_bytes_mean"])
    else:  # forks and the prefix cache share blocks: counted once here
        assert (physical < m.paused_kv_bytes).any()
        assert s["paused_hbm_bytes_mean"] < s["paused_kv_bytes_mean"]


def test_internal_waste_is_the_unfilled_allocated_slots(agent_run):
    kind, r = agent_run
    m = r.memory
    n, per_token = r.summary["num_gpus"], r.summary["kv_bytes_per_token"]
    waste = m.gpu_internal_waste_bytes * n
    if kind == "static":  # every buffer is max_tokens slots
        assert (waste == m.allocated_bytes - m.logical_bytes).all()
    if kind == "paged":  # at most one partly filled block per sequence
        assert (waste <= m.num_sequences * 15 * per_token).all()
        assert (waste > 0).any()


def test_tensor_parallel_offload_run_partitions_each_gpu():
    r = run_scenario("workloads/human_in_loop_nvme.yaml", **{
        "workload.num_trajectories": 6, "pause_policy.kind": "offload_host",
        "engine.check_invariants": True})  # fmt: skip
    m, n = r.memory, r.summary["num_gpus"]
    assert n == 8
    assert (_parts(m).sum(axis=1) == H100_HBM).all()
    held = m.gpu_active_kv_bytes + m.gpu_paused_kv_bytes + m.gpu_internal_waste_bytes
    assert (held * n == m.allocated_bytes).all()
    assert (m.gpu_paused_kv_bytes > 0).any() and (m.gpu_weights_bytes * n == 141_100_000_000).all()


def test_the_fast_path_rows_equal_the_exact_rows():
    """Coalesced decode runs record one row per run: it equals the step-by-step row."""
    ov = {"workload.num_trajectories": 4, "hardware.kv_pool_bytes_per_gpu": 3e9}
    fast = run_scenario(AGENTS, **ov).memory
    exact = run_scenario(AGENTS, **ov, **{"engine.exact": True}).memory
    assert len(fast) < len(exact) / 5
    exact = exact.drop_duplicates("t_s", keep="last").set_index("t_s")
    fast = fast.drop_duplicates("t_s", keep="last").set_index("t_s")
    both = exact.loc[fast.index, list(GPU_PARTS)]
    assert both.equals(fast[list(GPU_PARTS)])


# ----------------------------------------------------------- the counters, exactly
def _paged(bs: int = 16, blocks: int = 10):
    return make_allocator("paged", pool_bytes=blocks * bs, kv_bytes_per_token=1, block_size=bs)


def test_a_block_shared_by_an_active_and_a_paused_sequence_is_active():
    a = _paged()
    assert a.allocate("A", 40)  # 3 blocks, 8 slots of the last unfilled
    assert a.kv_slots() == KVSlots(48, 8, 0, 0, 112, 160)
    assert a.fork("A", "B")  # B shares every block: nothing new
    a.set_held("B", True)
    assert a.kv_slots() == KVSlots(48, 8, 0, 0, 112, 160)  # A still maps them: active
    a.free("A")
    assert a.kv_slots() == KVSlots(48, 8, 40, 0, 112, 160)  # only the paused B now
    a.set_held("B", False)
    assert a.kv_slots().paused == 0
    a.check_invariants()


def test_copy_on_write_leaves_the_old_tail_to_the_paused_parent():
    a = _paged()
    assert a.allocate("P", 40) and a.fork("P", "C")
    a.set_held("P", True)
    assert a.append("C", 1)  # C copies the shared tail (8 tokens) and writes one more
    # P alone maps its old tail (8 filled slots: paused); blocks 0-1 are shared (active);
    # both tails have unfilled slots: 8 in P's, 7 in C's
    assert a.kv_slots() == KVSlots(64, 15, 8, 0, 96, 160)
    a.check_invariants()
    a.free("C")  # P keeps all its blocks, now alone: 40 filled slots paused
    assert a.kv_slots() == KVSlots(48, 8, 40, 0, 112, 160)
    a.free("P")  # freeing a held sequence ends its hold
    assert a.kv_slots() == KVSlots(0, 0, 0, 0, 160, 160)
    a.check_invariants()


def test_a_prefix_hit_on_a_paused_context_makes_it_active():
    a = make_allocator("radix", pool_bytes=10 * 16, kv_bytes_per_token=1, block_size=16)
    assert a.allocate("P", 40, content=[("sys", 32), ("p", 8)])
    a.set_held("P", True)
    assert a.kv_slots().paused == 40
    r = a.allocate("N", 36, content=[("sys", 32), ("n", 4)])  # shares the 2 full blocks
    assert r.matched_tokens == 32
    assert a.kv_slots() == KVSlots(64, 8 + 12, 8, 0, 96, 160)  # P's own tail stays paused
    a.check_invariants()


def test_buffer_kinds_count_reserved_slots_as_internal_waste():
    a = make_allocator("static", pool_bytes=1000, kv_bytes_per_token=1, max_tokens=100)
    assert a.allocate("x", 30) and a.allocate("y", 50)
    a.set_held("y", True)
    assert a.kv_slots() == KVSlots(200, 120, 50, 0, 800, 1000)
    assert a.append("y", 5)  # a write to a held sequence stays paused
    assert a.kv_slots() == KVSlots(200, 115, 55, 0, 800, 1000)
    a.check_invariants()


def test_deferred_tokens_fill_unfilled_slots():
    kv = KVManager(_paged())

    class Req:
        seq_id, prompt_tokens, output_limit, num_computed = "r", 20, 50, 0
        lookup_tokens = hit_tokens = held_tokens = preemptions = remote_tokens = 0
        admitted_s = None
        num_tokens = 20

    req = Req()
    assert kv.admit(req)
    req.num_computed = 20
    assert kv.grow(req, 5)  # fits the second block: deferred, not appended yet
    assert kv.ledger.pending_tokens == 5
    assert kv.kv_slots() == KVSlots(32, 7, 0, 0, 128, 160)


@pytest.mark.parametrize("kind", list(KINDS))
def test_random_operations_keep_the_counters_equal_to_a_scan(kind):
    opts = {k: v for k, v in KINDS[kind].items() if k != "kind"}
    if kind == "static":
        opts["max_tokens"] = 256
    a = make_allocator(KINDS[kind]["kind"], pool_bytes=4096, kv_bytes_per_token=1, **opts)
    rng = random.Random(7)
    live: list[str] = []
    for i in range(600):
        op = rng.random()
        if op < 0.3 or not live:
            n = rng.randint(1, 120)
            sys = min(n - 1, rng.choice((0, 16, 32, 48)))
            content = [("sys", sys), (f"own{i}", n - sys)] if sys else [(f"own{i}", n)]
            if a.allocate(f"s{i}", n, content=content):
                live.append(f"s{i}")
        elif op < 0.55:
            s = rng.choice(live)
            n = rng.randint(1, 20)
            a.append(s, n, content=[(f"{s}+{i}", n)])
        elif op < 0.65:
            if a.fork(s := rng.choice(live), f"s{i}"):
                live.append(f"s{i}")
        elif op < 0.85:
            s = rng.choice(live)
            a.set_held(s, not a.is_held(s))
        else:
            s = live.pop(rng.randrange(len(live)))
            a.free_uncached(s) if rng.random() < 0.3 else a.free(s)
        a.check_invariants()  # kv_slots against a scan of the tables and the books
    slots = a.kv_slots()
    assert slots.allocated + slots.cached + slots.free == slots.usable


# ------------------------------------------------------------------ the recorder
def test_fractional_slot_bytes_still_sum_exactly():
    alloc = make_allocator("paged", pool_bytes=7 * 16 * 3, kv_bytes_per_token=3, block_size=16)
    assert alloc.allocate("a", 21) and alloc.fork("a", "b")
    alloc.set_held("b", True)
    alloc.free("a")
    layout = HbmLayout(hbm_bytes_per_gpu=1000, weights_bytes_per_gpu=333,
                       kv_bytes_per_token_per_gpu=1.5, num_gpus=2)  # fmt: skip
    rec = Recorder(pool_bytes=alloc.pool_bytes, block_kind=True, hbm=layout)
    rec.memory(0.0, alloc.metrics(), 60.0, 1, 0, 0, slots=alloc.kv_slots())
    row = rec.frames()["memory"].iloc[0]
    parts = [int(row[c]) for c in GPU_PARTS]
    assert sum(parts) == 1000
    # 112 slots x 1.5 = 168 B of KV; 21 paused slots = 31.5 B and 11 unfilled = 16.5 B,
    # rounded cumulatively (to 32 and 48 - 32): the parts still sum to the pool's bytes
    assert parts == [333, 1000 - 333 - 168, 0, 32, 0, 16, 0, 120]
    assert rec.paused_hbm_bytes_peak == 21 * 3


def test_a_recorder_without_slots_or_layout_still_partitions_its_pool():
    alloc = make_allocator("contiguous", pool_bytes=100, kv_bytes_per_token=1)
    assert alloc.allocate("x", 10)
    rec = Recorder(pool_bytes=100, phi_ext_request_bytes=20)
    rec.memory(0.0, alloc.metrics(), 0.0, 0, 1, 0)
    row = rec.frames()["memory"].iloc[0]
    assert [int(row[c]) for c in GPU_PARTS] == [0, 0, 10, 0, 0, 0, 0, 90]
