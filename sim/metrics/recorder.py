"""Append-only records of a run: engine steps, token emissions, memory, requests, trajectories.

Responsibility: remember what happened, cheaply, while the simulation runs, and turn it
into pandas DataFrames at the end. Steps are kept once per step (end time) and once per
engine decision (a step, or a run of identical decode steps advanced in one go, with its
batch and cost breakdown). Inter-token gaps are never stored per token: a request that
emits in consecutive steps has gaps equal to those steps' durations, so each step keeps
the number of such gaps it closes (its *ITL weight*); only gaps that span several steps
(after a stall or a preemption) are stored one by one.

Invariant: records are only appended (never edited) until ``frames()``; every time is
simulation time; the number of regular gaps plus irregular gaps equals the sum over
requests of (tokens emitted - 1).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.metrics.stats import TimeWeighted

STEP_COLUMNS = (
    "step", "n_steps", "start_s", "end_s", "duration_s", "n_decode", "n_prefill",
    "prefill_tokens", "batch_tokens", "decode_history_tokens", "admitted", "preempted",
    "rejected", "held_drops", "n_running", "n_waiting", "copy_bytes", "alloc_calls",
    "weights_s", "kv_read_s", "gemm_s", "attention_s", "allreduce_s", "copy_s", "alloc_s",
    "overhead_s", "mem_s", "comp_s", "bound", "flops_per_gpu", "hbm_bytes_per_gpu",
)
_COST_TERMS = STEP_COLUMNS[STEP_COLUMNS.index("weights_s"):]

MEMORY_COLUMNS = (
    "t_s", "allocated_bytes", "useful_bytes", "logical_bytes", "free_bytes", "cached_bytes",
    "eta_alloc", "eta_effective", "num_sequences", "paused_kv_bytes", "n_paused",
    "n_running", "n_waiting",
)

REQUEST_COLUMNS = (
    "req_id", "traj_id", "turn", "branch", "status", "arrival_s", "admitted_s",
    "first_token_s", "finish_s", "prompt_tokens", "max_output_tokens", "output_tokens",
    "held_tokens", "lookup_tokens", "hit_tokens", "preemptions", "queue_s", "ttft_s",
    "e2e_s", "itl_mean_s", "itl_max_s",
)

TRAJECTORY_COLUMNS = (
    "traj_id", "kind", "start_s", "end_s", "status", "turns", "requests", "branches",
    "output_tokens", "lookup_tokens", "hit_tokens", "pause_s", "hold_byte_s",
)


class Recorder:
    """Collects the run's records; ``frames()`` returns them as DataFrames."""

    def __init__(self, pool_bytes: float) -> None:
        self.pool_bytes = pool_bytes
        self.step_ends: list[float] = []  # end time of every step, by step index
        self._w_runs: list[tuple[int, int, int, int]] = []  # (s0, k, weight at s0, after)
        self.irregular_gaps: list[float] = []
        self.max_itl_s = 0.0
        self._steps: list[tuple] = []
        self._memory: list[tuple] = []
        self.requests: list = []  # Request objects that ended (any status)
        self._traj_rows: list[tuple] = []
        self.eta_alloc = TimeWeighted()
        self.eta_effective = TimeWeighted(0.0, 0.0)
        self.paused_bytes = TimeWeighted(0.0, 0.0)
        self.preemptions = 0
        self.held_drops = 0
        self.output_tokens = 0
        self.decisions = 0

    @property
    def n_steps(self) -> int:
        return len(self.step_ends)

    # ------------------------------------------------------------------ steps
    def step(self, start_s: float, ends: np.ndarray | list[float], plan, cost, n_running: int,
             n_waiting: int) -> int:
        """One engine decision of ``len(ends)`` steps; returns the index of its first step."""
        s0 = len(self.step_ends)
        k = len(ends)
        self.step_ends.extend(ends if isinstance(ends, list) else ends.tolist())
        end = self.step_ends[-1]
        n_prefill = len(plan.prefill_chunks)
        prefill_tokens = sum(c for c, _ in plan.prefill_chunks)
        self._steps.append((
            s0, k, start_s, end, end - start_s, plan.n_decode, n_prefill, prefill_tokens,
            plan.n_decode + prefill_tokens, plan.decode_history_tokens, len(plan.admitted),
            len(plan.preempted), len(plan.rejected), plan.held_drops, n_running, n_waiting,
            plan.copy_bytes, plan.alloc_calls,
            *(getattr(cost, name) for name in _COST_TERMS),
        ))
        self.decisions += 1
        return s0

    def events(self, plan) -> None:
        """Scheduling events of a decision that ran no step (a zero-time reschedule)."""
        self.preemptions += len(plan.preempted)
        self.held_drops += plan.held_drops

    def emit(self, requests, s0: int, k: int, durations: np.ndarray | None = None) -> None:
        """Every request in ``requests`` sampled one token at each of steps s0 .. s0+k-1.

        ``durations`` are the run's step durations (needed when ``k > 1``).
        """
        ends = self.step_ends
        t0 = ends[s0]
        prev = ends[s0 - 1] if s0 > 0 else 0.0
        first_gap = t0 - prev
        run_max = float(durations[1:].max()) if k > 1 else 0.0
        regular = 0
        for req in requests:
            last = req.last_emit_step
            if last == s0 - 1 and last >= 0:
                regular += 1
                gap_max = first_gap if first_gap > run_max else run_max
            elif last < 0:  # first token
                req.first_token_s = t0
                gap_max = run_max
            else:  # a gap over several steps (stall, preemption)
                gap = t0 - ends[last]
                self.irregular_gaps.append(gap)
                gap_max = gap if gap > run_max else run_max
            if (k > 1 or last >= 0) and gap_max > req.itl_max_s:
                req.itl_max_s = gap_max
            if gap_max > self.max_itl_s and (k > 1 or last >= 0):
                self.max_itl_s = gap_max
            req.last_emit_step = s0 + k - 1
        self.output_tokens += k * len(requests)
        if regular or (k > 1 and requests):
            self._w_runs.append((s0, k, regular, len(requests)))

    # ----------------------------------------------------------------- memory
    def memory(self, t: float, m, paused_bytes: float, n_paused: int, n_running: int,
               n_waiting: int) -> None:
        """The allocator's state from ``t`` on (after a step was scheduled, or when idle)."""
        self._memory.append((
            t, m.allocated_bytes, m.useful_bytes, m.logical_bytes, m.free_bytes,
            m.cached_bytes, m.eta_alloc, m.eta_effective, m.num_sequences, paused_bytes,
            n_paused, n_running, n_waiting,
        ))
        self.eta_alloc.observe(t, m.eta_alloc)
        self.eta_effective.observe(t, m.eta_effective)
        self.paused_bytes.observe(t, paused_bytes)

    def memory_run(self, starts: np.ndarray, useful: np.ndarray, allocated: np.ndarray) -> None:
        """Integrals over a run of decode steps whose first step ``memory()`` recorded."""
        with np.errstate(divide="ignore", invalid="ignore"):
            eta = np.where(allocated > 0, useful / allocated, np.nan)
        self.eta_alloc.observe_steps(starts, eta)
        self.eta_effective.observe_steps(starts, useful / self.pool_bytes)

    # --------------------------------------------------------------- endings
    def request_ended(self, req) -> None:
        self.requests.append(req)

    def trajectory(self, row: tuple) -> None:
        """One trajectory's totals, in ``TRAJECTORY_COLUMNS`` order."""
        self._traj_rows.append(row)

    # --------------------------------------------------------------- outputs
    def itl_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Every inter-token gap as (values, integer weights): step gaps, then irregular."""
        ends = np.asarray(self.step_ends, dtype=np.float64)
        n = len(ends)
        w = np.zeros(n + 1, dtype=np.int64)
        for s0, k, first, after in self._w_runs:
            w[s0] += first
            w[s0 + 1] += after - first
            w[s0 + k] -= after
        weights = np.cumsum(w)[:n]
        gaps = np.diff(ends, prepend=0.0)
        irr = np.asarray(self.irregular_gaps, dtype=np.float64)
        values = np.concatenate([gaps, irr])
        return values, np.concatenate([weights, np.ones(len(irr), dtype=np.int64)])

    def frames(self) -> dict[str, pd.DataFrame]:
        """``requests``, ``steps``, ``memory``, ``trajectories`` as DataFrames."""
        return {
            "requests": requests_frame(self.requests),
            "steps": pd.DataFrame(self._steps, columns=list(STEP_COLUMNS)),
            "memory": pd.DataFrame(self._memory, columns=list(MEMORY_COLUMNS)),
            "trajectories": pd.DataFrame(self._traj_rows, columns=list(TRAJECTORY_COLUMNS)),
        }


def requests_frame(requests) -> pd.DataFrame:
    """One row per request (sorted by id)."""
    from sim.sched.request import STATUS_NAMES

    rows = []
    for r in sorted(requests, key=lambda r: r.req_id):
        ttft = None if r.first_token_s is None else r.first_token_s - r.arrival_s
        e2e = None if r.finish_s is None else r.finish_s - r.arrival_s
        queue = None if r.admitted_s is None else r.admitted_s - r.arrival_s
        itl_mean = None
        if r.num_output > 1 and r.finish_s is not None:
            itl_mean = (r.finish_s - r.first_token_s) / (r.num_output - 1)
        rows.append((
            r.req_id, r.traj_id, r.turn, r.branch, STATUS_NAMES[r.status], r.arrival_s,
            r.admitted_s, r.first_token_s, r.finish_s, r.prompt_tokens, r.max_output_tokens,
            r.num_output, r.held_tokens, r.lookup_tokens, r.hit_tokens, r.preemptions, queue,
            ttft, e2e, itl_mean, r.itl_max_s if r.num_output > 1 else None,
        ))
    return pd.DataFrame(rows, columns=list(REQUEST_COLUMNS)).astype(
        {c: "float64" for c in ("admitted_s", "first_token_s", "finish_s", "queue_s",
                                "ttft_s", "e2e_s", "itl_mean_s", "itl_max_s")}
    )
