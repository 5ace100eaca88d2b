"""How a run's allocated KV divides among the model's layer groups (the run's KV by group).

The engine's allocator books a hybrid model's KV in two lumps (``sim.sizing.group_demand``):
the block table (the groups that keep every token, and a speculative drafter's KV) and the
side blocks (sliding windows, chunks, states). ``GroupSplit.split`` divides an allocator's
``allocated_bytes`` and ``side_allocated_bytes`` among the groups:

* a table group gets the table's bytes (allocated - side) in proportion to its bytes per
  token: every table group holds every token of every table block, so this is exact; the
  drafter's share is the entry ``draft`` (``DRAFT_GROUP``);
* the side bytes go to the one side group when there is one (exact: the side blocks are
  that group's, each sequence's rounded up to whole table blocks); with several, in
  proportion to the bytes each holds for the live sequences (``side_weights``: vLLM's
  rules per sequence, ``KVGroups.by_group``), which the caller measures;
* an allocator kind that does not count groups charges every real layer for every token
  (F1, no padding layers): each token group gets its unpadded bytes-per-token share of the
  allocated bytes (``GroupDemand.unpadded_bytes_per_token``), a state group 0.

Invariant: the parts sum to the allocated bytes they split (up to float rounding); a model
of one layer group has no split (``kv_split`` returns None), so a dense model's outputs do
not change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.sizing.group_demand import KVGroups

#: the name of a speculative drafter's share of the block table (beside the model's groups)
DRAFT_GROUP = "draft"


@dataclass(frozen=True)
class GroupSplit:
    """The layer groups of one engine instance and how its allocated bytes divide."""

    names: tuple[str, ...]  # group names: the table's, the side ones, then ``draft``
    kinds: tuple[str, ...]  # their kinds (``draft`` for the drafter)
    table_shares: tuple[float, ...]  # share of the table's bytes per group (0: a side group)
    side: tuple[int, ...]  # indices of the groups held beside the table

    def split(
        self, allocated: float, side_allocated: float, side_weights: Sequence[float] | None = None
    ) -> list[float]:
        """Bytes of each group (``names`` order) of ``allocated`` bytes of which
        ``side_allocated`` are side blocks; ``side_weights`` (one per ``side`` group) share
        the side bytes among several side groups (equal shares when absent or all 0)."""
        table = allocated - side_allocated
        out = [table * share for share in self.table_shares]
        if len(self.side) == 1:
            out[self.side[0]] = side_allocated
        elif self.side:
            weights = list(side_weights) if side_weights else [0.0] * len(self.side)
            total = sum(weights)
            for i, w in zip(self.side, weights, strict=True):
                out[i] = side_allocated * (w / total if total > 0 else 1 / len(self.side))
        return out


def kv_split(groups: KVGroups, allocator_bytes_per_token: float, counted: bool) -> GroupSplit | None:
    """The split of an allocator charging ``allocator_bytes_per_token`` for ``groups``
    (``counted``: it holds the side groups beside its table; else every layer for every
    token). What the groups do not explain of the bytes per token is the drafter's. None
    for a model of one layer group."""
    token_groups = [*groups.table, *(g for g in groups.side if not g.state_bytes)]
    listed = [*groups.table, *groups.side]
    if len(listed) < 2:
        return None
    bpt = float(allocator_bytes_per_token)
    # a counting allocator's table pays vLLM's padded layers; the other kinds F1's real ones
    charged = {g.name: g.bytes_per_token for g in groups.table} if counted else \
        {g.name: g.unpadded_bytes_per_token for g in token_groups}  # fmt: skip
    shares = {name: b / bpt for name, b in charged.items()}
    names = [g.name for g in listed]
    kinds = [g.kind for g in listed]
    side = tuple(i for i, g in enumerate(listed) if counted and g in groups.side)
    draft = bpt - sum(charged.values())
    table_shares = [shares.get(n, 0.0) for n in names]
    if draft > 1e-9 * bpt:
        names.append(DRAFT_GROUP)
        kinds.append(DRAFT_GROUP)
        table_shares.append(draft / bpt)
    return GroupSplit(tuple(names), tuple(kinds), tuple(table_shares), side)
