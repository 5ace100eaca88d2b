"""A prompt the radix pool cannot hold even with every evictable block freed misses inside
``RadixIndex.match`` (None), before the core pins its hit's blocks: the miss changes
nothing, and a prompt that fits once eviction makes room still gets its hit."""

from __future__ import annotations

from sim.prefix.kinds import RadixAllocator

B = 4


def _state(alloc) -> tuple:
    tree, pool = alloc.index.tree, alloc.pool
    nodes = sorted(
        (n.serial, n.label, tuple(n.block_ids), n.lock_ref, n.last_access, n.hit_count)
        for n in [tree.root, *tree.iter_nodes()]
    )
    return (nodes, tree.evictable_blocks, list(pool.refcount), pool.free_queue(),
            pool.num_cached, alloc.metrics(), alloc.prefix_metrics())  # fmt: skip


def test_a_prompt_that_cannot_fit_misses_in_match_and_changes_nothing():
    alloc = RadixAllocator(pool_bytes=20 * B, kv_bytes_per_token=1, block_size=B)
    alloc.set_time(1.0)
    sys_prompt = (("sys", 0, 24), ("task-a", 0, 8))  # 8 blocks, cached when freed
    assert alloc.allocate("a", 32, content=sys_prompt)
    alloc.free("a")
    alloc.set_time(2.0)
    assert alloc.allocate("b", 24, content=(("other", 0, 24),))  # 6 live blocks
    index, calls = alloc.index, []
    match = index.match
    index.match = lambda n, c: calls.append(match(n, c)) or calls[-1]
    before = _state(alloc)
    # the 6-block shared prefix plus 16 new blocks: 20 - 6 live - 6 shared = 8 at most
    long = (("sys", 0, 24), ("task-c", 0, 64))
    assert not alloc.allocate("c", 88, content=long)
    after = _state(alloc)  # the pool, locks and books as they were; the tree split at the
    assert calls == [None] and after[1:] == before[1:]  # match's cap, as on any miss
    assert len(after[0]) == len(before[0]) + 1
    assert not alloc.allocate("c", 88, content=long)  # retried: nothing changes at all
    assert calls == [None, None] and _state(alloc) == after
    alloc.check_invariants()
    # 6 shared + 8 new blocks: fits once the two dormant task-a blocks are evicted
    fits = (("sys", 0, 24), ("task-d", 0, 32))
    assert alloc.allocate("d", 56, content=fits).matched_tokens == 24
    assert calls[-1] is not None and alloc.index.tree.evicted_blocks == 2
    alloc.check_invariants()
