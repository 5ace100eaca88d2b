"""Roofline iteration time (F21, F23, F24) with a per-term breakdown.

Invariant: ``iteration_time(work)`` is a pure function of the step's work and the
configuration; every term can be switched off, and with weights + GEMM only and the
chapter's efficiencies it is exactly F24 (E20: 46.7 ms decode, 1,194.7 ms monolithic
4,096-token prefill, 158.7 ms for a 512-token chunk with 32 decodes). Per-GPU quantities
are for one tensor-parallel rank; pipeline stages run one after another (no micro-batch
overlap is modelled), so PP does not shorten a step.

Terms (per TP rank):
- memory time  = (weight bytes / TP + KV bytes read) / (HBM bandwidth x bw_efficiency)
- compute time = (2 x active params x tokens + attention FLOPs) / TP / (MFU x peak), where
  a step with any prefill uses ``mfu_prefill``, a pure decode step ``mfu_decode``;
  attention FLOPs are 4 L d per (query, key) pair a kernel computes. A chunk of c new
  tokens over h cached ones under the causal mask (``attention_mask: causal``, the
  default: what FlashAttention-style kernels do) has c h + c (c + 1) / 2 pairs, i.e.
  4 L d c (h + c/2) plus the diagonal, about half of the new-token square; a decode token
  (c = 1) attends h + 1. ``attention_mask: square`` prices the full c (h + c), so a
  monolithic prefill of S tokens gives F23's 4 L d S^2 as the chapter states it;
- step = overhead + allocator calls + max(memory, compute) + TP all-reduce + HBM copies;
  with ``async_scheduling`` (vLLM's async scheduler, set by the run from
  ``scheduler.async_scheduling``) the host's ``overhead`` was spent while the previous step
  ran, so step = max(overhead, the rest); with no overhead both are the same number.

That is ``step_pricing: roofline_max``. ``per_group`` (``sim.cost.groups``) prices the
operator groups a GPU runs one after the other (linear, LM head, embedding, element-wise,
attention, all-reduce), each its own max(memory, compute) plus a per-kernel floor, then
sums them; ``kernel_tables`` (``sim.cost.table_pricer``) sums the calibration's measured
per-layer vLLM kernels of the model for the step's exact batch mix, in the same group
shape. ``auto`` (the default) is ``kernel_tables`` when the scenario names a version-2
calibration with kernel tables (which must cover the model), ``per_group`` with another
version-2 calibration and ``roofline_max`` otherwise, so runs without one are priced as
before.
``CostModel`` is a ``sim.cost.pricer.StepPricer``: ``price(work)`` prices one step,
``price_run(work, k)`` a run of k decode steps (each decode's history one token longer a
step, the kernel tables' skew correction included), with the same code written once over
step offsets (0 for a step, ``arange(k)`` for a run), so a run equals its steps by
construction. ``iteration_time`` and ``decode_run_times`` are the version-2 names of both.
``price_run_attention`` (and ``price_s_attention`` for one step) give each step's attention
seconds besides, from the same terms.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sim.cost.config import CostConfig
from sim.cost.groups import GroupPricer
from sim.cost.pricer import (
    MEMO_ENTRIES_MAX,
    StepWork,
    as_run,
    check_run,
    step_offsets,
    step_total,
    vmax,
)
from sim.lazy_numpy import numpy_on_first_use
from sim.profiles.schema import AcceleratorProfile, ModelProfile
from sim.sizing.attention_work import attention_work
from sim.sizing.kv import kv_bytes_per_token_per_gpu
from sim.units import dtype_bytes

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())

#: what prices a step with no decode (``CostModel.price_s``' memo): its prefill chunks,
#: history tokens, copy bytes, allocator calls, and whether the host overlaps the GPU
_PromptKey = tuple[tuple[tuple[int, int], ...], int, float, int, bool]


@dataclass(slots=True)
class StepCost:
    """Seconds of one step and the terms behind them (a value: never changed once built;
    ``dataclasses.replace`` makes a changed copy). Not frozen: a frozen dataclass's
    constructor costs ~10x this one's, and one is built per engine decision."""

    total_s: float
    mem_s: float
    comp_s: float
    weights_s: float
    kv_read_s: float
    gemm_s: float
    attention_s: float
    allreduce_s: float
    copy_s: float
    alloc_s: float
    overhead_s: float
    bound: str  # 'memory' or 'compute'
    mfu: float
    n_tokens: int
    flops_per_gpu: float
    hbm_bytes_per_gpu: float
    extra: dict = field(default_factory=dict)


class CostModel:
    """Prices steps for one model on one kind of accelerator with a TP x PP layout."""

    def __init__(
        self,
        model: ModelProfile,
        accelerator: AcceleratorProfile,
        tp: int = 1,
        pp: int = 1,
        config: CostConfig | None = None,
        expert_shards: int = 1,
    ):
        self.model, self.accelerator, self.tp, self.pp = model, accelerator, tp, pp
        # data-parallel ranks the routed experts are spread over (this engine holds 1 / n)
        self.expert_shards = expert_shards
        self.config = config or CostConfig()
        # vLLM's async scheduling (the scheduler's choice; the run sets it): the host's
        # per-step work overlaps the GPU's previous step, so a step costs max(host, GPU)
        self.async_scheduling = False
        c = self.config
        params = c.params or model.active_params
        w_total = c.weights_bytes or model.weights_bytes
        # PP stages run in turn, so a step streams every stage's share: whole model / TP
        self.weight_bytes_per_gpu = w_total / tp
        if expert_shards > 1:  # a DP rank streams its own share of the routed experts
            w_exp = w_total * min(model.routed_expert_params / model.params_total, 1.0)
            self.weight_bytes_per_gpu = (w_total - w_exp) / tp + w_exp / (tp * expert_shards)
        self.kv_bytes_per_token_per_gpu = kv_bytes_per_token_per_gpu(model, tp, 1)
        self.gemm_flops_per_token_per_gpu = 2 * params / tp
        d_attn = model.num_q_heads * model.head_dim
        self.attn_flops_per_pair_per_gpu = 4 * model.num_layers * d_attn / tp
        # a hybrid model's attention by layer group (windows, chunks, states); None: dense
        self.attention_work = attention_work(model, tp)
        self.hbm_bw = accelerator.hbm_bw_bytes_per_s
        self.peak = accelerator.peak_flops_per_s("bf16")
        self.calibration = _load_calibration(c.calibration)
        self._act_bytes = dtype_bytes(c.activation_dtype)
        self.pricing = _pricing(c.step_pricing, self.calibration, model, tp)
        self._host_overhead_s: float | None = None
        self._prompt_s: dict[_PromptKey, float] = {}  # price_s of steps with no decode
        # (seconds, FLOPs over the replica) of one prefill chunk alone, by (new, cached):
        # ``prefill_alone``'s (a context's chunks repeat from pause to pause)
        self._chunk_alone: dict[tuple[int, int], tuple[float, float]] = {}
        self.groups = None
        if self.pricing == "per_group":
            self.groups = GroupPricer(model, accelerator, tp, c, self.calibration)
        elif self.pricing == "kernel_tables":
            from sim.cost.table_pricer import TablePricer

            self.groups = TablePricer(model, accelerator, tp, c, self.calibration)
        if self.groups is not None and expert_shards > 1:
            self.groups.whole_weight_bytes_per_gpu = self.weight_bytes_per_gpu

    # -- public: the pricer interface (sim.cost.pricer) ---------------------------------

    def price(self, work: StepWork) -> StepCost:
        """Price one step (F24 extended, or group by group); returns the breakdown."""
        if self.groups is not None:
            cost = self._per_group(work)
        else:
            cost = self._roofline(work, 0, self.async_scheduling).cost(work, self)
        scale = self.config.step_time_scale  # capacity's error band (sim.sweep.error_band)
        return cost if scale == 1.0 else replace(cost, total_s=cost.total_s * scale)

    def price_s(self, work: StepWork) -> float:
        """``price(work).total_s`` without the breakdown (the same terms, no ``StepCost``):
        what the engine asks for the steps it only needs the seconds of (a run's later
        prefill steps, the prefill share's two parts). A step with no decode is memoised
        by what prices it (its chunks, history, copies, allocator calls, and the overlap):
        the prefill share prices every mixed step's prompt chunks alone, and chunked
        prompts repeat their chunks (chat_azure_5000: 13,640 such steps, 8,009 distinct)."""
        key: _PromptKey | None = None
        if not work.n_decode:
            key = (work.prefill_chunks, work.decode_history_tokens, work.copy_bytes, work.alloc_calls,
                   self.async_scheduling)  # fmt: skip
            seconds = self._prompt_s.get(key)
            if seconds is not None:
                return seconds
        # one body for both (it runs on every mixed step: the prefill share's decodes alone)
        if self.groups is not None:
            total = self._group_terms(work, 0, self.async_scheduling)[0]
        else:
            total = self._roofline(work, 0, self.async_scheduling).total_s
        scale = self.config.step_time_scale  # as in ``price``: the same product
        seconds = total if scale == 1.0 else total * scale
        if key is not None and len(self._prompt_s) < MEMO_ENTRIES_MAX:
            self._prompt_s[key] = seconds
        return seconds

    def price_run(self, work: StepWork, n_steps: int) -> np.ndarray:
        """Durations of a run of ``n_steps`` steps starting with ``work`` (``work`` alone
        for one step; more: its decodes, every history one token longer a step,
        ``sim.cost.pricer.advanced``), computed by the code that prices one step, so the
        durations equal ``price`` of each step exactly (the engine's fast path relies on it)."""
        total = self._terms(work, step_offsets(n_steps), n_steps, False)[0]
        durations = as_run(total, n_steps)
        scale = self.config.step_time_scale  # as in ``price``: the same product per step
        return durations if scale == 1.0 else durations * scale

    def price_run_attention(self, work: StepWork, n_steps: int) -> tuple[np.ndarray, np.ndarray]:
        """(``price_run(work, n_steps)``, each step's attention seconds): the larger of the
        step's ``kv_read_s`` and ``attention_s`` in its breakdown (``price``), i.e. the
        attention group's time without its kernel floors (what a calibration that does not
        measure attention leaves to the roofline, ``sim.cost.accuracy``). The same code as
        ``price_run``, so step ``i``'s equal ``price(advanced(work, i))``'s exactly."""
        total, attention = self._terms(work, step_offsets(n_steps), n_steps, True)
        durations = as_run(total, n_steps)
        scale = self.config.step_time_scale  # as in ``price_run``
        return (durations if scale == 1.0 else durations * scale), as_run(attention, n_steps)

    def price_s_attention(self, work: StepWork) -> tuple[float, float]:
        """(``price_s(work)``, the step's attention seconds as ``price_run_attention``
        gives them), for a step the engine prices without a breakdown."""
        total, attention = self._terms(work, 0, 1, True)
        scale = self.config.step_time_scale  # as in ``price_s``
        return (total if scale == 1.0 else total * scale), attention

    def _terms(self, work: StepWork, i: Any, n_steps: int, attention: bool) -> tuple[Any, Any]:
        """(total seconds, attention seconds or None) of step offsets ``i`` of a run of
        ``n_steps`` starting with ``work``, before ``step_time_scale``: the terms
        ``price`` puts in its breakdown, written once for a step and for a run."""
        check_run(work, n_steps)
        if self.groups is not None:
            total, *_, parts = self._group_terms(work, i, self.async_scheduling)
            # ``_per_group``'s kv_read_s and attention_s
            return total, (vmax(parts[2], parts[3]) if attention else None)
        t = self._roofline(work, i, self.async_scheduling)
        # ``_RooflineTerms.cost``'s kv_read_s and attention_s
        return t.total_s, (vmax(t.kv_s, t.attn_f / t.rate) if attention else None)

    def iteration_time(self, work: StepWork) -> StepCost:
        """``price`` (the name the callers of version 2 use)."""
        return self.price(work)

    def decode_run_times(
        self,
        n_decode: int,
        history_tokens: int,
        n_steps: int,
        max_history_tokens: int | None = None,
        min_history_tokens: int | None = None,
    ) -> np.ndarray:
        """Durations of ``n_steps`` pure-decode steps of the same ``n_decode`` sequences
        (``price_run`` of their first step; step i sees ``history_tokens + i * n_decode``
        cached tokens, its longest and shortest decode ``max/min_history_tokens + i``)."""
        work = StepWork(n_decode, history_tokens, (), 0.0, 0, max_history_tokens, min_history_tokens)
        return self.price_run(work, n_steps)

    def prefill_alone(self, chunks: Iterable[int], cached: int = 0) -> tuple[float, float]:
        """(seconds, FLOPs over the replica: ``flops_per_gpu`` x TP) of a prefill run
        alone, one step per chunk of ``chunks`` (new tokens each, as the scheduler cuts
        them: ``Scheduler.prefill_chunks``) after ``cached`` tokens still in HBM: each
        chunk attends over the cached prefix and the chunks before it (``price``, under
        ``attention_mask``, calibration included); the sums in chunk order, (0.0, 0.0) for
        no chunk. What the engine charges a recompute (``PauseDecider.recompute_price``)
        and ``kvsim breakeven`` reports as the engine's count. Memoised by (chunk, cached)."""
        seconds = flops = 0.0
        memo = self._chunk_alone
        for n in chunks:
            price = memo.get((n, cached))
            if price is None:
                step = self.price(StepWork(0, 0, ((n, cached),)))
                price = (step.total_s, step.flops_per_gpu * self.tp)
                if len(memo) < MEMO_ENTRIES_MAX:
                    memo[(n, cached)] = price
            seconds += price[0]
            flops += price[1]
            cached += n
        return seconds, flops

    def prefill_time_s(self, tokens: int, history_tokens: int = 0) -> float:
        """One monolithic prefill step of ``tokens`` new tokens (recompute estimates)."""
        return self.iteration_time(StepWork(prefill_chunks=((tokens, history_tokens),))).total_s

    # -- terms --------------------------------------------------------------------------

    def _kv_pairs(self, work: StepWork, i: Any) -> tuple[Any, Any]:
        """(KV tokens read, attention (query, key) pairs) of step ``i`` (0, or an array of
        step offsets: a run's decodes one token longer a step; each decode attends h + 1).
        A hybrid model's are its groups' full-attention equivalents (sim.sizing.attention_work)."""
        n = work.n_decode
        kv_tokens = work.decode_history_tokens + i * n + n
        if self.attention_work is not None:
            causal = self.config.attention_mask == "causal"
            return self.attention_work.equivalent(n, kv_tokens, work.prefill_chunks, causal)
        pairs = kv_tokens
        chunks = work.prefill_chunks
        if chunks:
            # (query, key) pairs of a chunk of ``new`` tokens over ``hist`` cached ones: every
            # new token sees the history, and under the causal mask only itself and the new
            # tokens before it (c (c + 1) / 2, so c = 1 is a decode's h + 1)
            square = self.config.attention_mask == "square"
            for new, hist in chunks:
                pairs = pairs + (new * (hist + new) if square else new * hist + new * (new + 1) // 2)
                kv_tokens = kv_tokens + (hist + new)
        return kv_tokens, pairs

    def _roofline(self, work: StepWork, i: Any, overlap: bool) -> _RooflineTerms:
        """``roofline_max`` terms of step ``i`` (scalars) or of a run (arrays)."""
        c = self.config
        n_tok = work.n_tokens
        kv_tokens, pairs = self._kv_pairs(work, i)
        weights_s, kv_s = self._mem_terms(n_tok, work.n_decode + len(work.prefill_chunks), kv_tokens)
        mfu = self._mfu(work)
        gemm_f = self.gemm_flops_per_token_per_gpu * n_tok if c.gemm_flops else 0.0
        attn_f = self.attn_flops_per_pair_per_gpu * pairs if c.attention_flops else 0.0 * pairs
        rate = mfu * self.peak
        mem_s, comp_s = weights_s + kv_s, (gemm_f + attn_f) / rate
        allreduce_s = self._allreduce_s(n_tok)
        copy_s = 2 * work.copy_bytes / self.hbm_bw if c.copies else 0.0  # read + write
        alloc_s = work.alloc_calls * c.alloc_latency_s
        overhead_s = self._overhead_s()
        total = step_total(overhead_s, alloc_s, vmax(mem_s, comp_s), allreduce_s, copy_s, overlap)
        return _RooflineTerms(total, mem_s, comp_s, weights_s, kv_s, gemm_f, attn_f, rate,
                              allreduce_s, copy_s, alloc_s, overhead_s, mfu, kv_tokens)  # fmt: skip

    def _mem_terms(self, n_tokens: int, n_seq: int, kv_tokens: Any) -> tuple[float, Any]:
        """(weights s, KV-read s) of one step (scalars) or a run's steps (arrays)."""
        if isinstance(kv_tokens, np.ndarray):
            return self._mem_arrays(n_tokens, n_seq, kv_tokens)
        if self.calibration is None:  # the same arithmetic as _mem_arrays', on floats
            c = self.config
            weights_s = self.weight_bytes_per_gpu / (self.hbm_bw * c.bw_efficiency) if c.weights else 0.0
            kv_bytes = kv_tokens * self.kv_bytes_per_token_per_gpu
            return weights_s, kv_bytes / (self.hbm_bw * c.bw_efficiency) if c.kv_read else 0.0
        kv = np.array([kv_tokens], dtype=np.float64)
        weights_s, kv_s = self._mem_arrays(n_tokens, n_seq, kv)
        return weights_s, float(kv_s[0])

    def _mem_arrays(self, n_tokens: int, n_seq: int, kv_tokens: np.ndarray):
        """(weights s, KV-read s per step) for steps that read ``kv_tokens`` each."""
        c, cal = self.config, self.calibration
        w_eff = kv_eff = c.bw_efficiency
        if cal is not None:
            w_eff = cal.decode_bw_efficiency(max(1, n_tokens))
            mean_ctx = np.floor(kv_tokens / n_seq) if n_seq else np.ones_like(kv_tokens)
            kv_eff = cal.attention_bw_at(c.block_size, np.maximum(1.0, mean_ctx))
        weights_s = self.weight_bytes_per_gpu / (self.hbm_bw * w_eff) if c.weights else 0.0
        kv_bytes = kv_tokens * self.kv_bytes_per_token_per_gpu
        kv_s = kv_bytes / (self.hbm_bw * kv_eff) if c.kv_read else 0.0 * kv_tokens
        return weights_s, kv_s

    def _mfu(self, work: StepWork) -> float:
        c = self.config
        if work.prefill_chunks:
            if self.calibration is not None:
                return self.calibration.gemm_efficiency(max(1, work.n_tokens))
            return c.mfu_prefill
        return c.mfu_decode

    def _allreduce_s(self, n_tokens: int) -> float:
        c, t = self.config, self.tp
        if not c.allreduce or t == 1 or n_tokens == 0:
            return 0.0
        msg = n_tokens * self.model.d_model * self._act_bytes
        bw = 450e9 if c.allreduce_bw_bytes_per_s is None else c.allreduce_bw_bytes_per_s
        latency = 5e-6 if c.allreduce_latency_s is None else c.allreduce_latency_s
        ring = 2 * (t - 1) / t * msg / bw
        return 2 * self.model.num_layers * (ring + latency)

    def _overhead_s(self) -> float:
        """The calibration's fitted step overhead when it has one, else the scenario's
        (made once: asked on every priced step)."""
        overhead_s = self._host_overhead_s
        if overhead_s is None:
            overhead_s = self._host_overhead_s = self._make_overhead_s()
        return overhead_s

    def _make_overhead_s(self) -> float:
        cal = self.calibration
        if cal is not None and cal.step_overhead_s is not None:
            return cal.step_overhead_s
        return self.config.step_overhead_s

    # -- per-group pricing (sim.cost.groups) ---------------------------------------------

    def gpu_terms(self, work: StepWork, pad_tokens: int = 0, i: Any = 0) -> tuple[Any, float]:
        """(GPU seconds of the step without the routed expert layers, their seconds) under
        a per-group pricing, the dense operators run at ``max(tokens, pad_tokens)`` (a
        data-parallel rank padded to its group's largest batch); host overhead excluded.
        ``i``: step offsets of a run (``sim.cost.pricer``). ``sim.cost.expert_parallel``
        prices the expert layers of a lockstep group itself."""
        if self.groups is None:
            raise ValueError("gpu_terms needs a per-group pricing (per_group, kernel_tables)")
        _, _, copy_s, alloc_s, (fixed, att, *_) = self._group_terms(work, i, False, pad_tokens)
        return alloc_s + fixed.total_s - fixed.moe_s + att + copy_s, fixed.moe_s

    def own_gpu_terms(self, work: StepWork, i: Any = 0) -> tuple[Any, _RooflineTerms | None]:
        """A step's GPU seconds (its price with the host overhead added in turn, less it:
        what a lockstep rank contributes), and the roofline terms behind them (None under
        a per-group pricing)."""
        if self.groups is not None:
            total, overhead_s = self._group_terms(work, i, False)[:2]
            return total - overhead_s, None
        t = self._roofline(work, i, False)
        return t.total_s - t.overhead_s, t

    def _group_terms(self, work: StepWork, i: Any, overlap: bool, pad_tokens: int = 0):
        """(total, overhead, copy, alloc, the parts) of step ``i`` under a per-group pricing,
        the parts (fixed terms, attention s, its memory s, its compute s, pairs, KV tokens)
        with the dense operators at ``max(tokens, pad_tokens)``. One function, no helpers
        of its own: it runs about four times per engine decision."""
        g, c = self.groups, self.config
        chunks = work.prefill_chunks
        n_tok = n_seq = work.n_decode
        if chunks:  # ``work.prefill_tokens``, its common case first
            n_tok += chunks[0][0] if len(chunks) == 1 else work.prefill_tokens
            n_seq += len(chunks)
        kv_tokens, pairs = self._kv_pairs(work, i)
        fixed = g.fixed(n_tok if n_tok >= pad_tokens else pad_tokens, n_seq, bool(chunks))
        att, att_mem, att_comp = g.attention_terms(work, i, kv_tokens, pairs, n_seq, fixed.attention_rate)
        copy_s = 2 * work.copy_bytes / self.hbm_bw if c.copies else 0.0
        alloc_s = work.alloc_calls * c.alloc_latency_s
        overhead_s = self._host_overhead_s
        if overhead_s is None:
            overhead_s = self._overhead_s()
        total = step_total(overhead_s, alloc_s, fixed.total_s, att, copy_s, overlap)
        return total, overhead_s, copy_s, alloc_s, (fixed, att, att_mem, att_comp, pairs, kv_tokens)

    def _per_group(self, work: StepWork) -> StepCost:
        g, c = self.groups, self.config
        n_tok, n_seq = work.n_tokens, work.n_decode + len(work.prefill_chunks)
        total, overhead_s, copy_s, alloc_s, parts = self._group_terms(work, 0, self.async_scheduling)
        fixed, att, att_mem, att_comp, pairs, kv_tokens = parts
        mem_s, comp_s = fixed.linear_mem_s + att_mem, fixed.linear_comp_s + att_comp
        attn_f = g.attn_flops_per_pair_per_gpu * pairs if c.attention_flops else 0.0
        lm_f = 2.0 * n_seq * g.lm_shape[0] * g.lm_shape[1] if g.lm_shape and c.gemm_flops else 0.0
        flops = fixed.linear_flops + lm_f + attn_f
        return StepCost(
            total_s=total, mem_s=mem_s, comp_s=comp_s, weights_s=fixed.linear_mem_s,
            kv_read_s=att_mem, gemm_s=fixed.linear_comp_s, attention_s=att_comp,
            allreduce_s=fixed.allreduce_s, copy_s=copy_s, alloc_s=alloc_s, overhead_s=overhead_s,
            bound="memory" if mem_s >= comp_s else "compute",
            mfu=flops / (total * self.peak) if total > 0 else 0.0, n_tokens=n_tok,
            flops_per_gpu=flops,
            hbm_bytes_per_gpu=(self.weight_bytes_per_gpu if c.weights else 0.0)
            + (kv_tokens * self.kv_bytes_per_token_per_gpu if c.kv_read else 0.0),
            extra={"pricing": self.pricing, "linear_s": fixed.linear_s, "lm_head_s": fixed.lm_head_s,
                   "embedding_s": fixed.embedding_s, "elementwise_s": fixed.elementwise_s,
                   "attention_group_s": att, "moe_s": fixed.moe_s,
                   "logits_gather_s": fixed.logits_gather_s},
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class _RooflineTerms:
    """The ``roofline_max`` terms of one step (floats) or of a run's steps (arrays)."""

    total_s: Any
    mem_s: Any
    comp_s: Any
    weights_s: float
    kv_s: Any
    gemm_f: float
    attn_f: Any
    rate: float
    allreduce_s: float
    copy_s: float
    alloc_s: float
    overhead_s: float
    mfu: float
    kv_tokens: Any

    @property
    def gemm_s(self) -> float:
        return self.gemm_f / self.rate

    def cost(self, work: StepWork, model: CostModel) -> StepCost:
        """The breakdown of one step."""
        c = model.config
        return StepCost(
            total_s=self.total_s,
            mem_s=self.mem_s,
            comp_s=self.comp_s,
            weights_s=self.weights_s,
            kv_read_s=self.kv_s,
            gemm_s=self.gemm_f / self.rate,
            attention_s=self.attn_f / self.rate,
            allreduce_s=self.allreduce_s,
            copy_s=self.copy_s,
            alloc_s=self.alloc_s,
            overhead_s=self.overhead_s,
            bound="memory" if self.mem_s >= self.comp_s else "compute",
            mfu=self.mfu,
            n_tokens=work.n_tokens,
            flops_per_gpu=self.gemm_f + self.attn_f,
            hbm_bytes_per_gpu=(model.weight_bytes_per_gpu if c.weights else 0.0)
            + (self.kv_tokens * model.kv_bytes_per_token_per_gpu if c.kv_read else 0.0),
        )


def _pricing(step_pricing: str, calibration, model: ModelProfile, tp: int) -> str:
    if step_pricing != "auto":
        return step_pricing
    if calibration is None or calibration.schema_version != 2:
        return "roofline_max"
    if calibration.kernel_tables:
        from sim.cost.table_pricer import require_tables

        require_tables(model, tp, calibration)  # a table file for another model: say so
        return "kernel_tables"
    return "per_group"


def _load_calibration(name: str | None):
    if name is None:
        return None
    from sim.cost.calibration import load_calibration  # opt-in: only when a scenario names one

    return load_calibration(name)
