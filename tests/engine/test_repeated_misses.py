"""A waiting request asked again after a miss, with nothing changed in the allocator,
misses without asking it (``KVManager.admit``): whole runs are identical to a reference
that always asks (``KVManager.retry_misses``), under memory pressure, on every allocator
kind; the shortcut really fires there; and a radix miss's split is made once.
"""

from __future__ import annotations

import os

import pytest
from engine_helpers import WORKLOADS, assert_same_summary
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.memory.kv_manager import KVManager
from sim.memory.registry import make_allocator
from sim.run.runner import build

#: a small agent swarm under a small pool: the waiting queue's head misses step after step
AGENTS = {
    "workload.turns": {"kind": "uniform", "low": 2, "high": 5},
    "workload.system_prompt_tokens": 512,
    "workload.tool_tokens": 256,
    "workload.task_tokens": 100,
    "workload.output_tokens": {"kind": "lognormal", "median": 40, "sigma": 0.6, "max": 300},
    "workload.observation_tokens": {"kind": "lognormal", "median": 400, "sigma": 0.8, "max": 3000},
    "engine.check_invariants": True,
}


def _run(retry: bool, overrides: dict, monkeypatch: pytest.MonkeyPatch):
    """(the run's result, admissions answered without the allocator)."""
    with monkeypatch.context() as m:
        m.setattr(KVManager, "retry_misses", retry)
        sim = build(str(WORKLOADS / "agent_swarm.yaml"), **AGENTS, **overrides)
        result = sim.run()
    return result, sim.kv.repeated_misses


def _same_runs(overrides: dict, monkeypatch: pytest.MonkeyPatch) -> int:
    fast, skipped = _run(False, overrides, monkeypatch)
    ref, none = _run(True, overrides, monkeypatch)
    assert none == 0
    assert_same_summary(fast.summary, ref.summary, rel=0.0)
    for table in ("requests", "steps", "memory", "trajectories", "pauses"):
        a, b = getattr(fast, table), getattr(ref, table)
        assert a.equals(b), table
    return skipped


@pytest.mark.parametrize("kind", ["radix", "paged", "paged_hash", "contiguous", "buddy"])
def test_runs_under_pressure_are_identical_and_the_shortcut_fires(kind, monkeypatch):
    skipped = _same_runs(
        {
            "allocator.kind": kind,
            "workload.num_trajectories": 10,
            "workload.arrival.concurrency": 8,
            "hardware.kv_pool_bytes_per_gpu": 0.3e9,
        },
        monkeypatch,
    )
    # the pool is short enough that a retry met an unchanged allocator; contiguous grows
    # a running sequence's buffer at every step (the allocator changes every decision)
    assert (skipped > 0) == (kind != "contiguous")


@pytest.mark.parametrize("kind", ["radix", "paged_hash"])
def test_a_hybrid_models_runs_are_identical_and_the_shortcut_fires(kind, monkeypatch):
    """gpt-oss-20b (sliding windows of 128 tokens): a new request's first chunk's window
    blocks are counted with its admission, so a miss depends on the chunk the token
    budget allows too and the shortcut answers only a retry with the same first step
    (``tests/memory/test_refused_admission.py`` has a retry that a smaller chunk admits);
    whole runs still equal the always-asking reference."""
    skipped = _same_runs(
        {
            "allocator.kind": kind,
            "model": "gpt-oss-20b",
            "workload.num_trajectories": 10,
            "workload.arrival.concurrency": 8,
            "hardware.kv_pool_bytes_per_gpu": 0.1e9,
        },
        monkeypatch,
    )
    assert skipped > 0


@settings(
    max_examples=int(os.environ.get("KVSIM_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    kind=st.sampled_from(["radix", "paged", "paged_hash", "contiguous", "buddy"]),
    pool=st.sampled_from([0.2e9, 0.3e9, 0.6e9]),
    seed=st.integers(0, 50),
    policy=st.sampled_from(["hold", "recompute"]),
    exact=st.booleans(),
)
def test_random_pressure_runs_match_the_always_retrying_reference(
    kind, pool, seed, policy, exact, monkeypatch
):
    _same_runs(
        {
            "allocator.kind": kind,
            "seed": seed,
            "pause_policy.kind": policy,
            "engine.exact": exact,
            "workload.num_trajectories": 6,
            "workload.arrival.concurrency": 6,
            "hardware.kv_pool_bytes_per_gpu": pool,
        },
        monkeypatch,
    )


class _Req:
    """The ``KVRequest`` fields ``admit`` reads and writes."""

    def __init__(self, seq_id: int, spans: list[tuple[str, int]]) -> None:
        self.seq_id = seq_id
        self.spans = spans
        self.prompt_tokens = sum(n for _, n in spans)
        self.output_limit = 4
        self.num_computed = self.lookup_tokens = self.hit_tokens = self.held_tokens = 0
        self.preemptions = self.remote_tokens = 0
        self.admitted_s = None

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens

    def content_slice(self, start: int, stop: int) -> list[tuple[str, int]]:
        assert (start, stop) == (0, self.prompt_tokens)
        return self.spans


def test_a_radix_miss_splits_once_and_the_repeat_asks_nothing(monkeypatch):
    """The first miss splits the cached node where its hit ends; the repeat would find
    the split made, and is answered without the allocator until something changes."""
    alloc = make_allocator("radix", pool_bytes=12 * 4, kv_bytes_per_token=1, block_size=4)
    kv = KVManager(alloc)
    first = _Req(1, [("a", 16)])  # 4 blocks, cached once computed, kept when freed
    assert kv.admit(first)
    first.num_computed = 16  # its prefill ran (the engine's commit publishes it)
    kv.computed()
    kv.release(1)
    filler = _Req(2, [("f", 32)])  # 8 blocks: the pool is full
    assert kv.admit(filler)
    head = _Req(3, [("a", 8), ("b", 24)])  # hits 2 blocks of "a": needs 6 more
    nodes = alloc.index.tree.n_nodes
    assert not kv.admit(head)
    assert alloc.index.tree.n_nodes == nodes + 1  # the miss split "a" after its 2 blocks
    calls = []
    real = alloc.allocate
    monkeypatch.setattr(alloc, "allocate", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert not kv.admit(head) and not kv.admit(head)
    assert calls == [] and kv.repeated_misses == 2
    monkeypatch.setattr(KVManager, "retry_misses", True)
    assert not kv.admit(head)  # asked: the same miss, and no second split
    assert len(calls) == 1 and alloc.index.tree.n_nodes == nodes + 1
    monkeypatch.setattr(KVManager, "retry_misses", False)
    kv.release(2)  # a change: asked again, and now it fits
    assert kv.admit(head) and len(calls) == 2 and head.hit_tokens == 8


@pytest.mark.parametrize("kind", ["paged", "radix", "paged_hash", "contiguous", "buddy", "static"])
def test_changes_count_successes_and_frees_never_misses_nor_holds(kind):
    options = {"max_tokens": 64} if kind == "static" else {}
    a = make_allocator(kind, pool_bytes=128.0, kv_bytes_per_token=1.0, **options)
    content = (lambda n: [("x", n)]) if a.uses_content else (lambda n: None)
    assert a.allocate(1, 40, content=content(40)) and a.changes == 1
    assert not a.allocate(2, 400, content=content(400)) and a.changes == 1  # a miss
    a.set_held(1, True)
    a.set_held(1, False)
    assert a.changes == 1  # holding changes no allocation's outcome
    assert a.append(1, 2, content=[("y", 2)] if a.uses_content else None) and a.changes == 2
    a.free(1)
    assert a.changes == 3
