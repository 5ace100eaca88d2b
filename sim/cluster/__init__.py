"""Several nodes behind one router (rule 3.15, F19-F20): the routers, the global prefix
directory, and the front the workload submits to.

Layer: above ``sim/engine`` (it drives several ``Node``s) and ``sim/metrics`` (it sums
their records), below ``sim/scenario`` (which declares the ``cluster:`` section from the
router registry here). See docs/cluster.md.
"""

from sim.cluster.routers import (
    Router,
    router_class,
    router_kinds,
    router_options_models,
    router_options_union,
)

__all__ = [
    "Router",
    "router_class",
    "router_kinds",
    "router_options_models",
    "router_options_union",
]
