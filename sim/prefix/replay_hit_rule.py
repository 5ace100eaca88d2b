"""A trace replay's hit rule for a model: the hybrid prefix-hit rule over its layer groups.

Responsibility: ``kvsim trace-replay --model NAME``. The replay's radix tree holds the block
table (the groups that keep every token); given how many leading blocks of a prompt it
matched, this module asks ``sim.prefix.hybrid_hit.longest_hit`` what every layer group of
the model (``sim.sizing.group_demand.kv_groups``) can serve, as the engine does:

- the block table (``full`` / ``mla`` / ``indexer`` layers, named ``table``): the matched
  blocks are cached;
- ``sliding_window`` and ``chunked_local`` groups: their blocks are cached and evicted with
  the block table's (the same tokens), so they are cached wherever the table is, and a
  windowed model keeps the table's hits;
- ``mamba`` / ``linear_attention`` groups: with ``mamba_cache_mode`` ``none`` no state is
  saved at block boundaries, so a state-space hybrid gets no prefix hit; with ``all`` a
  state is saved at every block boundary and kept as long as the block (the engine's
  rule: ``sim.sizing.group_demand.with_saved_states``), so the state groups serve the
  table's hit; ``auto`` (the default) is what vLLM runs with a prefix cache, as a run
  settles it (``sim.prefix.hybrid_hit.settle_mamba_cache_mode``), and ``align`` and the
  combinations vLLM does not run are refused there.

Invariant: the hit is never longer than the table's match; it depends only on the matched
block count, the block size and the groups, so answers are memoised per matched count
(memory bounded by the number of distinct counts, work per call O(1) after the first);
``lost_tokens`` names each group that lowered a hit and the hit tokens it took away.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.errors import KvsimError
from sim.prefix.hybrid_hit import (
    STATE_KINDS,
    HitGroup,
    HybridHit,
    longest_hit,
    settle_mamba_cache_mode,
)

#: the name the block table's group carries in the output (as ``engine_limiting_group``)
TABLE_GROUP = "table"


@dataclass
class ModelHitRule:
    """The hybrid rule for one model's groups, with the hit tokens each group took away."""

    model: str
    groups: tuple[tuple[str, str, int], ...]  # (name, kind, window tokens) beside the table
    saved_states: bool = False  # a state saved at every block boundary (mode all)
    warning: str | None = None  # what the replay runs as that vLLM would not
    lost_tokens: dict[str, int] = field(default_factory=dict)  # group -> hit tokens it cut
    _memo: dict[tuple[int, int], HybridHit] = field(default_factory=dict, repr=False)

    def hit(self, matched_blocks: int, block_size: int) -> HybridHit:
        """The blocks every group serves of a prompt whose leading ``matched_blocks``
        blocks the table has cached."""
        key = (matched_blocks, block_size)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = longest_hit(
                self._hit_groups(matched_blocks), block_size, matched_blocks
            )
        return found

    def _hit_groups(self, matched: int) -> list[HitGroup]:
        out = [HitGroup(TABLE_GROUP, "full", [True] * matched)]
        for name, kind, window in self.groups:
            saved = kind not in STATE_KINDS or self.saved_states
            out.append(HitGroup(name, kind, [saved] * matched, window))
        return out

    def count(self, limited_by: str | None, table_hit_tokens: int, hit_tokens: int) -> None:
        """Record that ``limited_by`` cut a hit of ``table_hit_tokens`` to ``hit_tokens``."""
        if limited_by is not None and hit_tokens < table_hit_tokens:
            lost = table_hit_tokens - hit_tokens
            self.lost_tokens[limited_by] = self.lost_tokens.get(limited_by, 0) + lost

    @property
    def limited_by(self) -> str | None:
        """The group that took away the most hit tokens (None: no group cut any)."""
        if not self.lost_tokens:
            return None
        return max(sorted(self.lost_tokens), key=lambda g: self.lost_tokens[g])


def model_hit_rule(name: str, mamba_cache_mode: str = "auto") -> ModelHitRule:
    """The rule for the model profile ``name`` under ``mamba_cache_mode``, settled as a
    run with a prefix cache settles it (``settle_mamba_cache_mode``: ``auto`` gives
    ``all`` for a Mamba model, ``none`` with a warning for linear attention); the warning,
    if any, is the rule's ``warning`` (UnknownNameError lists the models; KvsimError names
    a mode that cannot run)."""
    from sim.profiles.registry import load_model
    from sim.sizing.group_demand import kv_groups

    model = load_model(name)
    kinds = [g.kind for g in model.kv_groups()]
    try:
        mode, warning = settle_mamba_cache_mode(mamba_cache_mode, name, kinds, True)
    except KvsimError as exc:
        raise KvsimError(f"--mamba-cache-mode: {exc}") from None
    groups = kv_groups(model)
    return ModelHitRule(name, tuple((g.name, g.kind, g.window_tokens) for g in groups.side),
                        saved_states=mode == "all", warning=warning)  # fmt: skip
