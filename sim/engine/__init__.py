"""SimPy processes: the node loop that turns batch plans into passing time.

Invariant: the node is the only place engine steps take simulated time (one SimPy event
per step or per run of identical decode steps); workload processes wait only on their
own tool pauses and on request completions.
"""

from sim.engine.node import MAX_ZERO_TIME_DECISIONS, EngineStuckError, Node

__all__ = ["MAX_ZERO_TIME_DECISIONS", "EngineStuckError", "Node"]
