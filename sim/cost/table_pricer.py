"""Step pricing from measured kernel tables (``cost.step_pricing: kernel_tables``).

Responsibility: price one step per GPU of the TP group the way vLLM runs it, from the
calibration's tables of the scenario model's geometry at the scenario's TP degree
(``sim.cost.kernel_tables``), in the per-group shape of ``sim.cost.groups`` (its
``FixedTerms`` and attention interface, so ``CostModel`` and the fast decode path treat
both alike):

  linear       L x the layer's GEMM operators (QKV, output, MLP up+gate, down: count x
               table at the step's tokens);
  elementwise  L x its other dense operators (norms, RoPE, activation, q/k norms);
  embedding    the step operators (embedding gather, final norm) at the step's tokens;
  lm_head      the sequence operators (LM head on each sequence's last token, sampler)
               at the number of scheduled sequences;
  moe          the MoE layers x the routed expert layer at the step's tokens and the experts they
               activate (``expected_active_experts``), MoE geometries only;
  attention    L x the attention kernel for the batch's exact mix: the prefill chunks
               (summed tokens, summed history) beside ``n`` decodes of their mean context
               (tokens attended: history + the new one); with the calibration's skew fit
               (and ``cost.skew_correction``) and the step's longest and shortest decode
               context known, LLMServingSim's correction for decodes of unequal contexts
               (``kernel_tables.skewed_attention``); a hybrid model's token groups each
               look the table up at the span they attend (a window, a chunk), less the
               share of the table's pure-prefill time at that shape that the group's mask
               skips inside the chunk (``_windowed_share``: pairs kept / the table's causal
               pairs), and its state layers add their state read + write at HBM bandwidth;
  allreduce    under TP, (2 L + 1) all-reduces of tokens x d_model (after the output and
               down projections, and the vocabulary-parallel embedding) and one gather of
               the logits (sequences x vocabulary), each ``latency + bytes x ring factor /
               bus bandwidth`` with the figures of ``groups._allreduce_fit`` (scenario,
               calibration, accelerator profile).

Invariant: pure; the attention of a run of decode steps is computed with the same numpy
call as one step's (``attention_terms``, the pricer interface of ``sim.cost.pricer``), so
a run equals its steps; tables are per layer and per GPU
(TP shards), so nothing here divides by TP.
"""

from __future__ import annotations

import numpy as np

from sim.cost.calibration import Calibration
from sim.cost.groups import FixedTerms, GroupPricer
from sim.cost.kernel_tables import TableSet, expected_active_experts, skewed_attention
from sim.errors import ConfigError
from sim.profiles.schema import AcceleratorProfile, ModelProfile
from sim.sizing.attention_work import AttentionWork, TokenGroupSpan, attention_work

GEMM_OPS = frozenset({"qkv_proj", "o_proj", "gate_up_proj", "down_proj"})


def tables_for(model: ModelProfile, tp: int, cal: Calibration | None) -> TableSet | None:
    """The calibration's tables for this model geometry and TP degree, or None."""
    if cal is None or not cal.kernel_tables:
        return None
    tables = cal.model_tables(model)
    return tables.for_tp(tp) if tables is not None else None


def require_tables(model: ModelProfile, tp: int, cal: Calibration | None) -> TableSet:
    """``tables_for`` or a one-line ConfigError saying what the calibration covers."""
    found = tables_for(model, tp, cal)
    if found is not None:
        return found
    if cal is None or not cal.kernel_tables:
        raise ConfigError("step_pricing 'kernel_tables' needs a calibration with kernel_tables "
                          "(e.g. rtx-4090-24gb-llmservingsim)", field="cost.step_pricing")  # fmt: skip
    have = "; ".join(f"{name} ({t.source_model}) at TP {', '.join(str(p) for p, _ in t.by_tp)}"
                     for name, t in cal.kernel_tables)  # fmt: skip
    raise ConfigError(
        f"calibration {cal.path or cal.device} has no kernel tables for model {model.name!r} at "
        f"TP {tp} (geometry must match); it has: {have}",
        field="cost.calibration",
    )


def _windowed_share(g: TokenGroupSpan, chunks) -> float:
    """The share of the table's prefill pairs a group's mask keeps: the table measures each
    chunk as causal attention over all of itself after its (clipped) history,
    ``c h' + c (c + 1) / 2``, while a window or chunk mask computes ``chunk_terms``'s pairs
    (gpt-oss-20b's 2,048-token first chunk, w = 128: 254,016 of 2,098,176). 1 for a group
    that attends the whole context, or when the chunks fit inside the mask."""
    if g.window_tokens is None or not chunks:
        return 1.0
    kept = table = 0
    for c, h in chunks:
        read, pairs = AttentionWork.chunk_terms(g, c, h, True)
        kept += pairs
        table += c * (read - c) + c * (c + 1) // 2
    return kept / table if table else 1.0


class TablePricer(GroupPricer):
    """Prices steps from one ``TableSet`` (see the module docstring)."""

    def __init__(self, model: ModelProfile, accelerator: AcceleratorProfile, tp: int, config,
                 calibration: Calibration):  # fmt: skip
        super().__init__(model, accelerator, tp, config, calibration)
        self.tables = require_tables(model, tp, calibration)
        self.num_experts = model.num_experts or 0
        self.top_k = model.experts_per_token or 0
        self.vocab = model.vocab_size or 0
        self.skew = self.tables.skew if config.skew_correction else None
        # a hybrid model's groups attend their own spans (None: every layer the context)
        self.attention_work = attention_work(model, tp)

    def _fixed_terms(self, n_tok: int, n_logits: int, prefill: bool) -> FixedTerms:
        t, L = self.tables, self.L
        gemm = other = emb = seq = moe = 0.0
        if n_tok > 0:
            for op, count in t.layer_ops:
                s = count * float(t.dense_s(op, n_tok))
                gemm, other = (gemm + s, other) if op in GEMM_OPS else (gemm, other + s)
            emb = sum(float(t.dense_s(op, n_tok)) for op in t.step_ops)
            if t.moe is not None and self.num_experts:
                experts = expected_active_experts(n_tok, self.num_experts, self.top_k)
                moe = self.model.moe_layers * float(t.moe.at(n_tok, experts))
        if n_logits > 0:
            seq = sum(float(t.sequence_s(op, n_logits)) for op in t.sequence_ops)
        mem, comp, flops = self._roofline_sides(n_tok)
        return FixedTerms(
            linear_s=L * gemm, linear_mem_s=mem, linear_comp_s=comp, linear_flops=flops,
            lm_head_s=seq, embedding_s=emb, elementwise_s=L * other,
            allreduce_s=self._allreduce_s(n_tok), attention_rate=self.peak, moe_s=moe,
            logits_gather_s=self._gather_s(n_logits),
        )  # fmt: skip

    def _roofline_sides(self, n_tok: int) -> tuple[float, float, float]:
        """Datasheet memory and compute sides of the weights (information only)."""
        if n_tok <= 0:
            return 0.0, 0.0, 0.0
        flops = self.whole_flops_per_token_per_gpu * n_tok
        return self.whole_weight_bytes_per_gpu / self.hbm_bw, flops / self.peak, flops

    def _allreduce_s(self, n_tok: int) -> float:
        if not self.config.allreduce or self.tp == 1 or n_tok == 0:
            return 0.0
        calls = 2 * self.L + 1
        return calls * self.allreduce_fit.call_s(n_tok * self.model.d_model * self.ab, self.tp)

    def _gather_s(self, n_logits: int) -> float:
        """vLLM gathers each rank's vocabulary slice of the logits: (p - 1) / p of the
        whole moves per rank, half an all-reduce's traffic."""
        if not self.config.allreduce or self.tp == 1 or n_logits == 0 or not self.vocab:
            return 0.0
        fit, p = self.allreduce_fit, self.tp
        return fit.latency_s + (p - 1) / p * n_logits * self.vocab * self.ab / fit.bus_bw_bytes_per_s

    # -- attention ----------------------------------------------------------------------

    def _hybrid_attention(self, work, i, kv_tokens, pairs, n_seq: int, pc: float):
        """A hybrid model's attention: each token group's layers x the per-layer table at
        the span that group attends (a sliding layer's window, a chunked layer's chunk:
        ``sim.sizing.attention_work``), a windowed group's prefill share cut to the pairs
        its mask keeps, plus the state layers' state read and write at the HBM bandwidth. No skew correction (its fit is of full-attention decodes)."""
        aw, nd = self.attention_work, work.n_decode
        decode_kv = work.decode_history_tokens + i * nd + nd
        t = 0.0 * decode_kv
        grid = self.tables.attention
        for g in aw.token_groups:
            kd = aw.decode_tokens(g, nd, decode_kv) / nd if nd else 0.0
            kp = float(sum(aw.chunk_terms(g, c, h, True)[0] - c for c, h in work.prefill_chunks))
            layer = grid.at(pc, kp, float(nd), kd)
            excess = 1.0 - _windowed_share(g, work.prefill_chunks)
            if excess > 0.0:  # the table's chunk is causal over all of itself: drop what the mask skips
                layer = np.maximum(layer - excess * grid.at(pc, kp, 0.0, 0.0), 0.0)
            t = t + g.layers * layer
        t = t + 2.0 * aw.state_bytes_per_seq_per_gpu * n_seq / self.hbm_bw
        comp = pairs * self.attn_flops_per_pair_per_gpu / self.peak
        if isinstance(kv_tokens, np.ndarray):
            return t, self._kv_bytes(kv_tokens), comp
        return float(t), float(self._kv_bytes(kv_tokens)), comp

    def _kv_bytes(self, kv_tokens):
        return kv_tokens * self.kv_bytes_per_token_per_gpu / self.hbm_bw

    def attention_terms(self, work, i, kv_tokens, pairs, n_seq: int, rate: float):
        """(seconds, memory s, compute s) for the batch's mix at step ``i`` of a run
        starting with ``work`` (see the module docstring; ``i`` 0 or an array of step
        offsets, as ``GroupPricer.attention_terms``)."""
        if not (self.config.kv_read or self.config.attention_flops):
            return 0.0 * kv_tokens, 0.0 * kv_tokens, 0.0 * kv_tokens
        pc = float(sum(c for c, _ in work.prefill_chunks))
        kp = float(sum(h for _, h in work.prefill_chunks))
        nd = work.n_decode
        if self.attention_work is not None:
            return self._hybrid_attention(work, i, kv_tokens, pairs, n_seq, pc)
        kd = (work.decode_history_tokens + i * nd + nd) / nd if nd else 0.0
        t = self.tables.attention.at(pc, kp, float(nd), kd)
        hi, lo = work.decode_max_history_tokens, work.decode_min_history_tokens
        if self.skew is not None and nd > 1 and hi is not None and lo is not None:
            t = skewed_attention(self.tables.attention, self.skew, pc, kp, float(nd), kd,
                                 hi + i + 1.0, lo + i + 1.0, t)  # fmt: skip
        comp = pairs * self.attn_flops_per_pair_per_gpu / self.peak
        if isinstance(kv_tokens, np.ndarray):
            return self.L * t, self._kv_bytes(kv_tokens), comp
        return self.L * float(t), float(self._kv_bytes(kv_tokens)), comp
