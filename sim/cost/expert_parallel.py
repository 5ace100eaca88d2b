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

``price`` and ``price_run`` are the pricer interface of ``sim.cost.pricer``: a run of
steps is priced by the same code as one step, over step offsets, so it equals its steps.

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
from sim.cost.pricer import StepWork, as_run, check_run, step_offsets, vmax
from sim.cost.roofline import CostModel, StepCost
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

    def work(self) -> StepWork:
        """The rank's first step of the run."""
        return StepWork(self.n_decode, self.history_tokens, (), 0.0, 0,
                        self.max_history_tokens, self.min_history_tokens)  # fmt: skip


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

    # -- the pricer interface (sim.cost.pricer): one step, or a run of decode steps -----

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
        own = [cost.price(w) for w in ws]
        gpu = [self._rank_gpu(w, 0, pad_to, T) for w in ws]
        total, top, moe, comm, host, wait = self._group(gpu, dummy, T, received)
        costs = tuple(
            replace(
                c,
                total_s=total,
                overhead_s=host,
                extra={**c.extra, "lockstep": True, "moe_s": moe, "ep_comm_s": comm,
                       "lockstep_wait_s": top - gpu[r], "dummy": dummy[r]},
            )  # fmt: skip
            for r, c in enumerate(own)
        )
        return LockstepCost(total, costs, dummy, n_max, padded, padding, T, moe, comm, tuple(gpu))

    def price_run(self, works: Sequence[StepWork | None], n_steps: int) -> np.ndarray:
        """Durations of ``n_steps`` lockstep steps starting with ``works``: every rank with
        a batch decodes the same sequences (``sim.cost.pricer.advanced``), the others
        (None) run dummies; equal to ``price`` step by step by construction (the same
        code over step offsets)."""
        return self.run_and_wait(works, n_steps)[0]

    def run_and_wait(self, works: Sequence[StepWork | None], n_steps: int) -> tuple[np.ndarray, np.ndarray]:
        """(durations, rank-seconds waited) of ``price_run``'s steps. The batch sizes, hence
        the padding, the global tokens, the experts and the collectives, do not change in
        such a run; only the ranks' attention does."""
        if len(works) != self.R:
            raise ValueError(f"{len(works)} works for {self.R} ranks")
        for w in works:
            if w is not None:
                check_run(w, n_steps)
        i = step_offsets(n_steps)
        dummy = tuple(w is None for w in works)
        pad_to, T, received = self.batch_shape([max(w.n_tokens, 1) if w is not None else 1 for w in works])
        # a dummy batch is the same every step (a one-token decode of nothing)
        gpu = [self._rank_gpu(DUMMY_WORK, 0, pad_to, T) if w is None else self._rank_gpu(w, i, pad_to, T)
               for w in works]  # fmt: skip
        total, _top, _moe, _comm, _host, wait = self._group(gpu, dummy, T, received)
        return as_run(total, n_steps), as_run(wait, n_steps)

    def decode_run(self, runs: Sequence[DecodeRank | None], n_steps: int) -> tuple[np.ndarray, np.ndarray]:
        """``run_and_wait`` of ranks given as ``DecodeRank`` (the version-2 call)."""
        return self.run_and_wait([None if r is None else r.work() for r in runs], n_steps)

    def _group(self, gpu: list, dummy: tuple[bool, ...], global_tokens: int, received: int):
        """(total, slowest rank's GPU s, experts, collectives, host, rank-seconds waited) of
        a step (floats) or a run's steps (arrays) from each rank's GPU seconds; the total
        times ``cost.step_time_scale`` (the parts are not scaled, as in ``CostModel.price``),
        so ``price`` and ``run_and_wait`` scale alike."""
        top = gpu[0]
        for g in gpu[1:]:
            top = vmax(top, g)
        moe = self.L * self.expert_layer_s(global_tokens) if self.split else None
        comm = self._comm_s(received)
        host = self.cost._overhead_s()
        g = top + (moe or 0.0) + comm
        total = vmax(host, g) if self.cost.async_scheduling else host + g
        scale = self.cost.config.step_time_scale  # capacity's error band, as ``CostModel.price``
        if scale != 1.0:
            total = total * scale
        wait = 0.0
        for gp, d in zip(gpu, dummy, strict=True):
            if not d:
                wait = wait + (top - gp)
        return total, top, moe, comm, host, wait

    def _rank_gpu(self, work: StepWork, i, pad_to: int, global_tokens: int):
        """A rank's GPU seconds at step ``i`` (0, or a run's step offsets): with the
        expert layer priced apart, its dense operators at the padded tokens
        (``CostModel.gpu_terms``); otherwise its own price with the host overhead added in
        turn, less it (``CostModel.own_gpu_terms``), and under a roofline pricing the GEMM
        FLOPs re-spread as the group runs them: the dense part at the padded tokens, the
        routed experts' part at the global tokens over the ranks (``T / R`` per rank
        instead of its own ``n``)."""
        cost = self.cost
        if self.split:
            return cost.gpu_terms(work, pad_to, i)[0]
        gpu, t = cost.own_gpu_terms(work, i)
        if t is not None and t.gemm_s > 0:
            n = max(work.n_tokens, 1)
            extra = self._respread_s(t.mem_s, t.comp_s, t.gemm_s, n, pad_to, global_tokens)
            gpu = gpu + (extra if isinstance(gpu, np.ndarray) else float(extra))
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
