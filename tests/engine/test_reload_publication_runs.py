"""A reloaded pause context becomes a prefix hit only once its copy-in ended, in runs.

An offloaded agent context copied back from host DRAM takes its HBM blocks when the
copy-in starts (``KVManager.restore``); vLLM's KV connector caches a loaded request's
blocks only once the scheduler sees its load finished, and SGLang's HiCache load-back
makes the loaded nodes usable once the load is done. So a look-up made while the bytes are
still on the link must not hit them: the lifecycle publishes them (``KVManager.restored``)
with the posts of the step boundary after the copy-in ends, before the turn it submits.
The hand-built timeline is tests/sched/test_reload_publication.py; fast == exact on these
runs is in tests/engine/test_modes.py (``agents-*-offload``).
"""

from __future__ import annotations

import pytest
from engine_helpers import run
from test_modes import AGENTS, OFFLOAD

from sim.engine.pauses.lifecycle import PauseLifecycle
from sim.memory.kv_manager import KVManager

#: small agents over a slow host link (1 GB/s): copy-ins last several steps, so new
#: trajectories look their prompts up while other agents' contexts are still in flight
AGENTS_OFFLOAD = {**AGENTS, **OFFLOAD, "workload.num_trajectories": 16}


@pytest.fixture
def probe(monkeypatch):
    """Log each ``restored`` (sequence, simulation time, whether a reload was in flight,
    whether the sequence is live) and count the fresh look-ups made while some reload is in flight."""
    log: dict = {"restored": [], "during": 0, "env": None}
    attach, restored, admit = PauseLifecycle.attach, KVManager.restored, KVManager.admit

    def attach_(self, *a, **k):
        log["env"] = self.env
        attach(self, *a, **k)

    def restored_(self, seq):
        live = self.alloc.is_live(seq)
        log["restored"].append((seq, log["env"].now, seq in self._reloading, live))
        restored(self, seq)

    def admit_(self, req, first_chunk=None):
        if self._reloading and not self.alloc.is_live(req.seq_id):
            log["during"] += 1  # a fresh look-up while a context is in flight
        return admit(self, req, first_chunk)

    monkeypatch.setattr(PauseLifecycle, "attach", attach_)
    monkeypatch.setattr(KVManager, "restored", restored_)
    monkeypatch.setattr(KVManager, "admit", admit_)
    return log


@pytest.mark.parametrize("kind", ["radix", "paged_hash"])
@pytest.mark.parametrize("resume", ["naive", "pipelined", "speculative"])
def test_reloaded_blocks_are_hits_only_from_the_boundary_after_the_copy_in(probe, kind, resume):
    r = run("agent_swarm.yaml", **AGENTS_OFFLOAD, **{"allocator.kind": kind,
            "pause_policy.resume": resume, "engine.exact": True})  # fmt: skip
    assert probe["during"] > 0  # look-ups did happen while contexts were in flight
    reloads = r.pauses.dropna(subset=["copy_in_done_s"])
    assert len(reloads) > 0
    published = {}
    for seq, t, in_flight, live in probe["restored"]:
        # a copy-in that ended held its blocks back until then, unless they were freed
        # meanwhile (a prefetch dropped under pressure, a streaming turn preempted)
        assert in_flight == live
        if in_flight:
            published.setdefault(str(seq), []).append(t)  # (pauses.parquet: seq_id as text)
    assert published
    boundaries = set(r.steps.start_s) | set(r.steps.end_s)
    starts = reloads.groupby("seq_id").reload_start_s.apply(sorted)
    shown = 0
    for p in reloads.itertuples():
        later = [s for s in starts[p.seq_id] if s > p.reload_start_s]  # its next reload
        until = later[0] if later else float("inf")
        times = [t for t in published.get(p.seq_id, []) if p.copy_in_done_s <= t < until]
        if not times:  # freed before its copy-in ended: nothing of it was ever shown
            continue
        shown += 1
        t = times[0]
        assert len(times) == 1 and (t in boundaries or t == p.copy_in_done_s)  # a boundary
        if resume != "pipelined" and p.first_token_s == p.first_token_s:
            assert t < p.first_token_s  # before its turn ran (pipelined: it streams)
    assert shown > 0
