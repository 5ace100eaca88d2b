"""Attention work of a step by layer group: KV tokens read, (query, key) pairs, state bytes.

Every step pricer charges attention as ``kv_tokens x (bytes per token over all layers)``
and ``pairs x 4 L d_attn``: the figures of a model whose every layer attends the whole
context. ``AttentionWork`` turns a step's contexts into what each group really does
(docs/model.md, "Attention work by layer group"):

* ``full``, ``mla``, ``indexer``: a decode of context S reads S tokens and computes S
  pairs; a prefill chunk of c tokens over h reads h + c, pairs c h + c (c + 1) / 2
  (causal) or c (h + c) (square), as before;
* ``sliding_window`` w: a decode reads min(S, w); a chunk reads min(h, w) + c, pairs
  ``sum_{x=h+1}^{h+c} min(x, w)`` (causal) or c min(h + c, w) (square);
* ``chunked_local`` c_l: a decode at 0-based position p reads the ``p mod c_l + 1``
  tokens of its chunk; a chunk reads ``h mod c_l + c``, pairs ``F(h + c) - F(h)`` with
  ``F(n) = q c_l (c_l + 1) / 2 + r (r + 1) / 2``, ``n = q c_l + r`` (both masks);
* ``mamba``, ``linear_attention``: no KV read; each sequence of the step reads and writes
  its state (2 x state bytes per layer), and each token costs the state FLOPs of
  ``sim.sizing.compute.state_flops_per_token``.

Decodes come in aggregate (count n, summed context D): a window's sum over the decodes is
``min(D, n w)``, exact when every decode is on the same side of the window (all shorter,
or all longer), an upper bound otherwise; a chunked group's is exact for one decode and,
for several past their first chunk, ``n (c_l + 1) / 2`` (positions spread over a chunk).

``equivalent`` returns both as full-attention equivalents (tokens and pairs that, times
the pricer's all-layer constants, give the groups' bytes and FLOPs), so each pricer keeps
its arithmetic. Invariant: ``attention_work(model, tp)`` is None when every layer attends
the whole context with no state, so dense models are priced exactly as before; a step's
terms are one expression over step offsets (``sim.cost.pricer``), scalars or arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sim.lazy_numpy import numpy_on_first_use
from sim.profiles.layer_groups import StateGroup
from sim.profiles.schema import ModelProfile
from sim.sizing.compute import state_flops_per_token
from sim.sizing.groups import group_bytes

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())


@dataclass(frozen=True)
class TokenGroupSpan:
    """One token group's layers, bytes per token per layer on one rank, kind and window."""

    name: str
    kind: str
    layers: int
    bytes_per_token_per_layer_per_gpu: float
    window_tokens: int | None


def _vmin(a: Any, b: Any) -> Any:
    return np.minimum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else min(a, b)


def _chunk_prefix_pairs(n: int, c: int) -> int:
    """F(n): pairs of the first n positions under chunked local attention of chunk c."""
    q, r = divmod(n, c)
    return q * c * (c + 1) // 2 + r * (r + 1) // 2


def _window_pairs(h: int, new: int, w: int) -> int:
    """``sum_{x=h+1}^{h+new} min(x, w)``: causal pairs of a chunk under a window w."""
    lo, hi = h + 1, h + new
    below_hi = min(hi, w)  # the x <= w part: lo..below_hi
    inside = (below_hi * (below_hi + 1) - (lo - 1) * lo) // 2 if below_hi >= lo else 0
    return inside + max(0, hi - max(lo - 1, w)) * w


@dataclass(frozen=True)
class AttentionWork:
    """A hybrid model's attention work per layer group on one tensor-parallel rank."""

    token_groups: tuple[TokenGroupSpan, ...]
    num_layers: int
    kv_bytes_per_token_per_gpu: float  # every token layer: the pricers' constant
    state_bytes_per_seq_per_gpu: float  # all state layers, one sequence's state
    state_flops_per_token_per_gpu: float  # all state layers
    flops_per_pair_per_gpu: float  # 4 L d_attn / TP: the pricers' constant

    def decode_tokens(self, g: TokenGroupSpan, n: int, kv: Any) -> Any:
        """KV tokens (= pairs) one layer of ``g`` reads for ``n`` decodes of summed context ``kv``."""
        w = g.window_tokens
        if w is None or n == 0:
            return kv
        if g.kind == "sliding_window":
            return _vmin(kv, n * w)
        if n == 1:
            return (kv - 1) % w + 1
        if isinstance(kv, np.ndarray):
            return np.where(kv <= n * w, kv, n * (w + 1) / 2)
        return kv if kv <= n * w else n * (w + 1) / 2

    @staticmethod
    def chunk_terms(g: TokenGroupSpan, new: int, hist: int, causal: bool) -> tuple[int | float, int | float]:
        """(KV tokens read, pairs) of one layer of ``g`` for a chunk of ``new`` over ``hist``."""
        w = g.window_tokens
        if w is None:
            pairs = new * hist + new * (new + 1) // 2 if causal else new * (hist + new)
            return hist + new, pairs
        if g.kind == "sliding_window":
            pairs = _window_pairs(hist, new, w) if causal else new * min(hist + new, w)
            return min(hist, w) + new, pairs
        return hist % w + new, _chunk_prefix_pairs(hist + new, w) - _chunk_prefix_pairs(hist, w)

    def per_group(self, n_decode: int, decode_kv: Any, chunks, causal: bool = True) -> dict[str, tuple[Any, Any]]:
        """Per token group: (KV tokens one layer reads, pairs one layer computes)."""
        out = {}
        for g in self.token_groups:
            tok = self.decode_tokens(g, n_decode, decode_kv)
            pairs = tok
            for new, hist in chunks:
                t, p = self.chunk_terms(g, new, hist, causal)
                tok, pairs = tok + t, pairs + p
            out[g.name] = (tok, pairs)
        return out

    def equivalent(self, n_decode: int, decode_kv: Any, chunks, causal: bool = True) -> tuple[Any, Any]:
        """(KV tokens, pairs) as full-attention equivalents: times the pricers' constants
        (``kv_bytes_per_token_per_gpu``, ``flops_per_pair_per_gpu``) they give the groups'
        KV bytes read plus the states read and written, and their attention + state FLOPs."""
        n_seq = n_decode + len(chunks)
        n_tok = n_decode + sum(c for c, _ in chunks)
        kv_bytes = 2.0 * self.state_bytes_per_seq_per_gpu * n_seq
        layer_pairs = 0.0
        by_group = self.per_group(n_decode, decode_kv, chunks, causal)
        for g in self.token_groups:
            tok, pairs = by_group[g.name]
            kv_bytes = kv_bytes + g.layers * g.bytes_per_token_per_layer_per_gpu * tok
            layer_pairs = layer_pairs + g.layers * pairs
        flops = layer_pairs * (self.flops_per_pair_per_gpu / self.num_layers)
        flops = flops + self.state_flops_per_token_per_gpu * n_tok
        per_tok = self.kv_bytes_per_token_per_gpu
        return (kv_bytes / per_tok if per_tok else 0.0 * kv_bytes), flops / self.flops_per_pair_per_gpu


def attention_work(model: ModelProfile, tp: int = 1) -> AttentionWork | None:
    """The model's attention work by group, or None when every layer attends the whole
    context and none keeps a state (the pricers' all-layer arithmetic is then exact)."""
    groups = group_bytes(model, tp)
    specs = {g.name: g for g in model.kv_groups()}
    if all(g.window_tokens is None and not g.holds_state for g in groups):
        return None
    token = tuple(
        TokenGroupSpan(g.name, g.kind, g.num_layers, g.bytes_per_token_per_layer_per_gpu, g.window_tokens)
        for g in groups if not g.holds_state and g.num_layers
    )  # fmt: skip
    state_bytes = sum(g.num_layers * g.state_bytes_per_layer_per_gpu for g in groups if g.holds_state)
    state_flops = 0.0
    for g in groups:
        spec = specs[g.name]
        if isinstance(spec, StateGroup):
            state_flops += g.num_layers * state_flops_per_token(spec) / tp
    return AttentionWork(
        token_groups=token,
        num_layers=model.num_layers,
        kv_bytes_per_token_per_gpu=sum(g.layers * g.bytes_per_token_per_layer_per_gpu for g in token),
        state_bytes_per_seq_per_gpu=state_bytes,
        state_flops_per_token_per_gpu=state_flops,
        flops_per_pair_per_gpu=4 * model.num_layers * model.num_q_heads * model.head_dim / tp,
    )
