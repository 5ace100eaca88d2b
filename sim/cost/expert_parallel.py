"""Lockstep pricing of a MoE model's data-parallel ranks (vLLM ``--data-parallel-size R``,
with or without ``--enable-expert-parallel``).

Responsibility: price one step that R ranks take together. vLLM runs the attention and
the dense operators of each DP rank on that rank's own batch, but every MoE layer is one
collective over all ranks (the routed experts are sharded over them), so the ranks
synchronise at every layer and a rank with nothing to do runs a dummy batch of one
token (``execute_dummy_batch``). Per step:

  padding      a step whose largest rank batch ``n_max`` fits a CUDA graph (at most
               ``cudagraph_max_tokens``, vLLM's ``max_cudagraph_capture_size``) is padded
               to ``n_max`` on every rank (vLLM's DP padding): the dense operators run at
               ``n_max`` everywhere, attention and the LM head on the rank's own requests,
               and ``T = R x n_max`` tokens go through the experts; a larger step runs
               eagerly, unpadded: ``T`` = the ranks' tokens summed (a dummy's one);
  ranks        ``rank_r`` = the rank's GPU seconds without the expert layers
               (``CostModel.gpu_terms``), dummy ranks as a one-token decode;
  experts      the global batch is ``T`` tokens over S = R x TP GPUs. With
               expert parallelism each GPU holds E / S whole experts and computes the
               token-expert pairs routed to them, on average ``T k / S``: the measured
               expert layer (the profiler's table, whole experts on one GPU) at ``T / S``
               tokens and the experts those tokens activate among its own, ``(E / S)
               (1 - (1 - k/E)^T)``. Without it every expert is sharded over the S GPUs:
               each GPU then does the same FLOPs (1 / S of every pair) and reads the same
               weight bytes (1 / S of every active expert) in expectation, so it is
               priced by the same lookup (no table of TP-sharded experts is measured);
  collectives  per MoE layer a dispatch (all-gather of the ranks' hidden states) and a
               combine (reduce-scatter of the expert outputs), vLLM's default
               ``allgather_reducescatter`` backend: each ``latency + received x d_model x
               bytes / bandwidth``, ``received`` the most tokens one rank receives from the
               others (``(R - 1) n_max`` padded, ``T - min n`` eager), over the
               accelerator's link (``groups._allreduce_fit`` at R ranks, or at the
               profile's nearest stated degree: ``link_degree``), plus one latency per
               step for the ranks' agreement on the batch sizes;
  step         ``GPU = max_r rank_r + L_moe (expert layer + dispatch + combine) + sync``
               (``L_moe``: the layers with routed experts, ``ModelProfile.moe_layers``); the
               step costs ``max(host, GPU)`` with async scheduling, else ``host + GPU``,
               and every rank's step ends then.

A pricing without the expert layer apart (``roofline_*``, or ``per_group`` with no
measured expert table) keeps each rank's own price (its expert layers inside, its
weights the rank's share: ``CostModel(expert_shards=R)``; under a roofline its GEMM
FLOPs re-spread: the dense part at the padded tokens, the experts' part at ``T / R``
tokens) and adds the collectives; ``moe_s`` is then None.

Invariant: pure; the common duration is the same for every rank and at least every
rank's own GPU seconds; a group of one rank with no collectives is priced exactly as its
single engine (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from sim.cost.groups import _allreduce_fit
from sim.cost.kernel_tables import MoeGrid
from sim.cost.roofline import CostModel, StepCost, StepWork
from sim.units import dtype_bytes

#: what a rank with no work runs while the others step (vLLM's dummy batch: one token)
DUMMY_WORK = StepWork(n_decode=1, decode_history_tokens=0)


@dataclass(frozen=True)
class DecodeRank:
    """A rank decoding the same sequences through a run of steps (``decode_run``)."""

    n_decode: int
    history_tokens: int  # cached tokens of its decodes before the run's first step
    max_history_tokens: int | None = None  # the longest decode's, then + 1 a step
    min_history_tokens: int | None = None


@dataclass(frozen=True)
class LockstepCost:
    """One lockstep step: the common duration and each rank's view of it."""

    total_s: float
    costs: tuple[StepCost, ...]  # per rank (a dummy rank's too)
    dummy: tuple[bool, ...]  # per rank: ran a dummy batch
    n_max: int  # the largest rank's tokens
    padded: bool  # every rank padded to n_max (a CUDA-graph step)
    padding_tokens: int  # tokens the padding and the dummy batches added
    global_tokens: int  # T: tokens through the expert layer
    moe_s: float | None  # MoE layers x the expert layer (None: inside each rank's price)
    comm_s: float  # MoE layers x (dispatch + combine) + the per-step sync
    rank_gpu_s: tuple[float, ...]  # each rank's own GPU seconds (no experts, no comm)

    @property
    def wait_s(self) -> float:
        """Rank-seconds the ranks with a batch waited for the slowest rank's own work."""
        top = max(self.rank_gpu_s)
        return sum(top - g for g, d in zip(self.rank_gpu_s, self.dummy, strict=True) if not d)


class LockstepPricer:
    """Prices lockstep steps of ``ranks`` DP ranks sharing one cost model (see module)."""

    def __init__(self, cost: CostModel, ranks: int, *, cudagraph_max_tokens: int = 512) -> None:
        if ranks < 1:
            raise ValueError("a lockstep group needs at least one rank")
        self.cost, self.R = cost, ranks
        self.cudagraph_max_tokens = cudagraph_max_tokens
        m = cost.model
        self.L, self.d = m.moe_layers, m.d_model  # the layers with an expert collective
        self.ab = dtype_bytes(cost.config.activation_dtype)
        self.E, self.k = m.num_experts or 0, m.experts_per_token or 0
        self.shards = ranks * cost.tp  # GPUs the experts are spread over
        self.split = cost.groups is not None and self.E > 0  # per-group: experts priced here
        self.moe: MoeGrid | None = self._moe_table() if self.split else None
        if self.split and self.moe is None:
            self.split = False  # a per-group pricing without a measured expert layer
        # the routed experts' share of a token's GEMM FLOPs (the roofline's re-spread)
        active = m.active_params
        self.expert_flop_share = (
            min(m.routed_expert_params * self.k / self.E / active, 1.0) if self.E and active else 0.0
        )
        self.link_degree = link_degree(cost, ranks)
        fit = _allreduce_fit(cost.config, cost.calibration, cost.accelerator, self.link_degree)
        self.latency_s, self.bw = fit.latency_s, fit.bus_bw_bytes_per_s
        self.collectives = cost.config.allreduce and ranks > 1

    def _moe_table(self) -> MoeGrid | None:
        """The measured expert layer (kernel tables only; the table of the rank's TP
        degree, which is the profiler's one-GPU table unless that degree has its own)."""
        if self.cost.pricing != "kernel_tables":
            return None
        return self.cost.groups.tables.moe

    # -- the parts ---------------------------------------------------------------------

    def batch_shape(self, tokens: Sequence[int]) -> tuple[int, int, int]:
        """(tokens every rank's dense operators run at (0: its own), T through the experts,
        the most tokens one rank receives in a collective) for the ranks' ``tokens``
        (a dummy's is 1): padded when the largest fits a CUDA graph, else eager."""
        n_max = max(tokens)
        if n_max <= self.cudagraph_max_tokens:
            return n_max, self.R * n_max, (self.R - 1) * n_max
        return 0, sum(tokens), sum(tokens) - min(tokens)

    def _comm_s(self, received: int) -> float:
        """A step's collectives: dispatch and combine per MoE layer, and the sync."""
        if not self.collectives:
            return 0.0
        return 2 * self.L * self.collective_s(received) + self.latency_s

    def _respread_s(self, mem, comp, gemm_s, n: int, pad_to: int, global_tokens: int):
        """What re-spreading a roofline step's GEMM FLOPs adds to max(memory, compute):
        the dense part at the padded tokens, the routed experts' part at ``T / R`` tokens
        (scalars or arrays alike)."""
        f = self.expert_flop_share
        dense = (max(pad_to, n) / n - 1.0) * (1.0 - f)
        experts = (global_tokens / (self.R * n) - 1.0) * f
        return np.maximum(mem, comp + gemm_s * (dense + experts)) - np.maximum(mem, comp)

    def expert_layer_s(self, global_tokens: int) -> float:
        """Seconds of one MoE layer's experts on each GPU for ``global_tokens`` tokens."""
        if self.moe is None or global_tokens <= 0:
            return 0.0
        E, k, S, T = self.E, self.k, self.shards, global_tokens
        return float(self.moe.at(T / S, E / S * (1.0 - (1.0 - k / E) ** T)))

    def collective_s(self, received_tokens: int) -> float:
        """One dispatch or combine: the rank that receives the most hidden states (the
        other ranks' tokens) finishes last."""
        if not self.collectives:
            return 0.0
        return self.latency_s + received_tokens * self.d * self.ab / self.bw

    # -- one step ----------------------------------------------------------------------

    def price(self, works: Sequence[StepWork | None]) -> LockstepCost:
        """The step of every rank (``None``: the rank has nothing to run, so a dummy)."""
        if len(works) != self.R:
            raise ValueError(f"{len(works)} works for {self.R} ranks")
        cost = self.cost
        dummy = tuple(w is None for w in works)
        ws = [DUMMY_WORK if w is None else w for w in works]
        n = [max(w.n_tokens, 1) for w in ws]
        n_max = max(n)
        pad_to, T, received = self.batch_shape(n)
        padded = pad_to > 0  # a CUDA-graph step: DP padding
        if padded:
            padding = sum(n_max - (w.n_tokens if w is not None else 0) for w in works)
        else:  # eager: every rank its own tokens (a dummy its one), variable-size collectives
            padding = sum(dummy)
        own = [cost.iteration_time(w) for w in ws]
        if self.split:
            gpu = [cost.gpu_terms(w, pad_to)[0] for w in ws]
            moe = self.L * self.expert_layer_s(T)
        else:  # each rank's own price (its experts inside), without its host overhead
            gpu = [self._own_gpu_s(w, pad_to, T) for w in ws]
            moe = None
        comm = self._comm_s(received)
        host = cost._overhead_s()
        g = max(gpu) + (moe or 0.0) + comm
        total = max(host, g) if cost.async_scheduling else host + g
        costs = tuple(
            replace(
                c,
                total_s=total,
                overhead_s=host,
                extra={**c.extra, "lockstep": True, "moe_s": moe, "ep_comm_s": comm,
                       "lockstep_wait_s": max(gpu) - gpu[r], "dummy": dummy[r]},
            )  # fmt: skip
            for r, c in enumerate(own)
        )
        return LockstepCost(total, costs, dummy, n_max, padded, padding, T, moe, comm, tuple(gpu))

    # -- a run of decode steps -----------------------------------------------------------

    def decode_run(self, runs: Sequence[DecodeRank | None], n_steps: int) -> tuple[np.ndarray, np.ndarray]:
        """(durations, rank-seconds waited) of ``n_steps`` lockstep steps in which every
        rank with a batch decodes the same sequences (their contexts grow by one a step:
        ``DecodeRank``) and the others (None) run dummies. Equals ``price`` step by step
        (the engine's group runs rely on it; bit for bit, tested): the batch sizes, hence the
        padding, the global tokens, the experts and the collectives, do not change in
        such a run; only the ranks' attention does, computed with numpy arrays the way
        one step computes it."""
        if len(runs) != self.R:
            raise ValueError(f"{len(runs)} runs for {self.R} ranks")
        cost = self.cost
        i = np.arange(n_steps, dtype=np.float64)
        pad_to, T, received = self.batch_shape([r.n_decode if r is not None else 1 for r in runs])
        gpus = []
        for r in runs:
            if r is None:  # the dummy batch is the same every step
                one = (cost.gpu_terms(DUMMY_WORK, pad_to)[0] if self.split
                       else self._own_gpu_s(DUMMY_WORK, pad_to, T))  # fmt: skip
                gpus.append(np.full(n_steps, one))
            else:
                gpus.append(self._decode_gpu(r, i, pad_to, T))
        top = np.maximum.reduce(gpus) if len(gpus) > 1 else gpus[0]
        moe = self.L * self.expert_layer_s(T) if self.split else None
        comm = self._comm_s(received)
        host = cost._overhead_s()
        g = top + (moe or 0.0) + comm
        total = np.maximum(host, g) if cost.async_scheduling else host + g
        wait = np.zeros(n_steps)
        for gp, r in zip(gpus, runs, strict=True):
            if r is not None:
                wait = wait + (top - gp)
        return total, wait

    def _decode_gpu(self, r: DecodeRank, i: np.ndarray, pad_to: int, global_tokens: int) -> np.ndarray:
        """A decoding rank's GPU seconds at each step of a run (``gpu_terms`` /
        ``_own_gpu_s`` of each step's work, in arrays)."""
        cost, nd = self.cost, r.n_decode
        kv_tokens = r.history_tokens + i * nd + nd
        span = None
        if r.max_history_tokens is not None and r.min_history_tokens is not None:
            span = (r.max_history_tokens + i, r.min_history_tokens + i)
        g = cost.groups
        if g is not None:
            fixed = g.fixed(max(nd, pad_to), nd, False) if self.split else g.fixed(nd, nd, False)
            att = g.decode_attention(kv_tokens, nd, fixed.attention_rate, span)
            if self.split:
                return 0.0 + fixed.total_s - fixed.moe_s + att + 0.0
            host = cost._overhead_s()  # the rank's own sync price, less its host overhead
            return host + 0.0 + fixed.total_s + att + 0.0 - host
        c = cost.config
        weights_s, kv_s = cost._mem_arrays(nd, nd, kv_tokens)
        rate = c.mfu_decode * cost.peak
        gemm_f = cost.gemm_flops_per_token_per_gpu * nd if c.gemm_flops else 0.0
        attn_f = cost.attn_flops_per_pair_per_gpu * kv_tokens if c.attention_flops else 0.0 * i
        mem, comp = weights_s + kv_s, (gemm_f + attn_f) / rate
        host = cost._overhead_s()
        gpu = host + 0.0 + np.maximum(mem, comp) + cost._allreduce_s(nd) + 0.0 - host
        gemm_s = gemm_f / rate
        if gemm_s > 0:
            gpu = gpu + self._respread_s(mem, comp, gemm_s, nd, pad_to, global_tokens)
        return gpu

    def _own_gpu_s(self, work: StepWork, pad_to: int, global_tokens: int) -> float:
        """A rank's GPU seconds when the expert layer is not priced apart: its price with
        the host overhead added in turn (async scheduling off for the call), less it.
        Under a roofline pricing the GEMM FLOPs are re-spread as the group runs them:
        the dense part at the padded tokens, the routed experts' part at the global
        tokens over the ranks (``T / R`` per rank instead of its own ``n``)."""
        cost = self.cost
        saved, cost.async_scheduling = cost.async_scheduling, False
        try:
            c = cost.iteration_time(work)
        finally:
            cost.async_scheduling = saved
        gpu = c.total_s - c.overhead_s
        if cost.groups is None and c.gemm_s > 0:
            n = max(work.n_tokens, 1)
            gpu += float(self._respread_s(c.mem_s, c.comp_s, c.gemm_s, n, pad_to, global_tokens))
        return gpu


def link_degree(cost: CostModel, ranks: int) -> int:
    """The degree whose all-reduce line prices the ranks' collectives: ``ranks`` when the
    calibration or the accelerator profile states it, else the profile's nearest stated
    degree (the same link, fewer or more GPUs on it; ties to the larger), else ``ranks``
    (the chapter's fallback line)."""
    cal, acc = cost.calibration, cost.accelerator
    if cal is not None and cal.allreduce_fit(ranks) is not None:
        return ranks
    stated = sorted(acc.allreduce.by_tp) if acc.allreduce is not None else []
    if not stated or ranks in stated:
        return ranks
    return min(stated, key=lambda t: (abs(t - ranks), -t))


__all__ = ["DUMMY_WORK", "DecodeRank", "LockstepCost", "LockstepPricer", "link_degree"]
