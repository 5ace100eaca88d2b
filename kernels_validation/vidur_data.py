"""Thin wrapper: the Vidur profile reader is ``sim.cost.vidur_data`` (one implementation).

Kept so the checkout's scripts and tests can still ``import vidur_data``; runs here, not on the
device (the device scripts import only torch and the standard library).
"""

from sim.cost.vidur_data import *  # noqa: F403
