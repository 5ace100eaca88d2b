"""Cost: how long work takes. Step time with a breakdown (one roofline max over the step,
operator group by group, or from measured kernel tables: ``roofline``, ``groups``,
``linear``, ``table_pricer``, ``kernel_tables``), copy times, calibration; one pricer
interface for all of them (``pricer``: a step, or a run of steps by the same code).

Invariant: every function returns seconds (with the terms that made them); the cost
model never looks at simulation time or state, only at the work it is handed. Importing
this package imports ``CostConfig`` (the scenario's ``cost`` section) alone: the pricers
are imported on the first look-up of a name of theirs (``kvsim validate`` names the
section and prices nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.cost.config import CostConfig

if TYPE_CHECKING:
    from sim.cost.pricer import StepPricer, StepWork
    from sim.cost.roofline import CostModel, StepCost

__all__ = ["CostConfig", "CostModel", "StepCost", "StepPricer", "StepWork"]


def __getattr__(name: str) -> Any:
    # PEP 562: the pricers' names, imported on first look-up
    if name in ("StepPricer", "StepWork"):
        from sim.cost import pricer

        return getattr(pricer, name)
    if name in ("CostModel", "StepCost"):
        from sim.cost import roofline

        return getattr(roofline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
