"""The hybrid prefix-hit rule: the longest prefix every layer group can serve (vLLM's).

vLLM's ``HybridKVCacheCoordinator.find_longest_cache_hit`` (``vllm/v1/core/
kv_cache_coordinator.py``) asks each group's manager (``single_type_kv_cache_manager.py``)
for its longest hit no longer than the current one, and repeats until no group lowers it:

* ``full`` / ``mla`` / ``indexer`` (``FullAttentionManager``): cached blocks from the left,
  up to the first block that is not cached;
* ``sliding_window`` w (``SlidingWindowManager``): scanning from the right, the first run of
  ``ceil((w - 1) / B)`` contiguous cached blocks ending at the hit point (the blocks before
  them are out of every later token's window and need not be cached); a run that reaches
  block 0 serves too;
* ``chunked_local`` c (``ChunkedLocalAttentionManager``): the blocks before the chunk of
  the longest candidate hit are served without a cache (never attended again); from that
  chunk's first block on, cached blocks from the left;
* ``mamba`` / ``linear_attention`` (``MambaManager``): a saved state at the hit point's block
  boundary; scanning from the right, the last boundary with one. Without Mamba prefix
  caching (vLLM's ``mamba_cache_mode`` ``none``) no state is saved, so a state-space model
  gets no prefix hit at all; with ``all`` a state is saved at every block boundary
  (``MambaManager`` caches each full state block under its block's hash), so the state
  groups serve wherever the block table does. ``align`` (a state only where a scheduler
  step ends on a block boundary) is refused, not modelled (``mamba_cache_mode_problem``);
  kvsim's ``auto`` settles the mode as vLLM does (``settle_mamba_cache_mode``).

Invariant: a pure function of its inputs; the hit is whole blocks, no longer than any
group's own answer and than ``max_blocks``; ``limited_by`` names the group that last lowered
it (full-attention groups are asked first, so a plain miss names one of them), None when
every group serves ``max_blocks``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.errors import KvsimError

FULL_KINDS = ("full", "mla", "indexer")
STATE_KINDS = ("mamba", "linear_attention")
#: vLLM's ``--mamba-cache-mode`` choices (``MambaCacheMode``, ``vllm/config/cache.py``),
#: after kvsim's ``auto``: the mode vLLM settles on from the prefix-cache flag
MAMBA_CACHE_MODES = ("auto", "none", "all", "align")
#: where vLLM settles the mode from the flags (cited in the refusals)
VLLM_MODE_SOURCE = "vllm/model_executor/models/config.py MambaModelConfig.verify_and_update_config"


@dataclass(frozen=True)
class HitGroup:
    """One group's cache: ``cached[i]`` is True when block i (a state group: a saved state
    at the end of block i) is cached for this prompt."""

    name: str
    kind: str
    cached: Sequence[bool]
    window_tokens: int = 0  # sliding window or chunk; 0 for the other kinds


@dataclass(frozen=True)
class HybridHit:
    """The hit every group agrees on, in blocks and tokens, and the group that set it."""

    blocks: int
    tokens: int
    limited_by: str | None


def _full(g: HitGroup, limit: int, block_size: int) -> int:
    n = 0
    while n < limit and g.cached[n]:
        n += 1
    return n


def _sliding(g: HitGroup, limit: int, block_size: int) -> int:
    need = -(-(g.window_tokens - 1) // block_size)
    run = 0
    for i in range(limit - 1, -1, -1):
        if g.cached[i]:
            run += 1
            if run >= need:
                return i + run
        else:
            run = 0
    return run  # a run from block 0 needs nothing before it


def _chunked(g: HitGroup, limit: int, block_size: int) -> int:
    start = limit * block_size // g.window_tokens * g.window_tokens // block_size
    n = start  # blocks of earlier chunks are never attended again: served without a cache
    while n < limit and g.cached[n]:
        n += 1
    return n


def _state(g: HitGroup, limit: int, block_size: int) -> int:
    for i in range(limit - 1, -1, -1):
        if g.cached[i]:
            return i + 1
    return 0


#: group kind -> its manager's longest hit (blocks) no longer than ``limit``
RULES: dict[str, Callable[[HitGroup, int, int], int]] = {
    **{k: _full for k in FULL_KINDS},
    "sliding_window": _sliding,
    "chunked_local": _chunked,
    **{k: _state for k in STATE_KINDS},
}


def longest_hit(groups: Sequence[HitGroup], block_size: int, max_blocks: int) -> HybridHit:
    """The longest prefix (whole blocks, at most ``max_blocks``) every group can serve."""
    if not groups or max_blocks <= 0:
        return HybridHit(0, 0, None)
    ordered = sorted(groups, key=lambda g: g.kind not in FULL_KINDS)  # the table first
    hit, limited_by = max_blocks, None
    while True:  # vLLM repeats the pass until no group lowers the hit
        cur = hit
        for g in ordered:
            own = RULES[g.kind](g, min(cur, len(g.cached)), block_size)
            if own < cur:
                cur, limited_by = own, g.name
        if cur >= hit:
            break
        hit = cur
    return HybridHit(hit, hit * block_size, limited_by)


def kv_groups_limiting_group(groups) -> str | None:
    """``engine_limiting_group`` of a ``sim.sizing.group_demand.KVGroups`` (None: dense).
    Under ``mamba_cache_mode: all`` the state groups ride on the block table
    (``with_saved_states``) and are not in ``groups.side``, so they limit nothing."""
    if groups is None or not groups.hybrid:
        return None
    kinds = [("table", "full", 0)] + [(g.name, g.kind, g.window_tokens) for g in groups.side]
    return engine_limiting_group(kinds)


def engine_limiting_group(kinds: Sequence[tuple[str, str, int]], state_prefix_caching: bool = False
                          ) -> str | None:  # fmt: skip
    """The group that stops the engine's prefix hits, or None when the block table's hit
    stands. The engine caches a sliding or chunked group's blocks with the block table's
    (the same tokens, released together), and saves a state-space state at every block
    boundary only with ``state_prefix_caching`` (``mamba_cache_mode: all``), so the rule is
    evaluated on a fully cached prompt: only a state group without saved states can lower
    it. ``kinds`` is (name, kind, window) per group."""
    n = 8  # any prompt of a few blocks shows the rule
    groups = [
        HitGroup(name, kind, [state_prefix_caching or kind not in STATE_KINDS] * n, window)
        for name, kind, window in kinds
    ]
    hit = longest_hit(groups, 16, n)
    return hit.limited_by if hit.blocks < n else None


def mamba_cache_mode_problem(mode: str, model_name: str, kinds: Sequence[str]) -> str | None:
    """Why ``mamba_cache_mode`` ``mode`` cannot run for a model whose layer groups are of
    ``kinds`` (None: it can; ``auto`` and ``none`` always can, and so does any mode on a
    model without state layers, which vLLM ignores the flag for): ``align`` (not
    modelled), and ``all`` on linear-attention layers, whose model classes (gated DeltaNet:
    Qwen3-Next) lack ``SupportsMambaPrefixCaching``, so vLLM runs ``align`` instead
    (``VLLM_MODE_SOURCE``)."""
    if mode not in MAMBA_CACHE_MODES:
        return f"{mode!r} is not one of {', '.join(MAMBA_CACHE_MODES)}"
    if mode in ("auto", "none") or not set(kinds) & set(STATE_KINDS):
        return None
    if mode == "align":
        return ("align is not modelled (it saves states only where a scheduler step ends on "
                "a block boundary); use auto (vLLM's choice where kvsim models it)")  # fmt: skip
    if "linear_attention" in kinds:
        return (f"all is not what vLLM runs for {model_name}: its linear-attention layers' "
                f"model class lacks SupportsMambaPrefixCaching, so vLLM falls back to align "
                f"({VLLM_MODE_SOURCE}), which kvsim does not model; use auto (no saved "
                "state here, with a warning that the hits are an under-estimate)")  # fmt: skip
    return None


def settle_mamba_cache_mode(
    mode: str, model_name: str, kinds: Sequence[str], caches_prefixes: bool
) -> tuple[str, str | None]:
    """(the mode a run holds: ``none`` or ``all``, a one-line warning or None) for
    ``mode`` asked of a model with groups of ``kinds``, as vLLM's
    ``MambaModelConfig.verify_and_update_config`` settles it: without a prefix cache,
    ``none``; with one, ``none`` becomes ``all`` (``align`` for a model class without
    ``SupportsMambaPrefixCaching``: linear attention). ``auto`` is that rule, ``align``
    excepted: not modelled, so ``none`` with a warning. An explicit ``none`` with a
    prefix cache runs as asked (a what-if) with a warning. A model without state layers
    holds ``none`` whatever the mode. KvsimError: a mode that cannot run (see
    ``mamba_cache_mode_problem``), or ``all`` without a prefix cache."""
    problem = mamba_cache_mode_problem(mode, model_name, kinds)
    if problem is not None:
        raise KvsimError(problem)
    if not set(kinds) & set(STATE_KINDS):
        return "none", None
    if mode == "all" and not caches_prefixes:
        raise KvsimError(
            "all needs a prefix-caching allocator (radix, paged_hash, or paged with "
            f"prefix_caching: hash): without prefix caching vLLM sets it back to none "
            f"({VLLM_MODE_SOURCE}); use auto")  # fmt: skip
    if not caches_prefixes or mode == "all":
        return ("none" if mode == "auto" else mode), None
    vllm_mode = "align" if "linear_attention" in kinds else "all"
    if mode == "none":
        return "none", (
            f"mamba_cache_mode none with prefix caching is a what-if: vLLM runs {model_name} "
            f"in {vllm_mode} ({VLLM_MODE_SOURCE}); no state is saved here, so prefix hits "
            "over its state layers are 0")  # fmt: skip
    if vllm_mode == "all":
        return "all", None
    return "none", (
        f"vLLM runs {model_name}'s linear-attention layers in mamba_cache_mode align "
        f"({VLLM_MODE_SOURCE}), which kvsim does not model: no state is saved here, so "
        "prefix hits over its state layers are 0, an under-estimate of vLLM's")  # fmt: skip
