"""``KVHint``: what an agent harness tells the engine about one paused conversation's KV.

Responsibility: the value object of the agent KV-hint proposals, with their fields named as
the RFCs name them: vLLM #52113 (agent hints), #51428 (``Pin`` = a lease, ``Retain`` = an
eviction bias), #57103 (demote / prefetch), SGLang #27574 (session release):

* ``pin_for_s``: keep the KV resident this long after the pause starts (a lease), then fall
  back (to ``demote`` if given, else drop);
* ``retain_priority``: an eviction bias; a higher value asks to be dropped later (0 = none);
* ``demote``: the tier the KV should go to while the tool runs (``host`` or ``nvme``);
* ``prefetch_at_s``: seconds after the pause starts when the harness expects to need the KV
  again (the engine starts the reload that much earlier than the return);
* ``release``: nothing will reuse this KV (the session ends): free it, cache included.

Invariant: immutable and validated on construction (times finite and >= 0, a known tier, a
release carries no lease or tier); times are seconds after the pause starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

DemoteAction = Literal["offload_host", "offload_nvme"]
#: ``demote`` values -> the pause action that realises them
DEMOTE_TIERS: dict[str, DemoteAction] = {"host": "offload_host", "nvme": "offload_nvme"}


@dataclass(frozen=True, slots=True)
class KVHint:
    """One hint on a call (for the pause after it) or on a session's last call."""

    pin_for_s: float | None = None
    retain_priority: float = 0.0
    demote: str | None = None  # a key of DEMOTE_TIERS
    prefetch_at_s: float | None = None
    release: bool = False

    def __post_init__(self) -> None:
        for name in ("pin_for_s", "prefetch_at_s"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v}")
        if not math.isfinite(self.retain_priority):
            raise ValueError(f"retain_priority must be finite, got {self.retain_priority}")
        if self.demote is not None and self.demote not in DEMOTE_TIERS:
            valid = ", ".join(DEMOTE_TIERS)
            raise ValueError(f"unknown demote tier {self.demote!r}; valid: {valid}")
        if self.release and (self.pin_for_s is not None or self.demote is not None):
            raise ValueError("a release hint carries no pin_for_s or demote")

    @property
    def demote_action(self) -> DemoteAction | None:
        """The pause action of ``demote`` (None without one)."""
        return None if self.demote is None else DEMOTE_TIERS[self.demote]

    def describe(self) -> str:
        """A short text for the pause table (``pin=1.5s demote=host prefetch=30s``)."""
        parts = []
        if self.release:
            parts.append("release")
        if self.pin_for_s is not None:
            parts.append(f"pin={self.pin_for_s:.6g}s")
        if self.retain_priority:
            parts.append(f"retain={self.retain_priority:.6g}")
        if self.demote is not None:
            parts.append(f"demote={self.demote}")
        if self.prefetch_at_s is not None:
            parts.append(f"prefetch={self.prefetch_at_s:.6g}s")
        return " ".join(parts)
