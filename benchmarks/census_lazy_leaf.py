"""Census for a lazy leaf: how many radix leaf extensions would be left if a sequence's
filled blocks joined the tree only when something can read its node.

    python benchmarks/census_lazy_leaf.py benchmarks/agents_500.yaml --set workload.num_trajectories=60

Counts the in-place leaf extensions (``RadixTree.try_extend``) of one run, and the points
where a lazy index would have to bring a node up to date because something reads it: a
match or ``can_allocate`` whose walk reaches the node (``RadixTree._walk``: its full path
and its partial node), an insert below it, and the fork, release and retain priority of
the sequence that pins it (``RadixIndex.forked`` / ``released`` / ``set_retain``). A
flush point with extensions waiting is one extension under the lazy scheme. Measurement
only: it wraps those methods in this process and changes no result.
"""

from __future__ import annotations

import argparse

import yaml

from sim.prefix import radix as rx
from sim.prefix import radix_index as ri
from sim.run.runner import build


class Census:
    def __init__(self) -> None:
        self.waiting: dict[int, int] = {}  # id(node) -> extensions not yet read
        self.extends = 0
        self.flushes = 0

    def flush(self, node) -> None:
        if self.waiting.pop(id(node), 0):
            self.flushes += 1

    def install(self) -> None:
        census = self
        try_extend, walk, insert = rx.RadixTree.try_extend, rx.RadixTree._walk, rx.RadixTree.insert

        def counted_extend(tree, node, content, blocks, now):
            done = try_extend(tree, node, content, blocks, now)
            if done:
                census.extends += 1
                census.waiting[id(node)] = census.waiting.get(id(node), 0) + 1
            return done

        def read_walk(tree, segs):
            path, partial, matched = walk(tree, segs)
            for node in (*path, partial):
                if node is not None:
                    census.flush(node)
            return path, partial, matched

        def read_insert(tree, content, block_ids, now, start=None):
            if start is not None:
                census.flush(start)
            return insert(tree, content, block_ids, now, start)

        rx.RadixTree.try_extend = counted_extend  # type: ignore[method-assign]
        rx.RadixTree._walk = read_walk  # type: ignore[method-assign]
        rx.RadixTree.insert = read_insert  # type: ignore[method-assign]
        for name in ("forked", "released", "set_retain"):
            setattr(ri.RadixIndex, name, self._reading(getattr(ri.RadixIndex, name)))

    def _reading(self, method):
        def read(index, seq_id, *args, **kwargs):
            node = index._node.get(seq_id)
            if node is not None:
                self.flush(node)
            return method(index, seq_id, *args, **kwargs)

        return read


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    overrides = {}
    for item in args.set:
        key, value = item.split("=", 1)
        overrides[key] = yaml.safe_load(value)
    census = Census()
    census.install()
    sim = build(args.scenario, **overrides)
    sim.env.process(sim.driver)
    sim.env.run(until=sim.node.process)
    left = sum(1 for n in census.waiting.values() if n)
    lazy = census.flushes + left
    print(f"{args.scenario} {' '.join(args.set)}: {sim.recorder.decisions:,} decisions, "
          f"{census.extends:,} leaf extensions; lazy: {census.flushes:,} at reads + {left:,} "
          f"unread at the end = {lazy:,} ({census.extends / max(1, lazy):,.0f} to one)")  # fmt: skip


if __name__ == "__main__":
    main()
