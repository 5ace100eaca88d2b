"""Thin wrapper: the Vidur fit is ``sim.cost.vidur_fit`` (one implementation).

Kept so the checkout's scripts and tests can still ``import vidur_fit``; runs here, not on the
device (the device scripts import only torch and the standard library).
"""

from sim.cost.vidur_fit import *  # noqa: F403
from sim.cost.vidur_fit import _coordinate_search  # noqa: F401
