"""Measured per-layer kernel tables (vLLM's own kernels, one layer, one GPU of a TP group).

Responsibility: answer "how long does this operator of one layer take" from tables
measured on a GPU, the way LLMServingSim's profiler records them (``kind:
kernel_tables`` in a version-2 calibration, imported by
``kernels_validation/llmservingsim_import.py``):

- ``Curve``: one operator's time at increasing x (tokens of the step for the dense
  operators, scheduled sequences for the LM head and the sampler, tokens for the MoE
  expert layer at a given number of activated experts). Linear in between (the kernels
  are linear in their axis between measured points; LLMServingSim's leave-one-out puts
  linear ahead of log-space blending on every axis), the first point below the first x
  (the kernel floor), and the last segment's slope (never negative) beyond the last x.
- ``AttentionGrid``: the attention kernel of one layer for a batch of one prefill chunk
  of ``pc`` new tokens over ``kp`` cached ones beside ``nd`` decodes of ``kd`` tokens of
  context each: a complete 4-D grid, multilinear in the four axes with the same
  clamp-below / extrapolate-above rule. The measured grid has structural holes, filled
  when the grid is built (``fill_attention_holes``): with no prefill (``pc = 0``) the
  value does not depend on ``kp``, with no decode (``nd = 0``) not on ``kd``, a decode's
  context below the first measured one costs the first one, and a mixed batch with more
  decodes than measured extends the last segment. Several prefill chunks in one step
  are one launch: they are looked up as one chunk of their summed tokens over their
  summed history (the profiler's convention).
- ``SkewFit``: LLMServingSim's context-skew correction of the attention kernel. The grid
  is measured with every decode at one context; a batch whose decodes differ runs slower
  than the uniform batch at their mean (tile padding, SM imbalance), and upstream prices
  it ``t_mean + alpha (t_max - t_mean)`` (``skewed_attention``), ``t_max`` the grid at the
  longest decode's context, ``alpha`` looked up by bucket: the chunk's exact profiled
  size, the number of decodes, the skew rate ``(mean - min) / (max - min)``, the longest
  context and the chunk's history, else the pooled ``alpha_default``. No correction with
  at most one decode, equal contexts, alpha 0 or ``t_max <= t_mean``.
- ``MoeGrid``: the routed expert layer's time by tokens (rows) and activated experts
  (columns), linear in both; ``expected_active_experts`` gives the experts a step of n
  tokens activates when each picks k of E uniformly (E (1 - (1 - k/E)^n)).

Invariant: every lookup is pure numpy arithmetic that gives the same result for a scalar
and for an array of queries (the fast decode path prices runs of steps with arrays and
must equal pricing each step alone); times are seconds, never negative.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.lazy_numpy import numpy_on_first_use

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())


def _bracket(axis: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, t) per query on an increasing axis: t in [0, 1] inside, 0 below the first
    point (clamp), > 1 past the last (the last segment extended)."""
    q = np.asarray(q, dtype=np.float64)
    n = len(axis)
    if n == 1:
        z = np.zeros(q.shape, dtype=np.intp)
        return z, z, np.zeros(q.shape)
    hi = np.clip(np.searchsorted(axis, q, side="right"), 1, n - 1)
    lo = hi - 1
    t = (q - axis[lo]) / (axis[hi] - axis[lo])
    return lo, hi, np.maximum(t, 0.0)


@dataclass(frozen=True)
class Curve:
    """One operator's measured seconds ``time_s[i]`` at ``x[i]`` (increasing, > 0)."""

    x: tuple[float, ...]
    time_s: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_x", np.asarray(self.x, dtype=np.float64))
        object.__setattr__(self, "_t", np.asarray(self.time_s, dtype=np.float64))

    def at(self, q):
        """Seconds at ``q`` (scalar or array): linear inside, clamped below, the last
        segment's non-negative slope above."""
        t = self._t
        lo, hi, w = _bracket(self._x, q)
        seg = t[hi] - t[lo]  # inside the range a segment may fall (noise): follow it there
        out = t[lo] + np.minimum(w, 1.0) * seg + np.maximum(w - 1.0, 0.0) * np.maximum(seg, 0.0)
        return out if np.ndim(q) else float(out)


@dataclass(frozen=True)
class AttentionGrid:
    """Seconds of one layer's attention on a complete grid ``time_s[pc, kp, nd, kd]``."""

    prefill_chunk: tuple[int, ...]  # new prefill tokens of the step (0 = none)
    kv_prefill: tuple[int, ...]  # tokens the prefill chunk finds cached before it
    n_decode: tuple[int, ...]  # decodes in the step (0 = none)
    kv_decode: tuple[int, ...]  # context of each decode (tokens in KV)
    time_s: np.ndarray  # shape (len(pc), len(kp), len(nd), len(kd)), no NaN

    def __post_init__(self) -> None:
        axes = tuple(np.asarray(a, dtype=np.float64) for a in
                     (self.prefill_chunk, self.kv_prefill, self.n_decode, self.kv_decode))  # fmt: skip
        object.__setattr__(self, "_axes", axes)

    def at(self, pc, kp, nd, kd):
        """Seconds for the batch mix (any argument may be an array; they broadcast)."""
        pc, kp, nd, kd = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (pc, kp, nd, kd)))
        br = [_bracket(ax, q) for ax, q in zip(self._axes, (pc, kp, nd, kd), strict=True)]
        # the 2x2x2x2 block of corners around each query, then one axis at a time (last
        # first), each blend the same two-term sum for a scalar and for an array
        idx = [np.stack([lo, hi], axis=-1) for lo, hi, _ in br]
        e = (...,)
        sub = self.time_s[idx[0][e + (slice(None), None, None, None)], idx[1][e + (None, slice(None), None, None)],
                          idx[2][e + (None, None, slice(None), None)], idx[3][e + (None, None, None, slice(None))]]  # fmt: skip
        for _, _, t in reversed(br):
            w = t.reshape(t.shape + (1,) * (sub.ndim - pc.ndim - 1))
            sub = sub[..., 0] * (1.0 - w) + sub[..., 1] * w
        total = sub
        empty = (pc <= 0) & (nd <= 0)
        total = np.where(empty, 0.0, np.maximum(total, 0.0))
        return total if total.ndim else float(total)


def fill_attention_holes(pc: list[int], kp: list[int], nd: list[int], kd: list[int],
                         grid: np.ndarray) -> np.ndarray:  # fmt: skip
    """Complete a measured attention grid (NaN = not measured; see the module docstring).

    ``pc``, ``nd``, ``kp`` and ``kd`` start at 0. Raises ValueError when a hole is not of a
    kind this rule fills (the table would be ambiguous).
    """
    g = np.array(grid, dtype=np.float64)
    g[0, 0, 0, :] = 0.0  # no prefill and no decode: no attention kernel
    g[0, :, :, :] = g[0, 0:1, :, :]  # no prefill chunk: the prefill's history is irrelevant
    g[:, :, 0, :] = g[:, :, 0, 0:1]  # no decodes: their context is irrelevant
    g[0, :, 0, :] = 0.0
    if len(kd) > 1:  # a decode attends at least one token: below the first context, clamp
        g[:, :, 1:, 0] = np.where(np.isnan(g[:, :, 1:, 0]), g[:, :, 1:, 1], g[:, :, 1:, 0])
    for j in range(2, len(nd)):  # mixed batches with more decodes than measured
        missing = np.isnan(g[:, :, j, :])
        if missing.any():
            a, b = g[:, :, j - 2, :], g[:, :, j - 1, :]
            ext = b + (b - a) * (nd[j] - nd[j - 1]) / (nd[j - 1] - nd[j - 2])
            g[:, :, j, :] = np.where(missing, ext, g[:, :, j, :])
    if np.isnan(g).any():
        i = tuple(int(v[0]) for v in np.nonzero(np.isnan(g)))
        raise ValueError(
            f"attention grid has an unmeasured point no rule fills: prefill_chunk {pc[i[0]]}, "
            f"kv_prefill {kp[i[1]]}, n_decode {nd[i[2]]}, kv_decode {kd[i[3]]}"
        )
    return g


def _bucket(edges: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Bucket i holds (edges[i], edges[i + 1]] (upstream's ``_bucket_label``: ``n<=8``
    includes 8); below the first edge the first bucket, above the last the last."""
    return np.minimum(np.searchsorted(edges[1:], q, side="left"), len(edges) - 2)


@dataclass(frozen=True)
class SkewFit:
    """The skew correction's alpha by bucket, at one TP degree (see the module docstring)."""

    alpha_default: float  # the pooled fit: a batch whose bucket was not profiled
    prefill_chunk: tuple[int, ...]  # chunk sizes with buckets (matched exactly, not bracketed)
    n_decode_edges: tuple[float, ...]  # bucket edges of each axis (len = buckets + 1)
    skew_rate_edges: tuple[float, ...]
    kv_decode_max_edges: tuple[float, ...]
    kv_prefill_edges: tuple[float, ...]
    alpha: np.ndarray  # (len(pc), n, skew rate, longest context, history) buckets; NaN: none

    def __post_init__(self) -> None:
        edges = (self.n_decode_edges, self.skew_rate_edges, self.kv_decode_max_edges, self.kv_prefill_edges)
        object.__setattr__(self, "_edges", tuple(np.asarray(e, dtype=np.float64) for e in edges))
        object.__setattr__(self, "_pc", np.asarray(self.prefill_chunk, dtype=np.float64))

    def alpha_at(self, pc, nd, skew_rate, kd_max, kp):
        """alpha of each batch (arguments broadcast): its bucket's, else ``alpha_default``."""
        pc, nd, sr, kd_max, kp = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64)
                                                       for v in (pc, nd, skew_rate, kd_max, kp)))  # fmt: skip
        i = np.minimum(np.searchsorted(self._pc, pc), len(self._pc) - 1)
        found = self._pc[i] == pc
        en, es, ek, ep = self._edges
        # upstream buckets the integer count, context and history, the rate clamped to [0, 1]
        a = self.alpha[i, _bucket(en, np.floor(nd)), _bucket(es, np.clip(sr, 0.0, 1.0)),
                       _bucket(ek, np.floor(kd_max)), _bucket(ep, np.floor(kp))]  # fmt: skip
        a = np.where(found & ~np.isnan(a), a, self.alpha_default)
        return a if a.ndim else float(a)


def skewed_attention(grid: AttentionGrid, fit: SkewFit, pc, kp, nd, kd, kd_max, kd_min, t_mean):
    """One layer's attention seconds with the skew correction: ``t_mean`` (the grid at the
    decodes' mean context ``kd``) moved by alpha toward the grid at the longest ``kd_max``;
    ``t_mean`` itself where upstream applies nothing (see the module docstring). Contexts
    count the new token (history + 1, as kvsim looks the grid up; upstream uses the
    history, which moves no bucket but the longest context's at its edges, so the bucket
    is looked up at ``kd_max - 1``). Scalars and arrays alike, the same arithmetic."""
    pc, kp, nd, kd, kd_max, kd_min = np.broadcast_arrays(
        *(np.asarray(v, dtype=np.float64) for v in (pc, kp, nd, kd, kd_max, kd_min)))  # fmt: skip
    gap = kd_max - kd_min
    rate = np.where(gap > 0, (kd - kd_min) / np.where(gap > 0, gap, 1.0), 0.5)
    # upstream buckets the longest decode's history (its tokens in KV before the step)
    alpha = np.asarray(fit.alpha_at(pc, nd, rate, kd_max - 1.0, kp))
    t_max = np.asarray(grid.at(pc, kp, nd, kd_max))
    on = (nd > 1) & (kd_max > kd) & (alpha != 0.0) & (t_max > t_mean)
    out = np.where(on, np.maximum(t_mean + alpha * (t_max - t_mean), 0.0), t_mean)
    return out if out.ndim else float(out)


@dataclass(frozen=True)
class MoeGrid:
    """Seconds of one routed-expert layer: ``time_s[tokens, activated experts]``."""

    tokens: tuple[int, ...]
    activated_experts: tuple[int, ...]
    time_s: np.ndarray  # shape (len(tokens), len(activated_experts)), no NaN

    def at(self, tokens, experts):
        t_lo, t_hi, wt = _bracket(np.asarray(self.tokens, dtype=np.float64), tokens)
        e_lo, e_hi, we = _bracket(np.asarray(self.activated_experts, dtype=np.float64), experts)
        g = self.time_s
        out = ((1 - wt) * (1 - we) * g[t_lo, e_lo] + (1 - wt) * we * g[t_lo, e_hi]
               + wt * (1 - we) * g[t_hi, e_lo] + wt * we * g[t_hi, e_hi])  # fmt: skip
        out = np.maximum(out, 0.0)
        return out if np.ndim(out) else float(out)


def fill_moe_holes(tokens: list[int], experts: list[int], grid: np.ndarray) -> np.ndarray:
    """Complete a measured expert grid: a step of n tokens cannot activate more than
    n x top-k experts, so the profiler measures none there; such a point takes the
    measured point of the same token count with the most experts (never queried in
    practice: ``expected_active_experts`` stays below it)."""
    g = np.array(grid, dtype=np.float64)
    for i in range(len(tokens)):
        row = g[i]
        known = np.flatnonzero(~np.isnan(row))
        if len(known) == 0:
            raise ValueError(f"moe grid: no measurement at {tokens[i]} tokens")
        for j in np.flatnonzero(np.isnan(row)):
            row[j] = row[known[np.argmin(np.abs(known - j))]]
    return g


def expected_active_experts(n_tokens, num_experts: int, top_k: int):
    """Experts a step of ``n_tokens`` activates when each token picks ``top_k`` of
    ``num_experts`` uniformly: ``E (1 - (1 - k/E)^n)`` (at least ``top_k`` with a token)."""
    n = np.asarray(n_tokens, dtype=np.float64)
    e = num_experts * (1.0 - (1.0 - top_k / num_experts) ** n)
    out = np.where(n > 0, np.maximum(e, top_k), 0.0)
    return out if np.ndim(out) else float(out)


# -- the tables of one model geometry, per TP degree ----------------------------------------


@dataclass(frozen=True)
class TableSet:
    """Every measured kernel of one model geometry at one TP degree (seconds, per GPU)."""

    tp: int
    layer_ops: tuple[tuple[str, int], ...]  # dense operators run per layer, with their count
    step_ops: tuple[str, ...]  # dense operators run once per step (embedding, final norm)
    sequence_ops: tuple[str, ...]  # operators over the scheduled sequences (LM head, sampler)
    dense: tuple[tuple[str, Curve], ...]  # operator -> time by tokens of the step
    sequence: tuple[tuple[str, Curve], ...]  # operator -> time by sequences
    attention: AttentionGrid
    moe: MoeGrid | None = None  # the routed expert layer (MoE models)
    skew: SkewFit | None = None  # the attention's context-skew correction, where profiled

    def __post_init__(self) -> None:
        object.__setattr__(self, "_dense", dict(self.dense))
        object.__setattr__(self, "_sequence", dict(self.sequence))

    def dense_s(self, name: str, n_tokens):
        return self._dense[name].at(n_tokens)

    def sequence_s(self, name: str, n_sequences):
        return self._sequence[name].at(n_sequences)


#: model-profile fields a table's geometry is matched on (all must be equal)
GEOMETRY_FIELDS = ("num_layers", "d_model", "num_q_heads", "num_kv_heads", "head_dim",
                   "intermediate_size", "vocab_size", "num_experts", "experts_per_token")  # fmt: skip


@dataclass(frozen=True)
class ModelTables:
    """Kernel tables of one model (its geometry) on one GPU, per TP degree."""

    source_model: str  # the model the profiler ran, e.g. meta-llama/Llama-3.1-8B
    geometry: tuple[tuple[str, int], ...]  # GEOMETRY_FIELDS the tables were measured with
    by_tp: tuple[tuple[int, TableSet], ...]

    def matches(self, model) -> bool:
        """True when ``model`` (a ModelProfile) has exactly this geometry."""
        return all(getattr(model, k, None) == v for k, v in self.geometry)

    def for_tp(self, tp: int) -> TableSet | None:
        return dict(self.by_tp).get(tp)
