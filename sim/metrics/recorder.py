"""Append-only records of a run: engine steps, token emissions, memory, requests, trajectories.

Responsibility: remember what happened, cheaply, while the simulation runs, and turn it
into numpy record tables at the end (``tables()``: ``sim.metrics.table.Columns``; as
pandas DataFrames, ``frames()``, for callers that want them). Steps are kept once per step (end time) and once per
engine decision (a step, or a run of identical decode steps advanced in one go, with its
batch and cost breakdown); a decision that runs no step (preemptions, rejections or held
drops only) and requests refused at submission get a zero-time row (``n_steps`` 0). Inter-token gaps are never stored per token: a request that
emits in consecutive steps has gaps equal to those steps' durations, so each step keeps
the number of such gaps it closes (its *ITL weight*); only gaps that span several steps
(after a stall or a preemption) are stored one by one. Memory rows carry F9 (``phi_ext``)
for the scenario's reference request and for the head-of-queue request: 0 for block kinds
with anything free, NaN (None) with nothing free or no request. They also carry the HBM
of one GPU split into eight parts (``GPU_PARTS``: weights, reserve, active, paused and
cached KV, internal and external waste, free) from the KV manager's ``kv_slots`` (O(1),
counters the allocators keep) and the run's ``HbmLayout``: physical bytes, a block shared
by several sequences once, a block shared by an active and a paused sequence active.

Invariant: records are only appended (never edited) until ``tables()``; every time is
simulation time; the number of regular gaps plus irregular gaps equals the sum over
requests of (tokens emitted - 1); the step table's ``preempted``, ``rejected`` and
``held_drops`` columns sum to the run's preemptions, rejected requests and held drops; on
every memory row the ``GPU_PARTS`` columns are integers that sum exactly to the GPU's HBM.

A model of several layer groups (``groups``, a ``sim.sizing.group_split.GroupSplit``) also
gets each memory row's allocated bytes split by group (memory_groups.parquet, long form)
and, per group, the largest row and the time-weighted mean (the summary's
``peak_allocated_bytes_by_group`` and ``allocated_bytes_by_group_mean``); the split of a
row sums to its ``allocated_bytes``.

This module does not import pandas (the run path never does: ``frames()`` and
``group_frame()`` import it when called).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter, sub
from typing import TYPE_CHECKING

import numpy as np

from sim.memory.fragmentation import phi_ext
from sim.metrics.stats import TimeWeighted
from sim.metrics.table import ChunkedTable, Columns, to_frame
from sim.sched.request import STATUS_NAMES

if TYPE_CHECKING:
    import pandas as pd

    from sim.sizing.group_split import GroupSplit

_I, _L, _F = "i4", "i8", "f8"  # counts, token sums and ids, times and bytes
STEP_SCHEMA = [
    ("step", _L),
    ("n_steps", _I),
    ("start_s", _F),
    ("end_s", _F),
    ("duration_s", _F),
    ("n_decode", _I),
    ("n_prefill", _I),
    ("prefill_tokens", _I),
    ("batch_tokens", _I),
    ("decode_history_tokens", _L),
    ("admitted", _I),
    ("preempted", _I),
    ("rejected", _I),
    ("held_drops", _I),
    ("n_running", _I),
    ("n_waiting", _I),
    ("copy_bytes", _F),
    ("alloc_calls", _I),
    ("prefill_s", _F),
    ("attention_max_s", _F),
    ("weights_s", _F),
    ("kv_read_s", _F),
    ("gemm_s", _F),
    ("attention_s", _F),
    ("allreduce_s", _F),
    ("copy_s", _F),
    ("alloc_s", _F),
    ("overhead_s", _F),
    ("mem_s", _F),
    ("comp_s", _F),
    ("bound", "U7"),
    ("flops_per_gpu", _F),
    ("hbm_bytes_per_gpu", _F),
]
STEP_COLUMNS = tuple(n for n, _ in STEP_SCHEMA)
_COST_TERMS = STEP_COLUMNS[STEP_COLUMNS.index("weights_s") :]
_cost_terms = attrgetter(*_COST_TERMS)  # a StepCost's figures in column order, in one call

MEMORY_SCHEMA = [
    ("t_s", _F),
    ("allocated_bytes", _F),
    ("useful_bytes", _F),
    ("logical_bytes", _F),
    ("free_bytes", _F),
    ("cached_bytes", _F),
    ("eta_alloc", _F),
    ("eta_effective", _F),
    ("num_sequences", _I),
    ("paused_kv_bytes", _F),
    ("n_paused", _I),
    ("n_running", _I),
    ("n_waiting", _I),
    ("largest_free_bytes", _F),  # the largest free hole (block kinds: every free byte)
    ("n_free_extents", _I),  # free holes (block kinds: 1 when anything is free)
    ("phi_ext", _F),  # F9 for the reference request (metrics.phi_ext_request_tokens)
    ("phi_ext_next", _F),  # F9 for the head-of-queue request (NaN: nothing waiting)
    ("side_kv_bytes", _F),  # allocated to windowed and state-space groups (hybrid models)
    # one GPU's HBM, physically, in bytes; the eight sum to hbm_bytes_per_gpu (GPU_PARTS)
    ("gpu_weights_bytes", _L),
    ("gpu_reserve_bytes", _L),
    ("gpu_active_kv_bytes", _L),
    ("gpu_paused_kv_bytes", _L),
    ("gpu_cached_kv_bytes", _L),
    ("gpu_internal_waste_bytes", _L),
    ("gpu_external_waste_bytes", _L),
    ("gpu_free_bytes", _L),
]
MEMORY_COLUMNS = tuple(n for n, _ in MEMORY_SCHEMA)
#: memory_groups.parquet (a model of several layer groups): one row per memory row and group
GROUP_COLUMNS = ("t_s", "group", "kind", "allocated_bytes")
#: the per-GPU HBM partition of memory.parquet, in stacking order (weights first)
GPU_PARTS = MEMORY_COLUMNS[MEMORY_COLUMNS.index("gpu_weights_bytes") :]


@dataclass(frozen=True, slots=True)
class HbmLayout:
    """One GPU of the engine instance: its HBM, its share of the weights, the KV bytes of
    one token slot on it (every GPU holds its share of every slot: TP splits the heads, PP
    the layers, the most loaded stage sets the figure). What is neither weights nor the
    KV pool's whole slots or blocks is the reserve."""

    hbm_bytes_per_gpu: int
    weights_bytes_per_gpu: int
    kv_bytes_per_token_per_gpu: float
    num_gpus: int = 1

    @classmethod
    def of(cls, resolved, slot_bytes: float | None = None) -> HbmLayout:
        """From a resolved scenario (``sim.scenario.resolve.Resolved``); ``slot_bytes`` is
        the allocator's bytes per token slot over the instance when it differs from every
        layer's (a hybrid model's block table holds only the layers that keep every token;
        its other groups' blocks are slots of the same size in the same pool)."""
        per_gpu = resolved.kv_bytes_per_token_per_gpu
        if slot_bytes is not None and slot_bytes != resolved.kv_bytes_per_token:
            per_gpu = slot_bytes / resolved.num_gpus
        return cls(
            int(resolved.accelerator.memory_bytes),
            round(resolved.weights_bytes_per_gpu),
            per_gpu,
            resolved.num_gpus,
        )

REQUEST_SCHEMA = [
    ("req_id", _L),
    ("traj_id", _L),
    ("turn", _I),
    ("branch", _I),
    ("status", "U9"),
    ("finish_reason", "U19"),  # FINISH_REASONS; null while unfinished
    ("arrival_s", _F),
    ("admitted_s", _F),
    ("first_token_s", _F),
    ("finish_s", _F),
    ("prompt_tokens", _I),
    ("max_output_tokens", _I),
    ("output_tokens", _I),
    ("held_tokens", _I),
    ("lookup_tokens", _I),
    ("hit_tokens", _I),
    ("preemptions", _I),
    ("queue_s", _F),
    ("ttft_s", _F),
    ("e2e_s", _F),
    ("itl_mean_s", _F),
    ("itl_max_s", _F),
    ("branch_id", _I),  # unique within the trajectory; 0 = the main line
    ("parent_branch_id", _I),  # the branch it forked from; -1 on the main line
    ("depth", _I),  # fork nesting: 0 on the main line
    ("queued_s", _F),  # the boundary at which the engine received it (vLLM's queued_ts)
    ("scheduled_s", _F),  # when the plan that first admitted it was made (vLLM's scheduled_ts)
    ("preempted_lookup_tokens", _I),  # looked up again after preemptions (vLLM counts apart)
    ("preempted_hit_tokens", _I),
    ("workload", _I),  # the workload's name (kind, or mix component); codes while recording
]
REQUEST_COLUMNS = tuple(n for n, _ in REQUEST_SCHEMA)

TRAJECTORY_SCHEMA = [
    ("traj_id", _L),
    ("kind", "U24"),
    ("start_s", _F),
    ("end_s", _F),
    ("status", "U17"),  # completed | failed | context_exhausted
    ("turns", _I),
    ("requests", _I),
    ("branches", _I),
    ("output_tokens", _L),
    ("lookup_tokens", _L),
    ("hit_tokens", _L),
    ("pause_s", _F),
    ("compactions", _I),  # context-limit compactions/truncations (workload.context_limit)
    ("hold_byte_s", _F),
    ("depth", _I),  # deepest fork nesting reached (0: never forked)
    ("pruned", _I),  # branches a verifier rejected as they ended (tree search)
    # the provider view (workload.provider_cache; NaN without one): the calls' prompt
    # tokens, those read from and written to the provider's cache, the bill in US dollars
    ("provider_prompt_tokens", _F),
    ("provider_cached_tokens", _F),
    ("provider_written_tokens", _F),
    ("provider_bill_usd", _F),
    ("workload", _I),  # as in REQUEST_SCHEMA
]
TRAJECTORY_COLUMNS = tuple(n for n, _ in TRAJECTORY_SCHEMA)
#: text columns that hold null (None), kept as Python objects in a DataFrame
#: (``sim.metrics.table.to_frame``): requests.parquet's ``finish_reason`` (null while
#: unfinished)
OBJECT_COLUMNS = frozenset({"finish_reason"})


class Recorder:
    """Collects the run's records; ``frames()`` returns them as DataFrames."""

    def __init__(
        self,
        pool_bytes: float,
        phi_ext_request_bytes: float | None = None,
        block_kind: bool = False,
        hbm: HbmLayout | None = None,
        groups: GroupSplit | None = None,
    ) -> None:
        self.pool_bytes = pool_bytes
        # without a layout (a recorder fed by hand): one GPU whose HBM is the pool, slot
        # bytes read off the books (0.0 = unknown)
        self.hbm = hbm or HbmLayout(math.ceil(pool_bytes), 0, 0.0)
        # memory.parquet's phi_ext: F9 for a request of these bytes (None: NaN column)
        self.phi_ext_request_bytes = phi_ext_request_bytes
        # block kinds (paged, radix, ...): any free block serves any block request, so
        # external fragmentation is 0 whenever anything is free (F9 on a block pool)
        self.block_kind = block_kind
        self.step_ends = array("d")  # end time of every step, by step index
        # ITL weights of runs of steps: first step, steps, weight at the first, after it
        self._w = (array("q"), array("q"), array("q"), array("q"))
        self.irregular_gaps = array("d")
        self.max_itl_s = 0.0
        self._steps = ChunkedTable(STEP_SCHEMA)
        self._memory = ChunkedTable(MEMORY_SCHEMA)
        self._requests = ChunkedTable(REQUEST_SCHEMA)
        self._trajectories = ChunkedTable(TRAJECTORY_SCHEMA)
        self.requests_ended = 0
        self.eta_alloc = TimeWeighted()
        self.eta_effective = TimeWeighted(0.0, 0.0)
        self.paused_bytes = TimeWeighted(0.0, 0.0)
        self.paused_hbm_bytes = TimeWeighted(0.0, 0.0)  # physical, all GPUs
        self.paused_hbm_bytes_peak = 0
        self.preemptions = 0
        self.held_drops = 0
        self.output_tokens = 0
        self.prefill_tokens = 0  # prompt tokens computed (chunks of every step, recomputes too)
        # speculative decoding: sequence verifies, drafts verified, drafts accepted (tokens
        # beyond one per verify), verified tokens that produced no output
        self.spec_verifies = 0
        self.spec_drafts = 0
        self.spec_accepted = 0
        self.spec_wasted = 0
        self.decisions = 0
        self._workloads: dict[str, int] = {}  # workload name -> code in the tables
        # KV by layer group (None: a model of one group): the split, each row's parts
        # (t, then one value per group, flat), their time-weighted means and largest rows
        self.groups = groups
        #: the side groups' bytes for the live sequences, one per ``groups.side`` entry
        #: (set by the run layer; asked only when several side groups share the side bytes)
        self.side_weights: Callable[[], Sequence[float]] | None = None
        n = len(groups.names) if groups is not None else 0
        self._group_rows = array("d")
        self._group_mean = [TimeWeighted(0.0, 0.0) for _ in range(n)]
        self._group_peak = [0.0] * n
        self._group_side = (0.0, None)  # the last row's side bytes and side weights

    def _workload_code(self, name) -> int:
        """The code of a workload name (a request's ``tag``; not a str: "")."""
        name = name if isinstance(name, str) else ""
        return self._workloads.setdefault(name, len(self._workloads))

    @property
    def n_steps(self) -> int:
        return len(self.step_ends)

    # ------------------------------------------------------------------ steps
    def step(
        self,
        start_s: float,
        ends: np.ndarray | list[float],
        plan,
        cost,
        n_running: int,
        n_waiting: int,
        prefill_s: float = 0.0,
        attention_max_s: float | None = None,
    ) -> int:
        """One engine decision of ``len(ends)`` steps; returns the index of its first step.
        ``prefill_s``: the seconds of its steps charged to their prefill tokens;
        ``attention_max_s``: the sum over its steps of the larger of each step's KV-read
        and attention-FLOP seconds (None: ``len(ends)`` times the first step's, ``cost``'s:
        exact for one step)."""
        s0 = len(self.step_ends)
        k = len(ends)
        if attention_max_s is None:
            attention_max_s = k * max(cost.kv_read_s, cost.attention_s)
        if isinstance(ends, list):
            self.step_ends.extend(ends)
        else:
            self.step_ends.frombytes(np.ascontiguousarray(ends, dtype=np.float64).tobytes())
        end = self.step_ends[-1]
        # a speculative verify rides among the chunks (sim.sched.plan): a decode here
        chunks = plan.prefill_chunks
        n_prefill = len(chunks) - plan.verify_seqs
        prefill_tokens = (sum([c for c, _ in chunks]) if chunks else 0) - plan.verify_tokens
        n_decode = plan.n_decode + plan.verify_seqs
        self.prefill_tokens += prefill_tokens
        self._steps.append(
            (
                s0,
                k,
                start_s,
                end,
                end - start_s,
                n_decode,
                n_prefill,
                prefill_tokens,
                plan.n_decode + plan.verify_tokens + prefill_tokens,
                plan.decode_history_tokens + plan.verify_history_tokens,
                len(plan.admitted),
                len(plan.preempted),
                len(plan.rejected),
                plan.held_drops,
                n_running,
                n_waiting,
                plan.copy_bytes,
                plan.alloc_calls,
                prefill_s,
                attention_max_s,
                *_cost_terms(cost),
            )
        )
        self.decisions += 1
        return s0

    def run_prefill(self, tokens: int) -> None:
        """Prefill tokens of a run's steps after its first (``step`` counted the first's)."""
        self.prefill_tokens += tokens

    def events(self, plan, now_s: float, n_running: int, n_waiting: int) -> None:
        """Scheduling events of every decision (before its step is priced).

        A decision that runs no step (a zero-time reschedule: preemptions, rejections or
        held drops only) gets a row of its own with ``n_steps`` 0, so that the step
        table's event columns add up to the run's totals.
        """
        self.preemptions += len(plan.preempted)
        self.held_drops += plan.held_drops
        if (plan.preempted or plan.rejected or plan.held_drops) and plan.empty:
            self._event_row(
                now_s,
                admitted=len(plan.admitted),
                preempted=len(plan.preempted),
                rejected=len(plan.rejected),
                held_drops=plan.held_drops,
                n_running=n_running,
                n_waiting=n_waiting,
                copy_bytes=plan.copy_bytes,
                alloc_calls=plan.alloc_calls,
            )

    def rejected_at_submit(self, now_s: float, count: int, n_running: int, n_waiting: int) -> None:
        """``count`` requests refused when submitted (they can never run): one zero-time row."""
        if count:
            self._event_row(now_s, rejected=count, n_running=n_running, n_waiting=n_waiting)

    def _event_row(self, now_s: float, **events: float) -> None:
        # ``step`` is the index the next step will get; no batch, no cost, bound "none"
        row = dict.fromkeys(STEP_COLUMNS, 0)
        row.update(step=len(self.step_ends), start_s=now_s, end_s=now_s, bound="none")
        row.update(events)
        self._steps.append(tuple(row[c] for c in STEP_COLUMNS))

    def emit(self, requests, s0: int, k: int) -> None:
        """Every request in ``requests`` sampled one token at each of steps s0 .. s0+k-1.

        A gap is the difference of two steps' end times, within a run as between single
        steps (so a run's gaps are bit for bit those of its steps taken one at a time).
        """
        ends = self.step_ends
        t0 = ends[s0]
        prev = ends[s0 - 1] if s0 > 0 else 0.0
        first_gap = t0 - prev
        run_max = max(map(sub, ends[s0 + 1 : s0 + k], ends[s0 : s0 + k - 1])) if k > 1 else 0.0
        # the largest gap of a request that emitted in the step before: the same for all
        regular_max = first_gap if first_gap > run_max else run_max
        before, last_step, top = s0 - 1, s0 + k - 1, self.max_itl_s
        regular = 0
        for req in requests:
            last = req.last_emit_step
            if last == before and last >= 0:  # (the common case, kept short: ``top`` after)
                regular += 1
                if regular_max > req.itl_max_s:
                    req.itl_max_s = regular_max
                req.last_emit_step = last_step
                continue
            if last < 0:  # first token
                req.first_token_s = t0
                req.last_emit_step = last_step
                if k == 1:
                    continue  # one token: no gap yet
                gap_max = run_max
            else:  # a gap over several steps (stall, preemption)
                gap = t0 - ends[last]
                self.irregular_gaps.append(gap)
                gap_max = gap if gap > run_max else run_max
            if gap_max > req.itl_max_s:
                req.itl_max_s = gap_max
            if gap_max > top:
                top = gap_max
            req.last_emit_step = last_step
        if regular and regular_max > top:  # the regular requests' gap (a max: any order)
            top = regular_max
        self.max_itl_s = top
        n = len(requests)
        self.output_tokens += k * n
        if regular or (k > 1 and n):
            w = self._w
            w[0].append(s0)
            w[1].append(k)
            w[2].append(regular)
            w[3].append(n)

    def speculative(self, accepted: int, drafts: int, wasted: int, verifies: int) -> None:
        """A step's speculative-decoding outcome: ``accepted`` drafts became output tokens
        (beyond the one per request ``emit`` counted), of ``drafts`` verified in
        ``verifies`` sequence verifies; ``wasted`` verified tokens produced nothing."""
        self.output_tokens += accepted
        self.spec_accepted += accepted
        self.spec_drafts += drafts
        self.spec_wasted += wasted
        self.spec_verifies += verifies

    # ----------------------------------------------------------------- memory
    def memory(
        self,
        t: float,
        m,
        paused_bytes: float,
        n_paused: int,
        n_running: int,
        n_waiting: int,
        extra_bytes: float = 0.0,
        next_request_bytes: float | None = None,
        slots=None,
    ) -> tuple[float, float]:
        """The allocator's state ``m`` from ``t`` on (after a step was scheduled, or when
        idle); ``extra_bytes`` of deferred tokens count as useful and logical;
        ``next_request_bytes`` is what the head-of-queue request still needs (None:
        nothing waits); ``slots`` is the KV manager's ``kv_slots()`` (None: the books'
        bytes stand in, with nothing paused). Returns (useful, allocated) bytes."""
        useful = m.useful_bytes + extra_bytes
        allocated = m.allocated_bytes
        eta_alloc = useful / allocated if allocated > 0 else None
        eta_eff = useful / self.pool_bytes
        parts, paused_hbm = self._gpu_parts(m, slots, useful)
        reference = self.phi_ext_request_bytes  # (``_phi_ext`` of None is None: not asked)
        self._memory.append(
            (
                t,
                allocated,
                useful,
                m.logical_bytes + extra_bytes,
                m.free_bytes,
                m.cached_bytes,
                eta_alloc,
                eta_eff,
                m.num_sequences,
                paused_bytes,
                n_paused,
                n_running,
                n_waiting,
                m.largest_free_bytes,
                len(m.free_extents),
                None if reference is None else self._phi_ext(m, reference),
                None if next_request_bytes is None else self._phi_ext(m, next_request_bytes),
                m.side_allocated_bytes,
                *parts,
            )
        )
        self.eta_alloc.observe(t, eta_alloc)
        self.eta_effective.observe(t, eta_eff)
        self.paused_bytes.observe(t, paused_bytes)
        self.paused_hbm_bytes.observe(t, paused_hbm)
        if paused_hbm > self.paused_hbm_bytes_peak:
            self.paused_hbm_bytes_peak = paused_hbm
        if self.groups is not None:
            self._record_groups(t, allocated, m.side_allocated_bytes)
        return useful, allocated

    def _record_groups(self, t: float, allocated: float, side: float) -> None:
        """One memory row's allocated bytes split by layer group."""
        groups = self.groups
        weights = None
        if self.side_weights is not None and len(groups.side) > 1:
            weights = tuple(self.side_weights())
        self._group_side = (side, weights)
        parts = groups.split(allocated, side, weights)
        self._group_rows.append(t)
        self._group_rows.extend(parts)
        peaks = self._group_peak
        for i, (tw, v) in enumerate(zip(self._group_mean, parts, strict=True)):
            tw.observe(t, v)
            if v > peaks[i]:
                peaks[i] = v

    def _group_run(self, starts, allocated) -> None:
        """A run of decode steps split by group: its side bytes stay those of its first
        step's row (a run takes table blocks only; side groups step exactly)."""
        side, weights = self._group_side
        split = self.groups.split
        cols = list(zip(*(split(a, side, weights) for a in allocated), strict=True))
        peaks = self._group_peak
        for i, (tw, values) in enumerate(zip(self._group_mean, cols, strict=True)):
            tw.observe_steps(starts, values)
            top = max(values)
            if top > peaks[i]:
                peaks[i] = top

    def group_summary(self, sim_time_s: float) -> dict:
        """``peak_allocated_bytes_by_group`` and ``allocated_bytes_by_group_mean`` ({} for
        a model of one group)."""
        if self.groups is None:
            return {}
        names = self.groups.names
        return {
            "peak_allocated_bytes_by_group": {
                n: round(p) for n, p in zip(names, self._group_peak, strict=True)
            },
            "allocated_bytes_by_group_mean": {
                n: float(tw.mean(sim_time_s) or 0.0)
                for n, tw in zip(names, self._group_mean, strict=True)
            },
        }

    def group_table(self) -> Columns | None:
        """memory_groups.parquet (``GROUP_COLUMNS``, long form: one row per memory row and
        group), or None for a model of one group."""
        if self.groups is None:
            return None
        names, kinds = self.groups.names, self.groups.kinds
        k = len(names)
        rows = np.frombuffer(self._group_rows, dtype=np.float64).reshape(-1, k + 1)
        n = len(rows)
        return {
            "t_s": np.repeat(rows[:, 0], k),
            "group": np.tile(np.array(names, dtype=object), n),
            "kind": np.tile(np.array(kinds, dtype=object), n),
            "allocated_bytes": rows[:, 1:].ravel(),
        }

    def group_frame(self) -> pd.DataFrame | None:
        """``group_table()`` as a DataFrame (imports pandas)."""
        table = self.group_table()
        return None if table is None else to_frame(table)

    def _gpu_parts(self, m, slots, useful: float) -> tuple[tuple[int, ...], float]:
        """One GPU's HBM in ``GPU_PARTS`` order (integers summing to its HBM exactly), and
        the physical paused KV of the whole instance in bytes.

        KV parts are counted in slots (or, without ``slots``, in node bytes) and turned
        into bytes by cumulative rounding, so they add up to the rounded pool; the reserve
        is the rest of the HBM (negative only if an explicit pool overcommits it)."""
        lay = self.hbm
        if slots is None:  # bytes stand in for slots
            unit_node = 1.0
            unit_gpu = 1.0 / lay.num_gpus
            allocated, cached, free = m.allocated_bytes, m.cached_bytes, m.free_bytes
            unfilled, paused = max(allocated - useful, 0.0), 0
            usable = m.pool_bytes - m.remainder_bytes
        else:
            allocated, unfilled, paused, cached, free, usable = slots
            unit_gpu = lay.kv_bytes_per_token_per_gpu
            if not unit_gpu:
                unit_gpu = (m.pool_bytes - m.remainder_bytes) / usable if usable else 1.0
            unit_node = unit_gpu * lay.num_gpus
        external = 0 if self.block_kind else self._external(m, free, unit_node)
        active = allocated - unfilled - paused
        c1 = active
        c2 = c1 + paused
        c3 = c2 + cached
        c4 = c3 + unfilled
        c5 = c4 + external
        r1, r2, r3 = round(c1 * unit_gpu), round(c2 * unit_gpu), round(c3 * unit_gpu)
        r4, r5 = round(c4 * unit_gpu), round(c5 * unit_gpu)
        kv = round(usable * unit_gpu)
        weights = lay.weights_bytes_per_gpu
        parts = (weights, lay.hbm_bytes_per_gpu - weights - kv, r1, r2 - r1, r3 - r2, r4 - r3,
                 r5 - r4, kv - r5)  # fmt: skip
        return parts, paused * unit_node

    def _external(self, m, free: float, unit_node: float) -> float:
        """Free units in holes too small for the reference request (phi_ext's numerator):
        0 for block kinds, without a reference, or with nothing free."""
        request = self.phi_ext_request_bytes
        if self.block_kind or request is None or free <= 0:
            return 0
        small = sum(h for h in m.free_extents if h < request)
        return round(small / unit_node)

    def _phi_ext(self, m, request_bytes: float | None) -> float | None:
        """F9 of ``m``'s free holes for ``request_bytes``; None (NaN) when nothing is free
        or there is no request; 0 for block kinds with anything free."""
        if request_bytes is None or m.free_bytes <= 0:
            return None
        return phi_ext(m.free_extents, request_bytes, self.block_kind)

    def memory_run(self, starts, useful, allocated) -> None:
        """Integrals over a run of decode steps whose first step ``memory()`` recorded
        (sequences of floats, one per step)."""
        nan = math.nan
        eta = [u / a if a > 0 else nan for u, a in zip(useful, allocated, strict=True)]
        pool = self.pool_bytes
        self.eta_alloc.observe_steps(starts, eta)
        self.eta_effective.observe_steps(starts, [u / pool for u in useful])
        if self.groups is not None:
            self._group_run(starts, allocated)

    # --------------------------------------------------------------- endings
    def request_ended(self, req) -> None:
        """A request finished, was refused or cancelled, or is unfinished at the end."""
        self._requests.append((*request_row(req), self._workload_code(req.tag)))
        self.requests_ended += 1

    def trajectory(self, row: tuple, workload: str = "") -> None:
        """One trajectory's totals, in ``TRAJECTORY_COLUMNS`` order but the last
        (``workload``, given by name)."""
        self._trajectories.append((*row, self._workload_code(workload)))

    # --------------------------------------------------------------- outputs
    def itl_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Every inter-token gap as (values, integer weights): step gaps, then irregular."""
        ends = np.frombuffer(self.step_ends, dtype=np.float64) if self.step_ends else np.empty(0)
        n = len(ends)
        s0, k, first, after = (
            np.frombuffer(c, dtype=np.int64) if c else np.empty(0, np.int64) for c in self._w
        )
        w = np.zeros(n + 1, dtype=np.int64)
        np.add.at(w, s0, first)
        np.add.at(w, s0 + 1, after - first)
        np.add.at(w, s0 + k, -after)
        weights = np.cumsum(w)[:n]
        gaps = np.diff(ends, prepend=0.0)
        irr = (
            np.frombuffer(self.irregular_gaps, dtype=np.float64)
            if self.irregular_gaps
            else np.empty(0)
        )
        values = np.concatenate([gaps, irr])
        return values, np.concatenate([weights, np.ones(len(irr), dtype=np.int64)])

    def tables(self) -> dict[str, Columns]:
        """``requests``, ``steps``, ``memory``, ``trajectories`` as ``Columns`` (once: the
        tables are emptied as they are converted): requests in ``req_id`` order and
        trajectories in ``traj_id`` order (stable), ``finish_reason`` null while
        unfinished, ``workload`` by name."""
        names = np.array(list(self._workloads) or [""], dtype=object)
        requests = _sorted(self._requests.columns(True), "req_id")
        reason = requests["finish_reason"]
        requests["finish_reason"] = np.where(reason != "", reason, None)
        trajectories = _sorted(self._trajectories.columns(True), "traj_id")
        for table in (requests, trajectories):
            table["workload"] = names[table["workload"].astype(np.int64)]
        return {
            "requests": requests,
            "steps": self._steps.columns(True),
            "memory": self._memory.columns(True),
            "trajectories": trajectories,
        }

    def frames(self) -> dict[str, pd.DataFrame]:
        """``tables()`` as DataFrames (imports pandas)."""
        return {name: to_frame(t, OBJECT_COLUMNS) for name, t in self.tables().items()}


def _sorted(table: Columns, key: str) -> Columns:
    """``table``'s rows in ``key`` order (stable: rows of one key keep their order)."""
    order = np.argsort(table[key], kind="stable")
    return {name: col[order] for name, col in table.items()}


def request_row(r) -> tuple:
    """A request's row, in ``REQUEST_COLUMNS`` order but the last (``workload``)."""
    ttft = None if r.first_token_s is None else r.first_token_s - r.arrival_s
    e2e = None if r.finish_s is None else r.finish_s - r.arrival_s
    queue = None if r.admitted_s is None else r.admitted_s - r.arrival_s
    itl_mean = itl_max = None
    if r.num_output > 1 and r.finish_s is not None:
        itl_mean = (r.finish_s - r.first_token_s) / (r.num_output - 1)
    if r.num_output > 1:
        itl_max = r.itl_max_s
    return (
        r.req_id,
        r.traj_id,
        r.turn,
        r.branch,
        STATUS_NAMES[r.status],
        r.finish_reason or "",
        r.arrival_s,
        r.admitted_s,
        r.first_token_s,
        r.finish_s,
        r.prompt_tokens,
        r.max_output_tokens,
        r.num_output,
        r.held_tokens,
        r.lookup_tokens,
        r.hit_tokens,
        r.preemptions,
        queue,
        ttft,
        e2e,
        itl_mean,
        itl_max,
        r.branch_id,
        r.parent_branch_id,
        r.depth,
        r.queued_s,
        r.scheduled_s,
        r.preempted_lookup_tokens,
        r.preempted_hit_tokens,
    )
