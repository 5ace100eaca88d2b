"""The engine's per-group KV demand: how many blocks each layer group holds for a sequence.

vLLM's hybrid KV cache manager keeps every layer group in one pool of pages of one size
and gives each group its own block table (``vllm/v1/core/single_type_kv_cache_manager.py``).
The engine models that with one block table (the groups that keep every token: ``full``,
``mla``, ``indexer``; its blocks carry prefix-cache identity, copy-on-write and pauses)
and counts the other groups' blocks arithmetically, one demand function per group kind
(``DEMANDS``), of the sequence's tokens S and the block size B:

* ``sliding_window`` (window w): the blocks covering the last w tokens,
  ``ceil(S/B) - floor(max(0, S - w) / B)``; blocks that fall out of the window are freed
  (vLLM's ``SlidingWindowManager.remove_skipped_blocks``: ``num_computed - w + 1``
  tokens skipped). At most ``ceil(w/B) + 1`` blocks.
* ``chunked_local`` (chunk c): the blocks of the current chunk,
  ``ceil(S/B) - floor(c * floor((S-1)/c) / B)`` (``ChunkedLocalAttentionManager``).

Those are a decode step's (``DEMANDS``). A step that computes the tokens ``[n, e)`` (a
prefill chunk) holds more in these two kinds (``SPANS``, ``KVGroups.step_side_blocks``):
vLLM V1's ``KVCacheManager.allocate_slots`` calls ``remove_skipped_blocks(n)`` (freeing
the blocks wholly before ``get_num_skipped_tokens(n)``: ``n - w + 1``, or ``c * floor(n /
c)``) before it allocates up to ``e``, so ``ceil(e/B) - floor(skipped(n) / B)`` blocks, ``w
- 1`` tokens plus the chunk (``vllm/v1/core/single_type_kv_cache_manager.py``); the
decode rule is the step ``n = S - 1``, ``e = S``.
* ``mamba`` / ``linear_attention``: one state per running sequence, whatever S
  (``MambaManager`` without prefix caching).

With Mamba prefix caching in vLLM's ``all`` mode (``with_saved_states``) a state group
keeps a state at every block boundary, in a block of its own at the same block-table
position (``MambaManager`` allocates ``cdiv(S, B)`` state blocks, the last one holding the
running state, and caches the full ones under the block's hash). The engine then carries
those states on the block table: each table block also holds the states of every state
layer at its end (``table_bytes_per_token`` grows by the states' pages ``/ B``), so they are
cached, shared and evicted with the table's blocks, and the state groups leave ``side``.
Each saved state is charged as the page vLLM gives it, padded to the attention page.

Layer counts are vLLM's padded ones (``sim.sizing.layer_padding``: gemma-3-27b's 52 sliding
layers hold blocks as 60), the same counts ``kvsim plan`` uses, so a run's peak equals plan.
An EAGLE head or MTP layer joins the target's table specs before vLLM picks the group size
(``draft_layers``; gpt-oss-20b + EAGLE pads its sliding layers 12 -> 13), as ``kvsim plan
--speculative-method`` counts it too (``sim.sizing.speculative.drafter_layer_padding``).

Invariant: figures are for the engine instance (per-GPU bytes of the most loaded pipeline
stage times the GPUs, as ``Resolved.kv_bytes_per_token``); a model whose groups all keep
every token has no side group, so its allocators behave exactly as before groups existed;
``side_blocks`` is whole blocks of the table's size (B x ``table_bytes_per_token``) and
never less than the exact side bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from sim.errors import KvsimError
from sim.profiles.schema import ModelProfile
from sim.sizing.groups import TABLE_KINDS, group_bytes
from sim.sizing.kv import _stage_counts
from sim.sizing.speculative import drafter_layer_padding

__all__ = ["TABLE_KINDS", "GroupDemand", "KVGroups", "kv_groups", "with_drafter", "with_saved_states"]


def _sliding_skipped(computed: int, window: int) -> int:
    """vLLM's ``SlidingWindowManager.get_num_skipped_tokens``: tokens before the window of
    the next token to compute, ``max(0, computed - w + 1)``."""
    return max(0, computed - window + 1)


def _chunked_skipped(computed: int, chunk: int) -> int:
    """vLLM's ``ChunkedLocalAttentionManager.get_num_skipped_tokens``: the tokens before
    the chunk of the next token to compute, ``c * floor(computed / c)``."""
    return computed // chunk * chunk


def _sliding_span(computed: int, end: int, block_size: int, window: int) -> int:
    """Blocks one sliding layer holds during a step that computes tokens ``[computed,
    end)``: every block from the first that holds an unskipped token to ``end``."""
    if end <= 0:
        return 0
    return -(-end // block_size) - _sliding_skipped(computed, window) // block_size


def _chunked_span(computed: int, end: int, block_size: int, chunk: int) -> int:
    """The same for a chunked-local layer: the current chunk's blocks up to ``end``."""
    if end <= 0:
        return 0
    return -(-end // block_size) - _chunked_skipped(computed, chunk) // block_size


def _sliding_blocks(tokens: int, block_size: int, window: int) -> int:
    return _sliding_span(tokens - 1, tokens, block_size, window)


def _chunked_blocks(tokens: int, block_size: int, chunk: int) -> int:
    return _chunked_span(tokens - 1, tokens, block_size, chunk)


#: group kind -> blocks of B tokens one layer of it holds for a sequence of S tokens
#: (state kinds hold a state, not blocks: 0 here, ``state_bytes`` instead)
DEMANDS: dict[str, Callable[[int, int, int], int]] = {
    "sliding_window": _sliding_blocks,
    "chunked_local": _chunked_blocks,
    "mamba": lambda tokens, block_size, window: 0,
    "linear_attention": lambda tokens, block_size, window: 0,
}

#: group kind -> blocks of B tokens one layer of it holds during a step that computes the
#: tokens ``[computed, end)`` (vLLM V1: ``remove_skipped_blocks(computed)`` then
#: ``allocate_new_blocks(end)``); ``DEMANDS`` is the decode step, ``computed = S - 1``.
#: Only the kinds whose blocks depend on the step (the others: ``DEMANDS`` of ``end``)
SPANS: dict[str, Callable[[int, int, int, int], int]] = {
    "sliding_window": _sliding_span,
    "chunked_local": _chunked_span,
}


@dataclass(frozen=True)
class GroupDemand:
    """One group outside the block table: its bytes per token or per sequence (all its
    layers, the engine instance)."""

    name: str
    kind: str
    bytes_per_token: float  # 0 for a state group
    window_tokens: int  # window or chunk; 0 for a state group
    state_bytes: float  # one sequence's state; 0 for a token group
    #: bytes per token of the real (unpadded) layers, what an allocator that does not
    #: count groups charges (F1); None: the same as ``bytes_per_token`` (no padding)
    real_bytes_per_token: float | None = None

    @property
    def unpadded_bytes_per_token(self) -> float:
        """``bytes_per_token`` without vLLM's padding layers (``sim.sizing.layer_padding``)."""
        return self.bytes_per_token if self.real_bytes_per_token is None else self.real_bytes_per_token
    #: the pages one sequence's state takes: its layers x GPUs (0 for a token group)
    state_pages: int = 0
    #: one sequence's state over the real (unpadded) layers; None: ``state_bytes``
    real_state_bytes: float | None = None

    def held_blocks(self, tokens: int, block_size: int) -> int:
        """Blocks of ``block_size`` tokens one layer of this group holds for ``tokens``."""
        return DEMANDS[self.kind](tokens, block_size, self.window_tokens)

    def step_blocks(self, computed: int, end: int, block_size: int) -> int:
        """Blocks one layer holds during a step that computes ``[computed, end)`` (a
        prefill chunk; a decode step is ``held_blocks(end)``)."""
        span = SPANS.get(self.kind)
        if span is None:
            return DEMANDS[self.kind](end, block_size, self.window_tokens)
        return span(computed, end, block_size, self.window_tokens)

    def step_bytes(self, computed: int, end: int, block_size: int) -> float:
        """Bytes this group holds during that step (whole blocks, or the state)."""
        if end <= 0:
            return 0.0
        if self.state_bytes:
            return self.state_bytes
        return self.step_blocks(computed, end, block_size) * block_size * self.bytes_per_token

    def useful_bytes(self, tokens: int, since: int = 0) -> float:
        """Token states this group really holds for a sequence of ``tokens``, written at or
        after token ``since`` (a fork's child counts only what it wrote itself): the tokens
        in its window (``min(S, w)``) or current chunk (from ``c * floor((S-1)/c)``) times
        the real layers' bytes per token, or the real layers' state once the sequence wrote
        after ``since`` (a state-space layer's state is real state). vLLM's padding layers
        and the unfilled slots of whole blocks are not token states (``held_bytes`` less
        this is waste)."""
        return self.useful_step_bytes(tokens - 1, tokens, since)

    def useful_step_bytes(self, computed: int, end: int, since: int = 0) -> float:
        """``useful_bytes`` during a step that computes ``[computed, end)`` (a prefill
        chunk): the tokens from the first one the step keeps (``computed - w + 1``, or the
        chunk of ``computed``) to ``end``; a decode step is ``useful_bytes(end)``."""
        if end <= since:
            return 0.0
        if self.state_bytes:
            return self.state_bytes if self.real_state_bytes is None else self.real_state_bytes
        w = self.window_tokens
        if self.kind == "sliding_window":
            first = _sliding_skipped(computed, w)
        elif self.kind == "chunked_local":
            first = _chunked_skipped(computed, w)
        else:  # a kind without a token rule here holds no states we can name
            return 0.0
        return (end - max(first, since, 0)) * self.unpadded_bytes_per_token

    def held_bytes(self, tokens: int, block_size: int) -> float:
        """Bytes this group holds for a sequence of ``tokens`` (whole blocks, or the state)."""
        if tokens <= 0:
            return 0.0
        if self.state_bytes:
            return self.state_bytes
        return self.held_blocks(tokens, block_size) * block_size * self.bytes_per_token


@dataclass(frozen=True)
class KVGroups:
    """The block table's bytes per token and the groups counted beside it."""

    table_bytes_per_token: float
    side: tuple[GroupDemand, ...]
    #: every token group's bytes per token, windows ignored (F1; what a kind that does not
    #: count groups charges per token)
    all_bytes_per_token: float = 0.0
    #: the groups whose every token is in the block table, with their bytes per token
    #: (they sum to ``table_bytes_per_token`` less a speculative drafter's, which
    #: ``with_drafter`` adds unnamed); empty when built by hand
    table: tuple[GroupDemand, ...] = ()

    @property
    def hybrid(self) -> bool:
        """True when some group is counted beside the block table."""
        return bool(self.side)

    def side_bytes(self, tokens: int, block_size: int) -> float:
        """Bytes the side groups hold for one sequence of ``tokens``."""
        return sum(g.held_bytes(tokens, block_size) for g in self.side)

    def useful_side_bytes(self, tokens: int, since: int = 0) -> float:
        """Token states the side groups really hold for one sequence of ``tokens``, written
        at or after token ``since`` (``GroupDemand.useful_bytes``; memory.parquet's
        ``useful_bytes`` adds them to the block table's): never more than ``side_bytes``."""
        return sum(g.useful_bytes(tokens, since) for g in self.side)

    def useful_step_side_bytes(self, computed: int, end: int, since: int = 0) -> float:
        """``useful_side_bytes`` during a step that computes ``[computed, end)``."""
        return sum(g.useful_step_bytes(computed, end, since) for g in self.side)

    def side_blocks(self, tokens: int, block_size: int) -> int:
        """The side bytes in whole table blocks (``block_size x table_bytes_per_token``)."""
        if not self.side or tokens <= 0:
            return 0
        return math.ceil(self.side_bytes(tokens, block_size) /
                         (block_size * self.table_bytes_per_token))  # fmt: skip

    @property
    def steps_matter(self) -> bool:
        """True when some side group's blocks depend on the step (a sliding window or a
        chunk: a prefill chunk holds more than the window, ``SPANS``)."""
        return any(g.kind in SPANS for g in self.side)

    def step_side_bytes(self, computed: int, end: int, block_size: int) -> float:
        """Bytes the side groups hold for one sequence during a step that computes the
        tokens ``[computed, end)`` (``GroupDemand.step_bytes``)."""
        return sum(g.step_bytes(computed, end, block_size) for g in self.side)

    def step_side_blocks(self, computed: int, end: int, block_size: int) -> int:
        """``step_side_bytes`` in whole table blocks (as ``side_blocks``);
        ``step_side_blocks(S - 1, S) == side_blocks(S)``."""
        if not self.side or end <= 0:
            return 0
        return math.ceil(self.step_side_bytes(computed, end, block_size) /
                         (block_size * self.table_bytes_per_token))  # fmt: skip

    def by_group(self, tokens: int, block_size: int) -> dict[str, float]:
        """Bytes of each side group for one sequence of ``tokens`` (group name -> bytes)."""
        return {g.name: g.held_bytes(tokens, block_size) for g in self.side}


def kv_groups(
    model: ModelProfile, tp: int = 1, pp: int = 1, kv_dtype: str | None = None, num_gpus: int = 1,
    draft_layers: int = 0,
) -> KVGroups:
    """The engine's view of ``model``'s groups at ``tp x pp`` (``num_gpus`` GPUs): the most
    loaded stage's per-GPU bytes times ``num_gpus``; KvsimError if no layer keeps every
    token (the block table needs one). ``draft_layers``: a speculative drafter's layers
    that vLLM groups with the target's table specs (``sim.sizing.speculative.
    drafter_layer_padding``: the target's padded counts once they joined; pp 1 only,
    as speculative decoding is)."""
    groups = group_bytes(model, tp, kv_dtype)
    stages = _stage_counts(model, pp, padded=True)
    if draft_layers and pp == 1:
        stages = [drafter_layer_padding(model, draft_layers).padded_layers]
    heaviest = max(stages, key=lambda c: sum(
        c.get(g.name, 0) * g.bytes_per_token_per_layer_per_gpu for g in groups))  # fmt: skip
    table = sum(
        heaviest.get(g.name, 0) * g.bytes_per_token_per_layer_per_gpu
        for g in groups
        if g.kind in TABLE_KINDS
    )
    real = _stage_counts(model, pp)[stages.index(heaviest)]  # F1 counts no padding
    side, in_table = [], []
    for g in groups:
        n = heaviest.get(g.name, 0)
        unpadded = real.get(g.name, 0) * g.bytes_per_token_per_layer_per_gpu * num_gpus
        if g.kind in TABLE_KINDS and n:
            in_table.append(GroupDemand(g.name, g.kind, n * g.bytes_per_token_per_layer_per_gpu
                                        * num_gpus, 0, 0.0, unpadded))  # fmt: skip
        if g.kind in TABLE_KINDS or n == 0:
            continue
        side.append(GroupDemand(
            name=g.name, kind=g.kind,
            bytes_per_token=n * g.bytes_per_token_per_layer_per_gpu * num_gpus,
            window_tokens=g.window_tokens or 0,
            state_bytes=n * g.state_bytes_per_layer_per_gpu * num_gpus,
            real_bytes_per_token=unpadded,
            state_pages=n * num_gpus if g.holds_state else 0,
            real_state_bytes=real.get(g.name, 0) * g.state_bytes_per_layer_per_gpu * num_gpus,
        ))  # fmt: skip
    if side and table <= 0:
        raise KvsimError(
            f"{model.name}: the engine needs at least one full-attention or MLA layer (every "
            "group here drops tokens or keeps a state)"
        )
    every = sum(real.get(g.name, 0) * g.bytes_per_token_per_layer_per_gpu for g in groups)
    return KVGroups(table * num_gpus, tuple(side), every * num_gpus, tuple(in_table))


def with_saved_states(
    groups: KVGroups, block_size: int, state_page_bytes: float | None = None
) -> KVGroups:
    """``groups`` as the engine holds them when every block boundary keeps a saved state
    (vLLM's ``mamba_cache_mode: all``): the state groups ride on the block table (``B``
    tokens of a table block also pay the states of every state layer at its end, the last
    block's being the running state) and leave ``side``; a model without state groups is
    returned unchanged. ``state_page_bytes``: the page one layer's saved state takes on
    one GPU, padded to the attention page as vLLM pads it (``MambaSpec.page_size_bytes``
    returns ``page_size_padded``; ``sim.sizing.hybrid_pages``); None: the exact state."""
    saved = saved_state_bytes_per_token(groups, block_size, state_page_bytes)
    if not saved:
        return groups
    # the state groups join the table's groups, at their saved states' bytes per token,
    # so that the table's groups still sum to its bytes per token (the run's KV by group)
    # (no padding layers to take off: each saved boundary is what the allocator charges)
    riding = tuple(replace(g, bytes_per_token=_saved_bytes(g, state_page_bytes) / block_size,
                           real_bytes_per_token=None)
                   for g in groups.side if g.state_bytes)  # fmt: skip
    return KVGroups(
        groups.table_bytes_per_token + saved,
        tuple(g for g in groups.side if not g.state_bytes),
        groups.all_bytes_per_token,
        groups.table + riding,
    )


def with_drafter(groups: KVGroups, draft_bytes_per_token: float) -> KVGroups:
    """``groups`` as the engine holds them with a speculative drafter's KV (an EAGLE head,
    an MTP layer or a draft model; ``draft_bytes_per_token``, the engine instance): vLLM
    keeps the drafter's layers in the same pool at the same block-table positions, every
    token, so the drafter rides on the block table (``table_bytes_per_token`` grows by it)
    and on the every-layer figure (``all_bytes_per_token``, what a kind that does not
    count groups charges). ``table`` names no drafter group: what the table's groups do
    not explain of its bytes per token is the drafter's (``sim.sizing.group_split``'s
    ``draft``). 0: ``groups`` unchanged."""
    if not draft_bytes_per_token:
        return groups
    return replace(groups, table_bytes_per_token=groups.table_bytes_per_token + draft_bytes_per_token,
                   all_bytes_per_token=groups.all_bytes_per_token + draft_bytes_per_token)  # fmt: skip


def _saved_bytes(g: GroupDemand, state_page_bytes: float | None) -> float:
    """One saved boundary of group ``g``: its pages padded, or its exact state."""
    return g.state_bytes if state_page_bytes is None else g.state_pages * state_page_bytes


def saved_state_bytes_per_token(
    groups: KVGroups, block_size: int, state_page_bytes: float | None = None
) -> float:
    """What ``with_saved_states`` adds to a token of the block table (0: no state group)."""
    return sum(_saved_bytes(g, state_page_bytes) for g in groups.side if g.state_bytes) / block_size
