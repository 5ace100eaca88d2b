"""Census of the lazy leaf: how often a running sequence's fills wait to join its own radix
leaf, and which readers make them join.

    python benchmarks/census_lazy_leaf.py benchmarks/agents_500.yaml --set workload.num_trajectories=60

Counts, in one run, the leaves that start waiting (``RadixTree.wait``), the joins
(``RadixIndex._join``) by the reader that asked for them: a walk (a match, ``can_allocate``
or an insert reaching the node: ``RadixTree.join_late``), the fork of its sequence, its
release (``releasing``), an append of unknown content, a read of the tree from outside or a
listener subscribing (``join_waiting``); the in-place extensions still made at fill time
(``RadixTree.try_extend``: an index with a listener, or ``--eager``, the reference that
joins every fill at once). Measurement only: it wraps those methods in this process and
changes no result.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import yaml

from sim.prefix import radix as rx
from sim.prefix import radix_index as ri
from sim.run.runner import build

#: the function that called ``_join`` -> the reader it stands for
READERS = {
    "_join_node": "a walk reached the leaf (match, can_allocate, insert)",
    "forked": "the fork of its sequence",
    "releasing": "the release of its sequence",
    "appended": "an append of unknown content",
    "join_waiting": "the tree read from outside, or a listener subscribing",
}


class Census:
    def __init__(self) -> None:
        self.waits = 0
        self.extends = 0
        self.joins: Counter[str] = Counter()

    def install(self) -> None:
        census = self
        wait, try_extend, join = rx.RadixTree.wait, rx.RadixTree.try_extend, ri.RadixIndex._join

        def counted_wait(tree, node, record):
            census.waits += 1
            return wait(tree, node, record)

        def counted_extend(tree, node, content, blocks, now):
            done = try_extend(tree, node, content, blocks, now)
            census.extends += done
            return done

        def counted_join(index, w):
            census.joins[sys._getframe(1).f_code.co_name] += 1
            return join(index, w)

        rx.RadixTree.wait = counted_wait  # type: ignore[method-assign]
        rx.RadixTree.try_extend = counted_extend  # type: ignore[method-assign]
        ri.RadixIndex._join = counted_join  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--eager", action="store_true", help="every fill joins at once (reference)")
    args = ap.parse_args()
    overrides = {}
    for item in args.set:
        key, value = item.split("=", 1)
        overrides[key] = yaml.safe_load(value)
    if args.eager:
        ri.RadixIndex.lazy_leaves = False
    census = Census()
    census.install()
    sim = build(args.scenario, **overrides)
    sim.env.process(sim.driver)
    sim.env.run(until=sim.node.process)
    print(f"{args.scenario} {' '.join(args.set)}: {sim.recorder.decisions:,} decisions; "
          f"{census.extends:,} in-place extensions at fill time; {census.waits:,} leaves "
          f"waited, {sum(census.joins.values()):,} joins:")  # fmt: skip
    for caller, n in census.joins.most_common():
        print(f"  {n:>7,}  {READERS.get(caller, caller)}")


if __name__ == "__main__":
    main()
