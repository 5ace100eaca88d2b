"""Pause policies in the engine: decide at each tool call, move the KV, gate the next turn.

Responsibility: the engine side of SPEC 3.11-3.13. At the end of a non-final turn the
KV manager asks this controller (it is the KV manager's pause hook) what to do; it builds
``PauseFacts`` from what the engine knows, asks the scenario's policy (``sim.policy``) and:
  * ``hold``: the blocks stay resident (a TTL hold releases them when the TTL expires);
  * ``recompute``: the blocks are freed now; the next turn prefills again;
  * ``offload_host`` / ``offload_nvme``: host-DRAM or NVMe frames are taken and a copy-out
    starts on the copy engines; the GPU blocks are freed at the first step boundary after
    it completes (SPEC 3.12). At tool return the next turn is held back (the node's gate):
    HBM blocks are taken first (retried at every step boundary), then the copy-in runs,
    and only once the context is resident is the turn submitted (naive reload).
A tool that returns before its copy-out completed finds its blocks still resident and goes
on at once (the copy's frames are released when it ends). ``resume: speculative`` starts
the reload at ``T_min - T_reload - margin`` after the tool call; ``resume: pipelined``
submits the turn while its copy-in still runs, once the rest of the copy fits under the
predicted prefill of the observation (the chapter's simplification: that part of the
transfer is hidden and its blocks count as resident from then on); a ``ttl_pin`` hold gets
its release action when the TTL expires. Every pause gets a record
(``frame()``: pauses.parquet) and the run's summary its aggregates (``summary()``).

Invariants (``check_invariants``): no running request reads a sequence whose blocks are
not all in HBM (``TieredBlockTable.check_readable``); host and NVMe frame pools never
exceed their capacity; every pause is in exactly one state.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sim.cost import StepWork
from sim.memory.errors import InvariantError
from sim.memory.kv_manager import HOLD, RECOMPUTE, RECOMPUTE_EVICT
from sim.memory.tiers import BlockFrame, FramePool, Tier, TieredBlockTable
from sim.metrics.stats import describe
from sim.policy import PauseFacts, WaitPredictor, make_policy
from sim.sizing import prefill_flops
from sim.units import GB

#: frame pools are capped at this many frames (a frame is then several blocks)
MAX_FRAMES = 1 << 16
NAN = math.nan


@dataclass(slots=True)
class _Pause:
    """One tool call's pause, from the turn's end to the next turn's context being resident."""

    pause_id: int
    req: Any  # the turn that ended
    seq: Hashable
    tokens: int
    bytes_per_gpu: float  # what each GPU moves over its link
    bytes_total: float  # what the replica stores (host DRAM / NVMe)
    action: str  # the policy's first answer
    reason: str
    predicted_wait_s: float | None
    start_s: float
    state: str = "held"  # held copying_out offloaded waiting_hbm copying_in streaming
    #                      resident recompute done gone (streaming: pipelined, turn released)
    moved_to: str = ""  # final place of the state: hold, recompute, offload_host, offload_nvme
    release: str | None = None  # TTL hold: the action at expiry
    prefetch: Any = None  # the decision's PrefetchPlan (offloads)
    facts: PauseFacts | None = None  # what the policy saw (the pipelined release reads it)
    awaited: bool = False  # a turn waits for this copy-in (counted in ``copies_in``)
    pool: FramePool | None = None
    copy_out_done_s: float = NAN
    freed_s: float = NAN
    tool_return_s: float = NAN
    reload_start_s: float = NAN
    copy_in_done_s: float = NAN
    resident_s: float = NAN
    next_req: Any = None
    bytes_out: float = 0.0
    bytes_in: float = 0.0
    recompute_tokens: int = 0
    note: str = ""


class PauseController:
    """The KV manager's pause hook and the node's gate for offloaded trajectories."""

    def __init__(self, env, options, resolved, cost) -> None:
        self.env = env
        self.policy = make_policy(options)
        self.name = options.kind
        p = options.predictor
        self.predictor = WaitPredictor(
            p.mode, quantile=p.quantile, window=p.window, prior_wait_s=p.prior_wait_s
        )
        self.oracle = p.mode == "oracle"
        self.model = resolved.model
        self.num_gpus = resolved.num_gpus
        self.bpt_gpu = resolved.kv_bytes_per_token_per_gpu
        self.bpt = resolved.kv_bytes_per_token
        self.pool_bytes = resolved.pool_bytes
        self.tiers = resolved.tiers
        cfg = cost.config
        self.params = cfg.params or resolved.model.active_params
        self.attention = cfg.attention_flops
        self.prefill_rate = cfg.mfu_prefill * cost.peak * cost.tp
        self.cost = cost
        self.node = self.kv = self.sched = self.copies = None
        self.host = self.nvme = None
        self.table = TieredBlockTable()
        self.pauses: list[_Pause] = []
        self._by_seq: dict[Hashable, _Pause] = {}
        self._restores: list[_Pause] = []
        self.copies_in = 0  # copy-ins running: their turns come to the node when done
        self.streaming = 0  # pipelined copy-ins still running after their turn went on
        self._recomputing: dict[int, _Pause] = {}  # id(next request) -> pause
        self._budget = (-1.0, 0.0)  # (step end, link bytes per GPU left): min_waste's budget

    def attach(self, node, kv, sched, copies) -> None:
        """Wire the controller to the engine it serves (after all are built)."""
        self.node, self.kv, self.sched, self.copies = node, kv, sched, copies
        block = getattr(kv.alloc, "block_size", None) or 16
        t = self.tiers
        #: the tier-tagged block table is kept only when invariants are checked (it is
        #: what they read); a run without checks skips building an entry per frame
        self.track_blocks = bool(getattr(node, "check", False))
        self.host = _pool(Tier.HOST, t.host_pool_bytes, block * self.bpt)
        self.nvme = _pool(Tier.NVME, t.nvme_pool_bytes, block * self.bpt)

    # ------------------------------------------------------------- the pause hook
    def on_turn_end(self, req, kv) -> str:
        """A non-final turn ended: decide, start what the decision needs; HOLD/RECOMPUTE."""
        seq, now = req.seq_id, self.env.now
        kv.ledger.flush(seq)
        tokens = kv.alloc.seq_tokens(seq)
        facts = self._facts(req, tokens)
        d = self.policy.decide(facts)
        p = _Pause(
            len(self.pauses), req, seq, tokens, facts.state_bytes_per_gpu,
            facts.state_bytes_total, d.action, d.reason, facts.predicted_wait_s, now,
        )  # fmt: skip
        self.pauses.append(p)
        self._by_seq[seq] = p
        p.prefetch, p.facts = d.prefetch, facts
        if d.ttl_s is not None:
            p.release = d.release
            self.env.process(self._ttl(p, d.ttl_s))
        return self._apply(p, d.action, d.evict_from_prefix_cache)

    def _apply(self, p: _Pause, action: str, evict: bool = False) -> str:
        """Start ``action`` for the pause; what the KV manager does now (HOLD/RECOMPUTE,
        RECOMPUTE_EVICT when the dropped context leaves the prefix cache too)."""
        p.moved_to = action
        if action == HOLD:
            p.state = "held"
            return HOLD
        if action == RECOMPUTE:
            p.state = "recompute"
            return RECOMPUTE_EVICT if evict else RECOMPUTE
        pool = self.host if action == "offload_host" else self.nvme
        if pool is None or not pool.allocate(p.pause_id, self._frames(pool, p)):
            p.moved_to, p.state, p.note = HOLD, "held", f"{action}: no room at copy time"
            return HOLD
        p.pool, p.state = pool, "copying_out"
        self.env.process(self._copy_out(p))
        return HOLD  # resident until the copy-out completes

    def _facts(self, req, tokens: int) -> PauseFacts:
        kv, t = self.kv, self.tiers
        true = req.next_pause_s
        if self.oracle:
            wait = true
        else:
            wait = self.predictor.predict(req.tool_name)
        free = kv.alloc.metrics().free_bytes / self.pool_bytes if self.pool_bytes else 0.0
        running = sum(r.num_computed for r in self.sched.running if r is not req) * self.bpt
        return PauseFacts(
            tokens=tokens,
            state_bytes_per_gpu=tokens * self.bpt_gpu,
            state_bytes_total=tokens * self.bpt,
            predicted_wait_s=wait,
            hbm_free_fraction=min(1.0, max(0.0, free)),
            link_bw_bytes_per_s=t.link_bw_bytes_per_s,
            prefill_flops_per_s=self.prefill_rate,
            recompute_flops=self._flops(tokens),
            host_free_bytes=_free_bytes(self.host),
            nvme_free_bytes=_free_bytes(self.nvme),
            nvme_bw_bytes_per_s=t.nvme_bw_bytes_per_s if self.nvme is not None else 0.0,
            tool_name=req.tool_name,
            tool_min_wait_s=self.predictor.min_wait_s(req.tool_name),
            running_batch_bytes=running,
            swap_budget_bytes_per_gpu=self._swap_budget(),
        )

    def _swap_budget(self) -> float:
        """Link bytes per GPU the step that just ended could hide (shared by its pauses)."""
        end, left = self._budget
        if end != self.env.now:
            left = self.tiers.link_bw_bytes_per_s * self.node.last_step_s
            self._budget = (self.env.now, left)
        return left

    def _flops(self, tokens: int) -> float:
        m = self.model
        return prefill_flops(self.params, m.num_layers, m.d_model, tokens, self.attention)

    def _frames(self, pool: FramePool, p: _Pause) -> int:
        return max(1, math.ceil(p.bytes_total / pool.frame_bytes))

    # --------------------------------------------------------------- processes
    def _copy_out(self, p: _Pause):
        c = self.copies
        if p.pool.tier == Tier.HOST:
            yield c.copy_out(p.bytes_per_gpu)
        else:
            yield c.to_nvme(p.bytes_per_gpu, p.bytes_total)
        p.copy_out_done_s = self.env.now
        p.bytes_out = p.bytes_total
        self.node.call_at_boundary(lambda: self._copied_out(p))

    def _copied_out(self, p: _Pause) -> None:
        kv, seq = self.kv, p.seq
        if p.state != "copying_out":  # resumed, released or dropped meanwhile
            self._free_frames(p)
            return
        if not kv.alloc.is_live(seq) or seq not in kv.paused:  # dropped under pressure
            self._free_frames(p)
            p.state, p.moved_to, p.note = "recompute", RECOMPUTE, "dropped before copy-out end"
            return
        kv.release(seq, "offloaded")
        p.freed_s = self.env.now
        p.state = "offloaded"
        if self.track_blocks:
            self.table.set(seq, p.pool.frames_of(p.pause_id))
        plan = p.prefetch
        if plan is not None and plan.strategy == "speculative":
            delay = max(0.0, p.start_s + plan.fire_after_s - self.env.now)
            self.env.process(self._prefetch_timer(p, delay))

    def _prefetch_timer(self, p: _Pause, delay_s: float):
        yield self.env.timeout(delay_s)
        self.node.call_at_boundary(lambda: self._prefetch(p))

    def _prefetch(self, p: _Pause) -> None:
        """Speculative prefetch (SPEC 3.13): start the reload before the tool returns."""
        if p.state == "offloaded":
            p.state = "waiting_hbm"
            self._restores.append(p)

    def _copy_in(self, p: _Pause):
        c = self.copies
        if p.pool.tier == Tier.HOST:
            yield c.copy_in(p.bytes_per_gpu)
        else:
            yield c.from_nvme(p.bytes_per_gpu, p.bytes_total)
        now = self.env.now
        self._unawait(p)
        p.copy_in_done_s = now
        p.bytes_in = p.bytes_total
        self._free_frames(p)
        self._untrack(p.seq)
        if p.state == "streaming":  # pipelined: the turn went on before the copy ended
            p.state = "resident"
            self.streaming -= 1
            self.node.call_at_boundary(_nothing)  # wake the node: it ends after the copy
            return
        if p.state != "copying_in":  # released meanwhile
            return
        if p.next_req is None:  # prefetched: resident before the tool returned
            p.state = "prefetched"
            return
        if not self.kv.alloc.is_live(p.seq):  # a prefetch dropped under pressure
            self._recompute(p, "prefetched KV dropped under memory pressure")
            return
        p.state, p.resident_s = "resident", now
        self.node.submit(p.next_req)

    def _pipelined_release(self, p: _Pause):
        """Pipelined reload (SPEC 3.13): submit the turn once the rest of the copy-in
        (uncontended closed form) is at most the observation's predicted prefill time."""
        reload_s = p.facts.reload_s_for(p.moved_to) + self.tiers.link_overhead_s
        yield self.env.timeout(max(0.0, reload_s - self._observation_prefill_s(p)))
        if p.state != "copying_in" or not self.kv.alloc.is_live(p.seq):
            return  # the copy-in ended first (it submits the turn) or the state is gone
        self._unawait(p)
        p.state, p.resident_s = "streaming", self.env.now
        self.streaming += 1
        if p.seq in self.table:  # the overlapped rest counts as resident (the model)
            n = len(self.table.get(p.seq))
            self.table.remap(p.seq, 0, [BlockFrame(Tier.HBM, i) for i in range(n)])
        self.node.submit(p.next_req)

    def _observation_prefill_s(self, p: _Pause) -> float:
        """The cost model's time for the observation's prefill chunks, priced alone."""
        cfg = self.sched.config
        cap = getattr(cfg, "max_num_batched_tokens", 0) or (1 << 62)
        if not getattr(cfg, "chunked_prefill", True):
            cap = 1 << 62
        elif 0 < getattr(cfg, "long_prefill_token_threshold", 0) < cap:
            cap = cfg.long_prefill_token_threshold
        cached, rest, total = p.tokens, max(0, p.next_req.prompt_tokens - p.tokens), 0.0
        while rest > 0:
            n = min(cap, rest)
            total += self.cost.iteration_time(StepWork(0, 0, ((n, cached),))).total_s
            cached, rest = cached + n, rest - n
        return total

    def _ttl(self, p: _Pause, ttl_s: float):
        yield self.env.timeout(ttl_s)
        self.node.call_at_boundary(lambda: self._ttl_expired(p))

    def _ttl_expired(self, p: _Pause) -> None:
        kv = self.kv
        if p.state != "held" or p.seq not in kv.paused:
            return
        if p.release == RECOMPUTE:
            kv.release(p.seq, "ttl_expired")
            p.state, p.moved_to = "recompute", RECOMPUTE
            p.freed_s = self.env.now
        else:
            self._apply(p, p.release)

    # ---------------------------------------------------------------- the gate
    def admit_now(self, req) -> bool:
        """The node got ``req``: True = queue it now; False = its context comes back first."""
        p = self._by_seq.get(req.seq_id)
        if p is None or p.next_req is req:
            if p is not None:
                del self._by_seq[req.seq_id]
            return True
        now = self.env.now
        p.tool_return_s, p.next_req = now, req
        self.predictor.observe(p.req.tool_name, now - p.start_s)
        if p.state == "offloaded":
            p.state = "waiting_hbm"
            self._restores.append(p)
            return False
        if p.state in ("waiting_hbm", "copying_in"):  # a prefetch under way
            if p.state == "copying_in":
                self._await(p)
            return False
        del self._by_seq[req.seq_id]
        if p.state == "prefetched" and self.kv.alloc.is_live(p.seq):
            p.state, p.resident_s = "done", now
            return True
        if p.state in ("held", "copying_out") and self.kv.alloc.is_live(p.seq):
            if p.state == "copying_out":
                p.note = "tool returned before the copy-out ended"
            p.state, p.resident_s = "done", now
            return True
        if p.state != "recompute":
            p.note = p.note or "dropped under memory pressure"
        p.state = "recompute"
        self._recomputing[id(req)] = p
        return True

    def at_boundary(self) -> None:
        """Give waiting restores HBM blocks (FIFO) and start their copy-ins."""
        kv = self.kv
        while self._restores:
            p = self._restores[0]
            content = p.req.content_slice(0, p.tokens) if kv.uses_content else None
            if kv.restore(p.seq, p.tokens, content):
                self._restores.pop(0)
                p.state, p.reload_start_s = "copying_in", self.env.now
                if p.next_req is None:  # a prefetch: paused (counted, droppable) meanwhile
                    kv.pause(p.seq, p.req.traj_id)
                else:
                    self._await(p)
                self.env.process(self._copy_in(p))
                if p.next_req is not None and p.prefetch is not None and p.prefetch.pipelined:
                    self.env.process(self._pipelined_release(p))
                continue
            if p.next_req is None:  # a prefetch that finds no room: reload at tool return
                self._restores.pop(0)
                p.state = "offloaded"
                continue
            if self.sched.running:
                return  # room comes when running requests finish
            if kv.drop_paused() is not None:
                continue
            # nothing runs and nothing can be dropped: the pool is too small: recompute
            self._restores.pop(0)
            self._free_frames(p)
            self._untrack(p.seq)
            self._recompute(p, "no HBM room for the reload")

    def _untrack(self, seq: Hashable) -> None:
        if seq in self.table:
            self.table.drop(seq)

    def _await(self, p: _Pause) -> None:
        if not p.awaited:
            p.awaited = True
            self.copies_in += 1

    def _unawait(self, p: _Pause) -> None:
        if p.awaited:
            p.awaited = False
            self.copies_in -= 1

    def _recompute(self, p: _Pause, note: str) -> None:
        """The reload cannot happen: the next turn prefills its context again."""
        p.state, p.moved_to, p.note = "recompute", RECOMPUTE, note
        self._recomputing[id(p.next_req)] = p
        self._by_seq.pop(p.seq, None)
        self.node.submit(p.next_req)

    def on_release(self, seq: Hashable) -> None:
        """The workload released ``seq`` (a branch pruned, a fork's parent)."""
        p = self._by_seq.pop(seq, None)
        if p is None:
            return
        if p.state in ("offloaded", "waiting_hbm"):
            if p in self._restores:
                self._restores.remove(p)
            self._free_frames(p)
            self._untrack(seq)
        p.state = "gone"

    # -------------------------------------------------- residency after a recompute
    def admitted(self, req, now: float) -> None:
        p = self._recomputing.get(id(req))
        if p is not None and p.recompute_tokens == 0:
            p.recompute_tokens = max(0, p.tokens - req.num_computed)
        if p is not None and req.num_computed >= p.tokens:
            self._resident(req, now)

    def committed(self, plan, ends, chunks) -> None:
        """After a step or run: recomputing requests whose context is resident again."""
        if not self._recomputing:
            return
        for req, _n in plan.scheduled:
            p = self._recomputing.get(id(req))
            if p is None or req.num_computed < p.tokens:
                continue
            t = float(ends[-1])
            if chunks and len(ends) > 1 and req is plan.scheduled[-1][0]:
                done = plan.prefill_chunks[0][1] + np.cumsum(chunks[: len(ends)])
                i = int(np.searchsorted(done, p.tokens, side="left"))
                t = float(ends[min(i, len(ends) - 1)])
            self._resident(req, t)

    def _resident(self, req, t: float) -> None:
        p = self._recomputing.pop(id(req))
        p.resident_s, p.state = t, "done"

    def _free_frames(self, p: _Pause) -> None:
        if p.pool is not None and p.pool.holds(p.pause_id):
            p.pool.free(p.pause_id)

    # --------------------------------------------------------------- invariants
    def check_invariants(self, sched) -> None:
        """Steps read only HBM blocks; tiers within capacity."""
        for req in sched.running:
            self.table.check_readable(req.seq_id)
        for pool in (self.host, self.nvme):
            if pool is None:
                continue
            owned = sum(self._frames(pool, p) for p in self.pauses if p.pool is pool and
                        pool.holds(p.pause_id))  # fmt: skip
            if not 0 <= pool.used_frames == owned <= pool.num_frames:
                raise InvariantError(
                    f"{pool.tier.name}: {pool.used_frames} frames used, {owned} owned, "
                    f"capacity {pool.num_frames}"
                )

    # ------------------------------------------------------------------ metrics
    def frame(self, kv, sim_time_s: float) -> pd.DataFrame:
        """One row per pause (pauses.parquet)."""
        starts: dict[Hashable, list[float]] = {}
        ids: dict[Hashable, list[int]] = {}
        for p in self.pauses:  # in start order
            starts.setdefault(p.seq, []).append(p.start_s)
            ids.setdefault(p.seq, []).append(p.pause_id)
        held = [0.0] * len(self.pauses)
        for r in kv.pause_log:  # a prefetch pauses the sequence again: same pause
            i = bisect.bisect_right(starts.get(r.seq_id, []), r.start_s) - 1
            if i >= 0:
                end = r.end_s if r.end_s is not None else sim_time_s
                held[ids[r.seq_id][i]] += r.tokens * (end - r.start_s)
        rows = [_row(p, held[p.pause_id] * self.bpt, self) for p in self.pauses]
        return pd.DataFrame(rows, columns=PAUSE_COLUMNS)

    def flops_for(self, tokens: int) -> float:
        return self._flops(tokens) if tokens > 0 else 0.0


PAUSE_COLUMNS = [
    "pause_id", "traj_id", "seq_id", "req_id", "turn", "tool_name", "tokens", "state_bytes",
    "decision", "reason", "moved_to", "note", "predicted_wait_s", "actual_wait_s", "start_s",
    "copy_out_done_s", "blocks_freed_s", "tool_return_s", "reload_start_s", "copy_in_done_s",
    "resident_s", "first_token_s", "resume_stall_s", "resume_latency_s", "paused_hbm_gb_s",
    "bytes_offloaded_host", "bytes_offloaded_nvme", "bytes_reloaded_host",
    "bytes_reloaded_nvme", "recompute_tokens", "recompute_flops", "recompute_s",
]  # fmt: skip


def _row(p: _Pause, held_byte_s: float, ctl: PauseController) -> tuple:
    ret = p.tool_return_s
    first = NAN
    if p.next_req is not None and p.next_req.first_token_s is not None:
        first = p.next_req.first_token_s
    stall = p.resident_s - ret
    host = p.pool is not None and p.pool.tier == Tier.HOST
    recompute = p.moved_to == RECOMPUTE
    return (
        p.pause_id, p.req.traj_id, str(p.seq), p.req.req_id, p.req.turn, p.req.tool_name,
        p.tokens, p.bytes_total, p.action, p.reason, p.moved_to, p.note,
        NAN if p.predicted_wait_s is None else p.predicted_wait_s, ret - p.start_s, p.start_s,
        p.copy_out_done_s, p.freed_s, ret, p.reload_start_s, p.copy_in_done_s, p.resident_s,
        first, stall, first - ret, held_byte_s / GB,
        p.bytes_out if host else 0.0, 0.0 if host else p.bytes_out,
        p.bytes_in if host else 0.0, 0.0 if host else p.bytes_in,
        p.recompute_tokens if recompute else 0,
        ctl.flops_for(p.recompute_tokens) if recompute else 0.0,
        stall if recompute else 0.0,
    )  # fmt: skip


def pause_summary(frame: pd.DataFrame) -> dict:
    """The summary.json aggregates of the pauses."""
    decisions = {a: int(n) for a, n in frame.decision.value_counts().sort_index().items()}
    moved = {a: int(n) for a, n in frame.moved_to.value_counts().sort_index().items()}
    return {
        "pause_count": int(len(frame)),
        "resume_latency_s": describe(frame.resume_latency_s.to_numpy()),
        "resume_stall_s": describe(frame.resume_stall_s.to_numpy()),
        "paused_hbm_gb_s": float(frame.paused_hbm_gb_s.sum()),
        "recompute_flops": float(frame.recompute_flops.sum()),
        "bytes_offloaded": float((frame.bytes_offloaded_host + frame.bytes_offloaded_nvme).sum()),
        "bytes_reloaded": float((frame.bytes_reloaded_host + frame.bytes_reloaded_nvme).sum()),
        "pause_decisions": decisions,
        "pause_outcomes": moved,
    }


def _nothing() -> None:
    """A boundary call that only wakes the node."""


def _pool(tier: Tier, capacity_bytes: float, block_bytes: float) -> FramePool | None:
    if capacity_bytes <= 0:
        return None
    per_frame = max(1, math.ceil(capacity_bytes / (block_bytes * MAX_FRAMES)))
    return FramePool.from_bytes(tier, capacity_bytes, block_bytes * per_frame)


def _free_bytes(pool: FramePool | None) -> float:
    """Free bytes a state is sure to fit in (one frame of rounding kept back)."""
    if pool is None:
        return 0.0
    return max(0, pool.free_frames - 1) * pool.frame_bytes


__all__ = ["PAUSE_COLUMNS", "PauseController", "pause_summary"]
