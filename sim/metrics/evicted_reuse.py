"""The reuse a prefix cache lost to its evictions: ``prefix_recomputed_tokens``.

Responsibility: listen to one node's prefix cache (a ``sim.memory.PrefixListener``,
installed by ``KVManager.subscribe_prefix`` before the node runs) and count the full
blocks it caches again after it had cached and evicted the same content: the same
chained block hash (F19, ``sim.prefix.spans.chain_hash`` from ``ROOT_HASH``), so the same
tokens from token 0. Each such block was computed again although it had been in the
cache: one that never evicted would have served it (less a prompt's last block, which is
computed anyway), so ``recomputed_tokens`` is prefill the pool's size cost.

Invariants: a block is hashed once, when it is first reported cached (each key's chain
state kept while it is cached: memory bounded by the cache); a hash is "gone" from its
last copy's eviction until cached again, and each return counts once; a block whose
predecessor was never reported (no chain to hash from) counts nothing.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from sim.prefix.spans import ROOT_HASH, hash_blocks_from


class EvictedReuse:
    """A ``PrefixListener`` counting blocks cached again after their eviction."""

    def __init__(self) -> None:
        self.block_size = 0
        self.blocks: dict[Hashable, int] = {}  # cached key -> its chained hash
        self.held: dict[int, int] = {}  # chained hash -> cached keys holding it
        self.gone: set[int] = set()  # evicted and not cached again since
        self.recomputed_blocks = 0

    def watch(self, kv: Any) -> bool:
        """Subscribe to ``kv``'s prefix cache (before it runs); False without one."""
        self.block_size = int(kv.block_size)
        return bool(kv.subscribe_prefix(self))

    @property
    def recomputed_tokens(self) -> int:
        return self.recomputed_blocks * self.block_size

    def cached(self, parent: Hashable | None, keys: Sequence[Hashable], content: Any) -> None:
        blocks, held = self.blocks, self.held
        if parent is None:
            h = ROOT_HASH
        else:
            known = blocks.get(parent)
            if known is None:
                return  # nothing to chain from: not counted
            h = known
        new = [k for k in keys if k not in blocks]
        if not new:
            return
        hashes = hash_blocks_from(content, 0, 0, self.block_size, h)[0]
        for key, hk in zip(keys, hashes, strict=False):
            if key in blocks:
                continue
            blocks[key] = hk
            n = held.get(hk, 0)
            if not n and hk in self.gone:
                self.gone.discard(hk)
                self.recomputed_blocks += 1
            held[hk] = n + 1

    def evicted(self, keys: Sequence[Hashable]) -> None:
        blocks, held = self.blocks, self.held
        for key in keys:
            hk = blocks.pop(key, None)
            if hk is None:
                continue
            n = held[hk] - 1
            if n:
                held[hk] = n
            else:
                del held[hk]
                self.gone.add(hk)
