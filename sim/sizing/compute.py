"""Compute and pause economics: F21, F23, F29-F33.

``model_prefill_flops`` is F23 by layer group (a hybrid model's recompute, F30): the
linear term ``2 N S`` is unchanged, and each layer's attention term follows what it
attends, in F23's square convention (``4 d_model`` per query-key pair, every query over
every key in its span):

* ``full``, ``mla``: ``4 d_model S^2`` (F23's per-layer term);
* ``sliding_window`` (w): ``4 d_model S min(S, w)``: each query over at most w keys;
* ``chunked_local`` (c): ``4 d_model (q c^2 + r^2)``, ``S = q c + r``: within its chunk;
* ``mamba``, ``linear_attention``: linear in S, ``S (4 H P N + 2 k C)``: per token a state
  update and a read-out, each a multiply-add over the ``H x P x N`` recurrent state, and
  the causal convolution's ``k`` taps over its ``C`` channels;
* a block with no cache (``none``) and an indexer beside a layer add nothing (F23 has
  no indexer term).

A model whose every layer is full attention gets F23 exactly (the same integers).

``mask="causal"`` counts the (query, key) pairs a causal kernel computes instead of F23's
square, as the engine's step pricers do by default (``cost.attention_mask``, rule 3.10
item 3, F26's mask): query x attends keys 1..x, so a full or MLA layer adds
``4 d_model S (S + 1) / 2``, a sliding-window layer ``4 d_model sum_{x=1..S} min(x, w)``,
a chunked-local layer ``4 d_model (q c (c + 1) / 2 + r (r + 1) / 2)``; state layers are
linear either way. ``mask="square"`` (the default here, F23 as the chapter states it) is
the square above.

Invariant: FLOPs, seconds, bytes and bytes/s in; no hidden efficiencies (an MFU or a
sustained rate is always an explicit argument).
"""

from __future__ import annotations

import math

from sim.errors import KvsimError
from sim.profiles.layer_groups import AttentionGroup, LayerGroup, StateGroup
from sim.profiles.schema import ModelProfile


def ridge_point(peak_flops_per_s: float, mem_bw_bytes_per_s: float) -> float:
    """F21: ``I* = T_peak / B_mem`` in FLOP per byte."""
    return peak_flops_per_s / mem_bw_bytes_per_s


def prefill_flops(
    params: float, n_layers: int, d_model: int, tokens: int, attention: bool = True
) -> float:
    """F23: ``2*N*S + 4*L*d_model*S^2`` (the attention term only when ``attention``)."""
    linear = 2 * params * tokens
    return linear + (4 * n_layers * d_model * tokens**2 if attention else 0)


def layer_group_counts(model: ModelProfile) -> tuple[tuple[int, LayerGroup], ...]:
    """(layers, group) for each layer group of ``model``, in the order of its layers: what
    F23's attention term sums over. Independent of the tokens: a caller that prices many
    prefills of one model builds it once (reading the model's groups is the slow part)."""
    groups = {g.name: g for g in model.kv_groups()}
    per_group: dict[str, int] = {}
    for names in model.layer_group_names():
        if names:
            per_group[names[0]] = per_group.get(names[0], 0) + 1
    return tuple((layers, groups[name]) for name, layers in per_group.items())


#: how a prefill's attention pairs are counted: ``square`` (F23) or ``causal`` (a kernel's)
ATTENTION_MASKS: tuple[str, ...] = ("causal", "square")


def attention_flops_by_layer_group(
    model: ModelProfile,
    tokens: int,
    counts: tuple[tuple[int, LayerGroup], ...] | None = None,
    mask: str = "square",
) -> int:
    """F23's attention term of a prefill of ``tokens`` by layer group (module docstring):
    the sum over the model's layers of what each layer's attention or state computes;
    ``counts`` is ``layer_group_counts(model)`` when the caller kept it; ``mask``: one of
    ``ATTENTION_MASKS``."""
    if mask not in ATTENTION_MASKS:
        raise KvsimError(f"attention mask must be one of {', '.join(ATTENTION_MASKS)}, got {mask!r}")
    s, d = int(tokens), model.d_model
    if counts is None:
        counts = layer_group_counts(model)
    layer = _layer_flops if mask == "square" else _causal_layer_flops
    return sum(layers * layer(g, s, d) for layers, g in counts)


def state_flops_per_token(g: StateGroup) -> int:
    """One state layer's FLOPs per token: ``4 H P N + 2 k C`` (module docstring)."""
    return 4 * g.recurrent_elems() + 2 * g.conv_kernel * g.conv_channels


def _layer_flops(g: LayerGroup, s: int, d: int) -> int:
    """One layer's attention (or state) FLOPs of a prefill of ``s`` tokens."""
    if isinstance(g, StateGroup):
        return s * state_flops_per_token(g)
    window = g.window_tokens if isinstance(g, AttentionGroup) else None
    if window is None:  # full attention, MLA
        return 4 * d * s * s
    if g.kind == "sliding_window":
        return 4 * d * s * min(s, window)
    q, r = divmod(s, window)  # chunked local: within its chunk
    return 4 * d * (q * window**2 + r * r)


def _causal_layer_flops(g: LayerGroup, s: int, d: int) -> int:
    """One layer's attention (or state) FLOPs of a prefill of ``s`` tokens under the
    causal mask: query x (1-based) over keys 1..x, within its window or chunk."""
    if isinstance(g, StateGroup):
        return s * state_flops_per_token(g)
    window = g.window_tokens if isinstance(g, AttentionGroup) else None
    if window is None:  # full attention, MLA: 1 + 2 + ... + s
        return 4 * d * (s * (s + 1) // 2)
    if g.kind == "sliding_window":  # min(x, w) keys: the triangle up to w, then w each
        below = min(s, window)
        return 4 * d * (below * (below + 1) // 2 + (s - below) * window)
    q, r = divmod(s, window)  # chunked local: a triangle per chunk
    return 4 * d * (q * (window * (window + 1) // 2) + r * (r + 1) // 2)


def model_prefill_flops(
    model: ModelProfile,
    tokens: int,
    params: float | None = None,
    attention: bool = True,
    counts: tuple[tuple[int, LayerGroup], ...] | None = None,
    mask: str = "square",
) -> float:
    """F23 for ``model`` by layer group: ``2 N S`` plus, when ``attention``, each layer's
    own attention term (``attention_flops_by_layer_group``, with ``counts`` if kept, the
    pairs counted under ``mask``); N is ``params`` or the model's active parameters. Equal
    to ``prefill_flops`` for a model of full layers and the square mask."""
    n = model.active_params if params is None else params
    if not attention:
        return prefill_flops(n, model.num_layers, model.d_model, tokens, False)
    return 2 * n * tokens + attention_flops_by_layer_group(model, tokens, counts, mask)


def prefill_time_s(flops: float, mfu: float, peak_flops_per_s: float) -> float:
    """F23: ``T = FLOPs / (MFU * peak)``."""
    if not 0 < mfu <= 1:
        raise KvsimError(f"mfu must be in (0, 1], got {mfu}")
    return flops / (mfu * peak_flops_per_s)


def hold_cost_byte_s(kv_bytes: float, wait_s: float) -> float:
    """F29: ``C_hold = M_KV * T_wait`` in byte-seconds."""
    return kv_bytes * wait_s


def recompute_time_s(
    params: float, tokens: int, prefill_flops_per_s: float, n_layers: int = 0, d_model: int = 0
) -> float:
    """F30: ``2*P*S / R_prefill``; the attention term is added when L and d_model are given."""
    flops = prefill_flops(params, n_layers, d_model, tokens, attention=bool(n_layers and d_model))
    return flops / prefill_flops_per_s


def reload_time_s(kv_bytes: float, link_bw_bytes_per_s: float) -> float:
    """F30: ``T_reload = M_KV / B_link`` (one direction)."""
    return kv_bytes / link_bw_bytes_per_s


def reload_over_recompute(
    kv_bytes_per_token: float, params: float, prefill_flops_per_s: float, link_bw_bytes_per_s: float
) -> float:
    """F31: ``(m_token * R_prefill) / (2 * P * B_link)``; < 1 means reload wins."""
    return kv_bytes_per_token * prefill_flops_per_s / (2 * params * link_bw_bytes_per_s)


def offload_round_trip_s(kv_bytes: float, link_bw_bytes_per_s: float) -> float:
    """F32: ``2 * M_KV / B_link``."""
    return 2 * kv_bytes / link_bw_bytes_per_s


def hbm_free_window_s(wait_s: float, kv_bytes: float, link_bw_bytes_per_s: float) -> float:
    """F32 (corrected form): HBM is free for ``T_wait - T_egress - T_ingress`` (>= 0)."""
    return max(0.0, wait_s - offload_round_trip_s(kv_bytes, link_bw_bytes_per_s))


def offload_feasible(wait_s: float, kv_bytes: float, link_bw_bytes_per_s: float) -> bool:
    """F32: offload only pays when the wait exceeds the round trip."""
    return wait_s > offload_round_trip_s(kv_bytes, link_bw_bytes_per_s)


def break_even_wait_s(
    kv_bytes: float, link_bw_bytes_per_s: float, mu_ratio: float = math.inf, stall_s: float = 0.0
) -> float:
    """F33: ``T* = RT * mu_HBM / (mu_HBM - mu_DRAM) + Delta_T_stall``.

    ``mu_ratio`` is mu_HBM / mu_DRAM (> 1); infinite means host memory is free, T* = RT.
    """
    if mu_ratio <= 1:
        raise KvsimError(f"mu_ratio (mu_HBM/mu_DRAM) must exceed 1, got {mu_ratio}")
    factor = 1.0 if math.isinf(mu_ratio) else mu_ratio / (mu_ratio - 1)
    return offload_round_trip_s(kv_bytes, link_bw_bytes_per_s) * factor + stall_s
