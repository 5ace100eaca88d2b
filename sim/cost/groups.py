"""Per-group step pricing (``cost.step_pricing: per_group``): a step as the GPU runs it.

Responsibility: price one step per tensor-parallel rank as the sum of operator groups
that run one after the other, each its own max(memory, compute) plus a per-kernel floor:

  linear       L x the layer's four GEMMs (fused QKV, output, MLP up+gate, down) at the
               step's token count, per-GPU shapes; measured tables where the calibration
               has the shape, else the fitted (or datasheet) roofline of each kernel;
  lm_head      one GEMM (d_model x vocab / TP) over the logits vLLM computes: the last
               token of each scheduled sequence (decodes + prefill chunks);
  embedding    the token gather, once per step;
  elementwise  L x five memory-bound kernels (two RMSNorms, RoPE, activation, residual add);
  attention    L kernel floors + max(KV bytes read / bandwidth, attention FLOPs / rate); the
               rate is the step's linear GEMM throughput, at least the fitted FLOP/s;
  allreduce    (2 L + 1) calls under TP (after the output and down projections, and the
               vocabulary-parallel embedding): latency + 2 (p-1)/p x bytes / bus bandwidth.

Models without ``intermediate_size`` and ``vocab_size`` are priced with one linear group
of their whole weights and 2 x active parameters per token (four kernels per layer), no
separate LM head or embedding.

Invariant: pure; a step's price is ``fixed(n_tokens, n_logits, prefill?) +
attention(kv_tokens, pairs)`` and the attention part is computed with numpy arrays for
a single step and for a run of decode steps alike (``attention_terms``, the pricer
interface of ``sim.cost.pricer``), so a run equals its steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from sim.cost.calibration import Calibration
from sim.cost.linear import AllReduceFit, KernelFit, gemm_bytes, gemm_flops
from sim.cost.pricer import MEMO_ENTRIES_MAX
from sim.lazy_numpy import numpy_on_first_use
from sim.profiles.schema import AcceleratorProfile, ModelProfile
from sim.sizing.kv import kv_bytes_per_token_per_gpu
from sim.units import dtype_bytes

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())

LEGACY_ALLREDUCE = AllReduceFit(latency_s=5e-6, bus_bw_bytes_per_s=450e9)
ELEMENTWISE_KERNELS = 5  # input norm, RoPE, post-attention norm, activation, residual add
LINEAR_KERNELS = 4


@dataclass(frozen=True)
class FixedTerms:
    """The parts of a step's price that do not depend on the KV it reads."""

    linear_s: float
    linear_mem_s: float  # roofline memory side of linear + LM head (information)
    linear_comp_s: float  # roofline compute side of linear + LM head (information)
    linear_flops: float
    lm_head_s: float
    embedding_s: float
    elementwise_s: float
    allreduce_s: float
    attention_rate: float  # FLOP/s the step's attention runs at
    moe_s: float = 0.0  # routed expert layers (kernel tables of a MoE model)
    logits_gather_s: float = 0.0  # gathering the vocabulary-parallel logits under TP (tables)

    @cached_property  # asked on every priced step; the terms are memoised per batch shape
    def total_s(self) -> float:
        return (self.linear_s + self.lm_head_s + self.embedding_s + self.elementwise_s
                + self.allreduce_s + self.moe_s + self.logits_gather_s)  # fmt: skip


#: the part of ``FixedTerms`` a token count (and prefill?) decides: (the linear layers'
#: kernel fit, linear s, memory s, compute s, FLOPs, embedding s, elementwise s,
#: all-reduce s, attention FLOP/s); the LM head's GEMM is added per logit count
_TokenTerms = tuple[KernelFit, float, float, float, float, float, float, float, float]


def gemm_shapes(model: ModelProfile, tp: int) -> list[tuple[int, int]] | None:
    """Per-GPU (K, N) of the layer's GEMMs, or None when the profile lacks the MLP width."""
    if model.intermediate_size is None or model.attention == "mla":
        return None
    hd, d, ff = model.head_dim, model.d_model, model.intermediate_size
    q = -(-model.num_q_heads // tp) * hd
    kv = max(1, model.num_kv_heads // tp) * hd
    up = (2 if model.gated_mlp else 1) * (ff // tp)
    return [(d, q + 2 * kv), (q, d), (d, up), (ff // tp, d)]


def elementwise_elements_per_token(d_model: int, head_dim: int, n_q: int, n_kv: int, d_ff: int,
                                   gated: bool, tp: int) -> tuple[int, ...]:
    """Elements read + written per token by each element-wise kernel of a layer, per GPU:
    input RMSNorm (2 d), RoPE on q and k (2 (q + k)), post-attention RMSNorm (2 d), the
    activation (gated: read gate and up, write one: 3 ff / TP), the residual add (3 d).
    Norms and adds are not sharded under TP (every rank holds the whole hidden state)."""
    qk = (-(-n_q // tp) + max(1, n_kv // tp)) * head_dim
    act = (3 if gated else 2) * (d_ff // tp)
    return (2 * d_model, 2 * qk, 2 * d_model, act, 3 * d_model)


class GroupPricer:
    """Prices steps group by group for one model, accelerator, TP degree and config."""

    def __init__(self, model: ModelProfile, accelerator: AcceleratorProfile, tp: int, config,
                 calibration: Calibration | None):  # fmt: skip
        self.model, self.tp, self.config, self.cal = model, tp, config, calibration
        self.L = model.num_layers
        self.wb = dtype_bytes(model.weight_dtype)
        self.ab = dtype_bytes(config.activation_dtype)
        self.shapes = gemm_shapes(model, tp)
        self.lm_shape = (model.d_model, -(-model.vocab_size // tp)) if model.vocab_size else None
        overridden = config.weights_bytes is not None or config.params is not None
        if self.shapes is None or self.lm_shape is None or overridden:
            self.shapes, self.lm_shape = None, None  # one group of the whole model
        if calibration is not None and calibration.schema_version == 2:
            self.hbm_bw = calibration.reference_hbm_bw_bytes_per_s
            self.peak = calibration.reference_peak_flops_per_s
        else:
            self.hbm_bw = accelerator.hbm_bw_bytes_per_s
            self.peak = accelerator.peak_flops_per_s("bf16")
        params = config.params or model.active_params
        w_total = config.weights_bytes or model.weights_bytes
        self.whole_weight_bytes_per_gpu = w_total / tp
        self.whole_flops_per_token_per_gpu = 2 * params / tp
        self.kv_bytes_per_token_per_gpu = kv_bytes_per_token_per_gpu(model, tp, 1)
        self.attn_flops_per_pair_per_gpu = 4 * self.L * model.num_q_heads * model.head_dim / tp
        self.allreduce_fit = _allreduce_fit(config, calibration, accelerator, tp)
        self._fixed: dict[tuple[int, int, bool], FixedTerms] = {}
        self._by_tokens: dict[tuple[int, bool], _TokenTerms] = {}  # ``_fixed_terms``' part
        self._eff_by_ctx: dict[float, float] = {}  # calibrated attention efficiency by mean context
        self._mem_fit: KernelFit | None = None
        self._att_floors_s: float | None = None

    # -- kernel laws --------------------------------------------------------------------

    def _linear_fit(self, n_tok: int, prefill: bool) -> KernelFit:
        c, cal = self.config, self.cal
        if cal is None:
            mfu = c.mfu_prefill if prefill else c.mfu_decode
            return KernelFit(c.kernel_floor_s, c.bw_efficiency, mfu)
        if cal.linear_fallback is not None:
            return cal.linear_fallback
        m = max(1, n_tok)  # a version-1 calibration: its weight-streaming and GEMM curves
        return KernelFit(0.0, cal.decode_bw_efficiency(m), cal.gemm_efficiency(m))

    def _memory_fit(self) -> KernelFit:
        """Element-wise and attention kernels: the calibration's fit, else its fallback's
        bandwidth, else the datasheet with ``bw_efficiency`` and ``kernel_floor_s`` (made
        once: it is asked every step)."""
        fit = self._mem_fit
        if fit is None:
            fit = self._mem_fit = self._make_memory_fit()
        return fit

    def _make_memory_fit(self) -> KernelFit:
        c, cal = self.config, self.cal
        if cal is None:
            return KernelFit(c.kernel_floor_s, c.bw_efficiency)
        if cal.elementwise_fit is not None:
            return cal.elementwise_fit
        floor = cal.linear_fallback.kernel_floor_s if cal.linear_fallback else 0.0
        return KernelFit(floor, cal.linear_fallback.bw_efficiency if cal.linear_fallback
                         else cal.decode_bw_efficiency(1))  # fmt: skip

    def _gemm(self, k: int, n: int, m: int, fit: KernelFit) -> tuple[float, float, float]:
        """(seconds, roofline memory s, roofline compute s) of one GEMM of ``m`` tokens."""
        c = self.config
        by = gemm_bytes(m, k, n, self.wb, self.ab) if c.weights else 0.0
        fl = gemm_flops(m, k, n) if c.gemm_flops else 0.0
        mem = by / (self.hbm_bw * fit.bw_efficiency)
        comp = fl / (self.peak * fit.flops_efficiency)
        table = self.cal.gemm_table(k, n) if self.cal is not None else None
        if table is not None and c.weights and c.gemm_flops:
            return table.time_at(m), mem, comp
        if not (c.weights or c.gemm_flops):
            return 0.0, 0.0, 0.0
        return fit.kernel_floor_s + max(mem, comp), mem, comp

    # -- groups -------------------------------------------------------------------------

    def fixed(self, n_tok: int, n_logits: int, prefill: bool) -> FixedTerms:
        """Everything but attention, memoised by (tokens, logits, prefill?)."""
        key = (n_tok, n_logits, prefill)
        terms = self._fixed.get(key)
        if terms is None:
            terms = self._fixed_terms(n_tok, n_logits, prefill)
            if len(self._fixed) < MEMO_ENTRIES_MAX:
                self._fixed[key] = terms
        return terms

    def _fixed_terms(self, n_tok: int, n_logits: int, prefill: bool) -> FixedTerms:
        """The LM head's GEMM (by logits) added to the token-count part (memoised by
        tokens and prefill?, which many logit counts share), in the order of one sum."""
        key = (n_tok, prefill)
        part = self._by_tokens.get(key)
        if part is None:
            part = self._token_terms(n_tok, prefill)
            if len(self._by_tokens) < MEMO_ENTRIES_MAX:
                self._by_tokens[key] = part
        fit, lin, mem, comp, flops, emb, elem, allreduce_s, rate = part
        lm = 0.0
        if n_logits > 0 and self.lm_shape is not None:
            lm, m_s, c_s = self._gemm(*self.lm_shape, n_logits, fit)
            mem, comp = mem + m_s, comp + c_s
        return FixedTerms(lin, mem, comp, flops, lm, emb, elem, allreduce_s, rate)

    def _token_terms(self, n_tok: int, prefill: bool) -> _TokenTerms:
        fit = self._linear_fit(n_tok, prefill)
        lin = mem = comp = flops = 0.0
        if n_tok > 0:
            if self.shapes is None:
                lin, mem, comp, flops = self._whole_model(n_tok, fit)
            else:
                for k, n in self.shapes:
                    t, m_s, c_s = self._gemm(k, n, n_tok, fit)
                    lin, mem, comp = lin + self.L * t, mem + self.L * m_s, comp + self.L * c_s
                    flops += self.L * gemm_flops(n_tok, k, n) if self.config.gemm_flops else 0.0
        emb = elem = 0.0
        if self.config.elementwise and n_tok > 0:
            mfit = self._memory_fit()
            emb_fit = self.cal.embedding_fit if self.cal and self.cal.embedding_fit else mfit
            if self.shapes is not None:
                emb = float(emb_fit.time_s(2 * n_tok * self.model.d_model * self.ab, 0.0,
                                           self.hbm_bw, self.peak))  # fmt: skip
            elem = self.L * self._elementwise_layer_s(n_tok, mfit)
        rate = self._attention_rate(lin, flops, fit)
        return fit, lin, mem, comp, flops, emb, elem, self._allreduce_s(n_tok), rate

    def _whole_model(self, n_tok: int, fit: KernelFit) -> tuple[float, float, float, float]:
        c = self.config
        w = self.whole_weight_bytes_per_gpu if c.weights else 0.0
        flops = self.whole_flops_per_token_per_gpu * n_tok if c.gemm_flops else 0.0
        mem = w / (self.hbm_bw * fit.bw_efficiency)
        comp = flops / (self.peak * fit.flops_efficiency)
        floors = LINEAR_KERNELS * self.L * fit.kernel_floor_s if (w or flops) else 0.0
        return floors + max(mem, comp), mem, comp, flops

    def _elementwise_layer_s(self, n_tok: int, fit: KernelFit) -> float:
        m = self.model
        per_kernel = elementwise_elements_per_token(
            m.d_model, m.head_dim, m.num_q_heads, m.num_kv_heads,
            m.intermediate_size or 4 * m.d_model, m.gated_mlp, self.tp,
        )  # fmt: skip
        total = 0.0
        for elements in per_kernel:
            total += float(fit.time_s(n_tok * elements * self.ab, 0.0, self.hbm_bw, self.peak))
        return total

    def _attention_rate(self, linear_s: float, linear_flops: float, fit: KernelFit) -> float:
        fitted = self.peak * fit.flops_efficiency
        if self.cal is None or linear_s <= 0:
            return fitted
        return max(fitted, linear_flops / linear_s)

    def _allreduce_s(self, n_tok: int) -> float:
        if not self.config.allreduce or self.tp == 1 or n_tok == 0:
            return 0.0
        calls = 2 * self.L + (1 if self.shapes is not None else 0)
        return calls * self.allreduce_fit.call_s(n_tok * self.model.d_model * self.ab, self.tp)

    # -- attention ----------------------------------------------------------------------

    def attention_terms(self, work, i, kv_tokens, pairs, n_seq: int, rate: float):
        """(seconds, memory s, compute s) of the attention group of step ``i`` of a run
        starting with ``work`` (a ``StepWork``; ``i`` 0 for one step, floats back, or an
        array of step offsets, arrays back); ``kv_tokens`` and ``pairs`` are that step's
        (``CostModel._kv_pairs``). This pricer needs only those.

        One step is ``attention`` on floats: the same IEEE operations in the same order
        (numpy's elementwise arithmetic is Python's), the calibrated efficiency looked up
        once per mean context (memoised) in the calibration's table of that array call on
        one element (``Calibration.attention_bw_one``), so a step costs no numpy call;
        equal to ``attention`` of a one-element array, bit for bit. Written inline (no
        helper calls): it runs about four times per engine decision."""
        if isinstance(kv_tokens, np.ndarray):
            return self.attention(kv_tokens, pairs, n_seq, rate)
        c, cal = self.config, self.cal
        eff = c.bw_efficiency
        if cal is not None:
            ctx = float(math.floor(kv_tokens / (n_seq if n_seq > 1 else 1)))  # max(1, n_seq)
            ctx = ctx if ctx > 1.0 else 1.0  # np.maximum(1.0, ctx) on a finite float
            eff = self._eff_by_ctx.get(ctx)
            if eff is None:
                eff = cal.attention_bw_one(c.block_size, ctx)
                if len(self._eff_by_ctx) < MEMO_ENTRIES_MAX:
                    self._eff_by_ctx[ctx] = eff
        mem = kv_tokens * self.kv_bytes_per_token_per_gpu / (self.hbm_bw * eff) if c.kv_read else 0.0
        comp = pairs * self.attn_flops_per_pair_per_gpu / rate if c.attention_flops else 0.0
        floors = self._att_floors_s
        if floors is None:
            floors = self._attention_floors_s()
        return floors + (comp if comp > mem else mem), float(mem), float(comp)

    def attention(self, kv_tokens: np.ndarray, pairs: np.ndarray, n_seq: int, rate: float):
        """(seconds, memory s, compute s) arrays of the attention group for each step."""
        c, cal = self.config, self.cal
        if cal is not None:
            mean_ctx = np.maximum(1.0, np.floor(kv_tokens / max(1, n_seq)))
            eff = cal.attention_bw_at(c.block_size, mean_ctx)
        else:
            eff = c.bw_efficiency
        mem = kv_tokens * self.kv_bytes_per_token_per_gpu / (self.hbm_bw * eff) if c.kv_read \
            else 0.0 * kv_tokens  # fmt: skip
        comp = pairs * self.attn_flops_per_pair_per_gpu / rate if c.attention_flops \
            else 0.0 * pairs  # fmt: skip
        return self._attention_floors_s() + np.maximum(mem, comp), mem, comp

    def _attention_floors_s(self) -> float:
        """The attention group's L kernel floors (made once: asked on every priced step)."""
        floors = self._att_floors_s
        if floors is None:
            c = self.config
            fit = self._memory_fit()
            floors = self.L * fit.kernel_floor_s if (c.kv_read or c.attention_flops) else 0.0
            self._att_floors_s = floors
        return floors


def _allreduce_fit(config, cal: Calibration | None, accel: AcceleratorProfile, tp: int) -> AllReduceFit:
    """Per figure: the scenario's ``allreduce_*`` (then the line, no curve), else the
    calibration's measurement of this TP degree, else the accelerator profile's, else the
    chapter's 450 GB/s + 5 us."""
    measured = cal.allreduce_fit(tp) if cal is not None else None
    if measured is None and accel.allreduce is not None and tp in accel.allreduce.by_tp:
        line = accel.allreduce.by_tp[tp]
        measured = AllReduceFit(line.latency_s, line.bus_bw_bytes_per_s)
    base = measured or LEGACY_ALLREDUCE
    bw, lat = config.allreduce_bw_bytes_per_s, config.allreduce_latency_s
    if bw is None and lat is None:
        return base
    return AllReduceFit(base.latency_s if lat is None else lat,
                        base.bus_bw_bytes_per_s if bw is None else bw)  # fmt: skip
