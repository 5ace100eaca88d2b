"""Cost: how long work takes. Step time with a breakdown (one roofline max over the step,
operator group by group, or from measured kernel tables: ``roofline``, ``groups``,
``linear``, ``table_pricer``, ``kernel_tables``), copy times, calibration.

Invariant: every function returns seconds (with the terms that made them); the cost
model never looks at simulation time or state, only at the work it is handed.
"""

from sim.cost.roofline import CostConfig, CostModel, StepCost, StepWork

__all__ = ["CostConfig", "CostModel", "StepCost", "StepWork"]
