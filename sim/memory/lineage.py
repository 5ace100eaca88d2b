"""Which token states are distinct: the fork tree of live sequences.

Responsibility: ``useful_bytes`` counts distinct token states resident, so a prefix shared
by copy-on-write counts once and a deep copy's duplicate counts as waste, whatever the
allocator kind. Physical layout cannot tell that (a deep copy holds the same states twice),
so every allocator keeps this small tree beside its memory: a node is a run of tokens
written by one sequence after its last fork; a sequence is the path from a root to its
leaf; a fork hangs two fresh leaves under the parent's leaf.

Invariant: ``distinct_tokens`` = total tokens of the nodes that some live sequence's path
passes through; ``logical_tokens`` = sum of the live sequences' lengths. Every operation
is O(1) except ``remove``, which is O(nodes it deletes) (each node is deleted once).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from sim.errors import InvariantError


class _Node:
    __slots__ = ("parent", "tokens", "refs")

    def __init__(self, parent: _Node | None, tokens: int) -> None:
        self.parent = parent
        self.tokens = tokens  # tokens written on this node (not counting ancestors)
        self.refs = 1  # live sequences ending here + child nodes


class TokenLineage:
    """Distinct and logical token counts of the live sequences, fork-aware."""

    __slots__ = ("_leaf", "distinct_tokens", "logical_tokens")

    def __init__(self) -> None:
        self._leaf: dict[Hashable, _Node] = {}
        self.distinct_tokens = 0
        self.logical_tokens = 0

    def add(self, seq_id: Hashable, n_tokens: int) -> None:
        """A new sequence with ``n_tokens`` states of its own."""
        self._leaf[seq_id] = _Node(None, n_tokens)
        self.distinct_tokens += n_tokens
        self.logical_tokens += n_tokens

    def extend(self, seq_id: Hashable, n_tokens: int) -> None:
        """``n_tokens`` new states written by ``seq_id`` (a leaf is never shared)."""
        self._leaf[seq_id].tokens += n_tokens
        self.distinct_tokens += n_tokens
        self.logical_tokens += n_tokens

    def extend_each(self, items: Iterable[tuple[Hashable, int]]) -> None:
        """``extend`` for each ``(seq_id, n_tokens)``."""
        leaf = self._leaf
        added = 0
        for seq_id, n_tokens in items:
            leaf[seq_id].tokens += n_tokens
            added += n_tokens
        self.distinct_tokens += added
        self.logical_tokens += added

    def fork(self, parent_id: Hashable, child_id: Hashable, parent_tokens: int) -> None:
        """``child_id`` shares every state of ``parent_id`` (``parent_tokens`` long)."""
        leaf = self._leaf[parent_id]
        if leaf.tokens == 0 and leaf.parent is not None:
            # the parent wrote nothing since its last fork: hang the child beside it, so a
            # burst of forks keeps the tree one level deep
            base = leaf.parent
            base.refs += 1
            self._leaf[child_id] = _Node(base, 0)
        else:
            leaf.refs += 1  # the parent's old leaf now has two child nodes instead of one seq
            self._leaf[parent_id] = _Node(leaf, 0)
            self._leaf[child_id] = _Node(leaf, 0)
        self.logical_tokens += parent_tokens

    def remove(self, seq_id: Hashable, seq_tokens: int) -> None:
        """Drop a sequence; states no other live sequence shares stop being useful."""
        node: _Node | None = self._leaf.pop(seq_id)
        self.logical_tokens -= seq_tokens
        while node is not None:
            node.refs -= 1
            if node.refs > 0:
                break
            self.distinct_tokens -= node.tokens
            node = node.parent

    def path_tokens(self, seq_id: Hashable) -> int:
        """Length of ``seq_id``'s path (must equal the sequence's token count)."""
        node: _Node | None = self._leaf[seq_id]
        total = 0
        while node is not None:
            total += node.tokens
            node = node.parent
        return total

    def check(self, seq_tokens: dict[Hashable, int]) -> None:
        """Recompute both counts from scratch; raise InvariantError on any difference."""
        if set(self._leaf) != set(seq_tokens):
            raise InvariantError("lineage: live sequences differ from the allocator's")
        seen: dict[int, _Node] = {}
        refs: dict[int, int] = {}
        for seq_id, leaf in self._leaf.items():
            if self.path_tokens(seq_id) != seq_tokens[seq_id]:
                raise InvariantError(f"lineage: sequence {seq_id!r} path length != its tokens")
            refs[id(leaf)] = refs.get(id(leaf), 0) + 1
            node: _Node | None = leaf
            while node is not None and id(node) not in seen:
                seen[id(node)] = node
                if node.parent is not None:
                    refs[id(node.parent)] = refs.get(id(node.parent), 0) + 1
                node = node.parent
        for key, node in seen.items():
            if node.refs != refs.get(key, 0):
                raise InvariantError(f"lineage: node refs {node.refs} != {refs.get(key, 0)}")
        distinct = sum(node.tokens for node in seen.values())
        if distinct != self.distinct_tokens:
            raise InvariantError(f"lineage: distinct tokens {self.distinct_tokens} != {distinct}")
        if sum(seq_tokens.values()) != self.logical_tokens:
            raise InvariantError("lineage: logical tokens != sum of sequence tokens")
