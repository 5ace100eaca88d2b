"""Cost: how long work takes. Step time with a breakdown (one roofline max over the step,
operator group by group, or from measured kernel tables: ``roofline``, ``groups``,
``linear``, ``table_pricer``, ``kernel_tables``), copy times, calibration; one pricer
interface for all of them (``pricer``: a step, or a run of steps by the same code).

Invariant: every function returns seconds (with the terms that made them); the cost
model never looks at simulation time or state, only at the work it is handed.
"""

from sim.cost.pricer import StepPricer, StepWork
from sim.cost.roofline import CostConfig, CostModel, StepCost

__all__ = ["CostConfig", "CostModel", "StepCost", "StepPricer", "StepWork"]
