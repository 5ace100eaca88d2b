"""Lockstep pricing of a MoE model's data-parallel ranks (vLLM ``--data-parallel-size R``,
with or without ``--enable-expert-parallel``).

Responsibility: price one step that R ranks take together. vLLM runs the attention and
the dense operators of each DP rank on that rank's own batch, but every MoE layer is one
collective over all ranks (the routed experts are sharded over them), so the ranks
synchronise at every layer and a rank with nothing to do runs a dummy batch of one
token (``execute_dummy_batch``). Per step:

  padding      every rank's batch is padded to the group's largest token count
               ``n_max`` (vLLM's DP padding, so the collectives and CUDA graphs match):
               the dense operators run at ``n_max`` on every rank, attention and the LM
               head on the rank's own requests;
  ranks        ``rank_r`` = the rank's GPU seconds without the expert layers
               (``CostModel.gpu_terms``), dummy ranks as a one-token decode;
  experts      the global batch is ``T = R x n_max`` tokens over S = R x TP GPUs. With
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
               ``allgather_reducescatter`` backend: each ``latency + (R - 1) n_max d_model
               x bytes / bandwidth`` over the accelerator's link (the all-reduce figures
               of ``groups._allreduce_fit`` at R ranks), plus one latency per step for the
               ranks' agreement on the batch sizes;
  step         ``GPU = max_r rank_r + L_moe (expert layer + dispatch + combine) + sync``
               (``L_moe``: the layers with routed experts, ``ModelProfile.moe_layers``); the
               step costs ``max(host, GPU)`` with async scheduling, else ``host + GPU``,
               and every rank's step ends then.

A pricing without the expert layer apart (``roofline_*``, or ``per_group`` with no
measured expert table) keeps each rank's own price (its expert layers inside, as one
engine's, its weights the rank's share: ``CostModel(expert_shards=R)``) and adds the
collectives; ``moe_s`` is then None.

Invariant: pure; the common duration is the same for every rank and at least every
rank's own GPU seconds; a group of one rank with no collectives is priced exactly as its
single engine (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from sim.cost.groups import _allreduce_fit
from sim.cost.kernel_tables import MoeGrid
from sim.cost.roofline import CostModel, StepCost, StepWork
from sim.units import dtype_bytes

#: what a rank with no work runs while the others step (vLLM's dummy batch: one token)
DUMMY_WORK = StepWork(n_decode=1, decode_history_tokens=0)


@dataclass(frozen=True)
class LockstepCost:
    """One lockstep step: the common duration and each rank's view of it."""

    total_s: float
    costs: tuple[StepCost, ...]  # per rank (a dummy rank's too)
    dummy: tuple[bool, ...]  # per rank: ran a dummy batch
    pad_tokens: int  # n_max
    global_tokens: int  # T = R x n_max
    moe_s: float | None  # MoE layers x the expert layer (None: inside each rank's price)
    comm_s: float  # MoE layers x (dispatch + combine) + the per-step sync
    rank_gpu_s: tuple[float, ...]  # each rank's own GPU seconds (no experts, no comm)


class LockstepPricer:
    """Prices lockstep steps of ``ranks`` DP ranks sharing one cost model (see module)."""

    def __init__(self, cost: CostModel, ranks: int) -> None:
        if ranks < 1:
            raise ValueError("a lockstep group needs at least one rank")
        self.cost, self.R = cost, ranks
        m = cost.model
        self.L, self.d = m.moe_layers, m.d_model  # the layers with an expert collective
        self.ab = dtype_bytes(cost.config.activation_dtype)
        self.E, self.k = m.num_experts or 0, m.experts_per_token or 0
        self.shards = ranks * cost.tp  # GPUs the experts are spread over
        self.split = cost.groups is not None and self.E > 0  # per-group: experts priced here
        self.moe: MoeGrid | None = self._moe_table() if self.split else None
        if self.split and self.moe is None:
            self.split = False  # a per-group pricing without a measured expert layer
        fit = _allreduce_fit(cost.config, cost.calibration, cost.accelerator, ranks)
        self.latency_s, self.bw = fit.latency_s, fit.bus_bw_bytes_per_s
        self.collectives = cost.config.allreduce and ranks > 1

    def _moe_table(self) -> MoeGrid | None:
        """The measured expert layer (kernel tables only; the table of the rank's TP
        degree, which is the profiler's one-GPU table unless that degree has its own)."""
        if self.cost.pricing != "kernel_tables":
            return None
        return self.cost.groups.tables.moe

    # -- the parts ---------------------------------------------------------------------

    def expert_layer_s(self, global_tokens: int) -> float:
        """Seconds of one MoE layer's experts on each GPU for ``global_tokens`` tokens."""
        if self.moe is None or global_tokens <= 0:
            return 0.0
        E, k, S, T = self.E, self.k, self.shards, global_tokens
        return float(self.moe.at(T / S, E / S * (1.0 - (1.0 - k / E) ** T)))

    def collective_s(self, pad_tokens: int) -> float:
        """One dispatch or combine: each rank moves (R - 1) padded batches of hidden state."""
        if not self.collectives:
            return 0.0
        return self.latency_s + (self.R - 1) * pad_tokens * self.d * self.ab / self.bw

    # -- one step ----------------------------------------------------------------------

    def price(self, works: Sequence[StepWork | None]) -> LockstepCost:
        """The step of every rank (``None``: the rank has nothing to run, so a dummy)."""
        if len(works) != self.R:
            raise ValueError(f"{len(works)} works for {self.R} ranks")
        cost = self.cost
        dummy = tuple(w is None for w in works)
        ws = [DUMMY_WORK if w is None else w for w in works]
        n_max = max(max(w.n_tokens for w in ws), 1)
        T = self.R * n_max
        own = [cost.iteration_time(w) for w in ws]
        if self.split:
            gpu = [cost.gpu_terms(w, n_max)[0] for w in ws]
            moe = self.L * self.expert_layer_s(T)
        else:  # each rank's own price stands (its experts inside), without its host overhead
            gpu = [self._own_gpu_s(w) for w in ws]
            moe = None
        comm = 0.0
        if self.collectives:
            comm = 2 * self.L * self.collective_s(n_max) + self.latency_s
        host = cost._overhead_s()
        g = max(gpu) + (moe or 0.0) + comm
        total = max(host, g) if cost.async_scheduling else host + g
        costs = tuple(
            replace(
                c,
                total_s=total,
                overhead_s=host,
                extra={**c.extra, "lockstep": True, "moe_s": moe, "ep_comm_s": comm,
                       "lockstep_wait_s": max(gpu) - gpu[r],
                       "dummy": dummy[r]},
            )  # fmt: skip
            for r, c in enumerate(own)
        )
        return LockstepCost(total, costs, dummy, n_max, T, moe, comm, tuple(gpu))

    def _own_gpu_s(self, work: StepWork) -> float:
        """A step's GPU seconds under a pricing without per-group terms: its price with
        the host overhead added in turn (async scheduling off for the call), less it."""
        cost = self.cost
        saved, cost.async_scheduling = cost.async_scheduling, False
        try:
            c = cost.iteration_time(work)
        finally:
            cost.async_scheduling = saved
        return c.total_s - c.overhead_s


__all__ = ["DUMMY_WORK", "LockstepCost", "LockstepPricer"]
