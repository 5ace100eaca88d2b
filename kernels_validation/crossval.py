"""Thin wrapper: the Vidur cross-validation is ``sim.cost.vidur_crossval`` (one implementation).

Kept so the checkout's scripts and tests can still ``import crossval``; runs here, not on the
device (the device scripts import only torch and the standard library).
"""

from sim.cost.vidur_crossval import *  # noqa: F403
from sim.cost.vidur_crossval import _split, _subset  # noqa: F401
