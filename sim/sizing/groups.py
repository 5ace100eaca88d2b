"""KV bytes of each layer group: per token (attention, MLA, indexer) or per sequence (states).

Invariant: every figure is bytes for ONE layer of the group, either on one full copy or on
one tensor-parallel rank; multiplying by a group's layers (or a stage's share of them) is
the caller's. Element sizes come from ``sim.units.dtype_bytes`` (nvfp4: 4.5 bits with its
fp8 scale per 16 values). Per rank: GQA heads split over TP and are replicated when TP
exceeds them (at least one head per rank, as vLLM); an MLA latent and an indexer key are
held whole on every rank; a state group's heads and convolution channels split over TP
(vLLM shards Mamba2 and gated-DeltaNet states by head). A token group holds
``held_tokens(S)`` tokens of a context of S: all of them (full, MLA, indexer), the last
``window`` (sliding), or at most one chunk (chunked local; the peak, reached at each chunk's
last token).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import KvsimError
from sim.profiles.layer_groups import STATE_KINDS
from sim.profiles.schema import ModelProfile
from sim.units import dtype_bytes

#: token kinds that are attention proper (the page vLLM raises for a Mamba state)
ATTENTION_KINDS = ("full", "sliding_window", "chunked_local", "mla")
#: group kinds whose every token stays in the block table (``sim.sizing.group_demand``),
#: the specs an EAGLE head or MTP layer is grouped with (``sim.sizing.speculative``)
TABLE_KINDS = ("full", "mla", "indexer")


@dataclass(frozen=True)
class GroupBytes:
    """One group's bytes per layer (token groups: per token; state groups: per sequence)."""

    name: str
    kind: str
    num_layers: int  # layers of the whole model in this group
    dtype: str  # the KV dtype, or 'conv/recurrent' dtypes of a state group
    window_tokens: int | None  # sliding window or chunk; None: every token
    bytes_per_token_per_layer: float  # one full copy; 0 for a state group
    bytes_per_token_per_layer_per_gpu: float
    state_bytes_per_layer: float  # one sequence's state; 0 for a token group
    state_bytes_per_layer_per_gpu: float

    @property
    def holds_state(self) -> bool:
        """True for a Mamba / linear-attention group (a fixed state per sequence)."""
        return self.kind in STATE_KINDS

    def held_tokens(self, tokens: int) -> int:
        """Tokens one layer of this group holds for a context of ``tokens`` (peak)."""
        if self.holds_state:
            return 0
        return tokens if self.window_tokens is None else min(tokens, self.window_tokens)

    def step_held_tokens(self, computed: int, end: int) -> int:
        """Tokens one layer holds during a step that computes ``[computed, end)`` (a
        prefill chunk), by vLLM V1's rule (``SingleTypeKVCacheManager`` frees the tokens
        ``get_num_skipped_tokens(computed)`` skips before it allocates up to ``end``): all
        of them (full, MLA, indexer), from ``computed - w + 1`` (sliding), from the chunk
        of ``computed`` (chunked local); 0 for a state group. A decode step
        (``computed = end - 1``) of a sliding layer is ``held_tokens(end)``."""
        if self.holds_state:
            return 0
        w = self.window_tokens
        if w is None:
            return end
        if self.kind == "chunked_local":
            return end - computed // w * w
        return end - max(0, computed - w + 1)

    def shared_tokens(self, tokens: int, prefix: int) -> int:
        """Of the ``held_tokens(tokens)`` one layer holds, those among the first ``prefix``
        of the context (the same in every trajectory that shares that prefix, so a prefix
        cache stores them once): the held tokens are the last ones, so a window past the
        prefix shares nothing; 0 for a state group (each sequence's state is its own)."""
        if self.holds_state:
            return 0
        return max(0, min(prefix, tokens) - (tokens - self.held_tokens(tokens)))

    def bytes_per_layer(self, tokens: int, per_gpu: bool = False) -> float:
        """One layer's bytes for one sequence of ``tokens`` (whole copy, or one rank)."""
        if self.holds_state:
            return self.state_bytes_per_layer_per_gpu if per_gpu else self.state_bytes_per_layer
        per = self.bytes_per_token_per_layer_per_gpu if per_gpu else self.bytes_per_token_per_layer
        return self.held_tokens(tokens) * per


def _heads_per_rank(model: ModelProfile, heads: int, tp: int, what: str) -> int:
    """Heads one TP rank holds: heads/TP, at least 1 (replicated when TP > heads)."""
    if tp < 1:
        raise KvsimError(f"tp must be >= 1, got {tp}")
    if model.num_q_heads % tp:
        raise KvsimError(f"tp={tp} must divide the {model.num_q_heads} query heads of {model.name}")
    if heads % tp and tp % heads:
        raise KvsimError(f"tp={tp} and the {heads} {what} of {model.name} must divide one another")
    return max(1, heads // tp)


def _token_group(model: ModelProfile, g, tp: int, kv_dtype: str | None) -> tuple[str, float, float]:
    """(dtype, bytes per token per layer, the same per rank) of a token group."""
    dtype = g.kv_dtype or kv_dtype or model.kv_dtype
    b = dtype_bytes(dtype)
    if g.kind in ("full", "sliding_window", "chunked_local"):
        heads = _heads_per_rank(model, g.num_kv_heads, tp, f"KV heads of group {g.name!r}")
        return dtype, g.elems_per_token() * b, 2 * heads * g.head_dim * b
    _heads_per_rank(model, model.num_q_heads, tp, "query heads")  # validates tp only
    scale = getattr(g, "scale_bytes_per_token", 0.0)
    whole = g.elems_per_token() * b + scale
    return dtype, whole, whole  # MLA latent and indexer key: whole on every rank


def _state_group(model: ModelProfile, g, tp: int) -> tuple[str, float, float]:
    """(dtypes, state bytes per layer, the same per rank) of a state group."""
    _heads_per_rank(model, g.state_heads, tp, f"state heads of group {g.name!r}")
    if g.state_heads % tp or g.conv_channels % tp:
        raise KvsimError(
            f"tp={tp} must divide the {g.state_heads} state heads and {g.conv_channels} "
            f"convolution channels of group {g.name!r} of {model.name}"
        )
    conv = g.conv_elems() * dtype_bytes(g.conv_dtype)
    rec = g.recurrent_elems() * dtype_bytes(g.state_dtype)
    return f"{g.conv_dtype}/{g.state_dtype}", conv + rec, (conv + rec) / tp


def group_bytes(model: ModelProfile, tp: int = 1, kv_dtype: str | None = None) -> list[GroupBytes]:
    """Every layer group's bytes per layer, in the profile's order.

    ``kv_dtype`` (a scenario's or ``--kv-dtype``) applies to the token groups that do not
    pin their own dtype; state groups keep theirs.
    """
    counts: dict[str, int] = {}
    for names in model.layer_group_names():
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    out = []
    for g in model.kv_groups():
        if g.kind in STATE_KINDS:
            dtype, whole, gpu = _state_group(model, g, tp)
            token, token_gpu, state, state_gpu = 0.0, 0.0, whole, gpu
        else:
            dtype, token, token_gpu = _token_group(model, g, tp, kv_dtype)
            state, state_gpu = 0.0, 0.0
        out.append(
            GroupBytes(
                name=g.name,
                kind=g.kind,
                num_layers=counts.get(g.name, 0),
                dtype=dtype,
                window_tokens=getattr(g, "window_tokens", None),
                bytes_per_token_per_layer=token,
                bytes_per_token_per_layer_per_gpu=token_gpu,
                state_bytes_per_layer=state,
                state_bytes_per_layer_per_gpu=state_gpu,
            )
        )
    return out
