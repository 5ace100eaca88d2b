"""A T33-shaped radix tree over a recording pool, for the tree tests."""

from __future__ import annotations

from sim.prefix.radix import RadixTree


class Pool:
    """Records what the tree gives back."""

    def __init__(self):
        self.released: list[int] = []

    def release_cached(self, ids):
        self.released.extend(ids)


def t33_tree_unpinned():
    """root -> N1 system -> {N2 python, N3 bash -> N4 git status}; nothing pinned."""
    pool = Pool()
    tree = RadixTree(4, pool)
    n2 = tree.insert([("system", 8), ("python", 8)], [1, 2, 10, 11], now=1).node
    n3 = tree.insert([("system", 8), ("bash", 8)], [1, 2, 20, 21], now=2).node
    n4 = tree.insert(
        [("system", 8), ("bash", 8), ("git status", 4)], [1, 2, 20, 21, 31], now=3
    ).node
    n1 = n2.parent
    assert n4.parent is n3 and n3.parent is n1 and n1.parent is tree.root
    assert n1.block_ids == [1, 2] and n3.block_ids == [20, 21] and n4.block_ids == [31]
    tree.check_invariants()
    return tree, pool, (n1, n2, n3, n4)
