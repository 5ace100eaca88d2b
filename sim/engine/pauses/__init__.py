"""Pauses in the engine, split by job: the state machine (``state``), the decision
(``decide``), the transfers (``transfers``), the resume timing (``resume``) and the one
owner of every pause's lifecycle (``lifecycle``); the records' schema is
``sim.metrics.pauses``.

Invariant: ``PauseLifecycle`` is the only caller of the KV manager's pause verbs; memory
never calls into this package.
"""

from sim.engine.pauses.lifecycle import PauseController, PauseLifecycle
from sim.engine.pauses.state import TRANSITIONS, Pause, PauseState

__all__ = ["TRANSITIONS", "Pause", "PauseController", "PauseLifecycle", "PauseState"]
