"""Tool-wait prediction from per-tool-name running statistics, plus an oracle.

Responsibility: remember how long each tool took and turn that into a predicted wait for
the next call of the same tool: the running mean, a quantile of the recent waits, or the
minimum; ``oracle`` mode returns the true wait (an upper bound for studies).

Invariant: ``ToolWaitStats`` keeps count, mean, min and max over every observation (exact,
Welford's update) and quantiles over a bounded window of the most recent ``window`` waits
(oldest dropped first), so memory per tool is O(window) and results are deterministic
(no sampling RNG). A tool never observed predicts ``prior_wait_s`` (None = unknown).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from typing import Literal

PredictMode = Literal["mean", "quantile", "min", "oracle"]
PREDICT_MODES: tuple[str, ...] = ("mean", "quantile", "min", "oracle")


class ToolWaitStats:
    """Running statistics of one tool's waits (seconds)."""

    __slots__ = ("count", "mean_s", "min_s", "max_s", "_recent", "_sorted")

    def __init__(self, window: int = 256) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.count = 0
        self.mean_s = 0.0
        self.min_s = math.inf
        self.max_s = -math.inf
        self._recent: deque[float] = deque(maxlen=window)  # arrival order
        self._sorted: list[float] = []  # the same values, sorted

    def observe(self, wait_s: float) -> None:
        if not (wait_s >= 0 and math.isfinite(wait_s)):
            raise ValueError(f"a wait must be a finite number >= 0, got {wait_s}")
        self.count += 1
        self.mean_s += (wait_s - self.mean_s) / self.count
        self.min_s = min(self.min_s, wait_s)
        self.max_s = max(self.max_s, wait_s)
        if len(self._recent) == self._recent.maxlen:
            oldest = self._recent[0]
            del self._sorted[bisect.bisect_left(self._sorted, oldest)]
        self._recent.append(wait_s)
        bisect.insort(self._sorted, wait_s)

    @property
    def window_size(self) -> int:
        return len(self._sorted)

    def quantile(self, q: float) -> float:
        """Quantile ``q`` of the recent window, linear interpolation (numpy's default)."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q}")
        xs = self._sorted
        if not xs:
            raise ValueError("no observations")
        pos = q * (len(xs) - 1)
        lo = int(math.floor(pos))
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class WaitPredictor:
    """Predicts a tool's wait from what earlier calls of the same tool took."""

    def __init__(
        self,
        mode: str = "mean",
        *,
        quantile: float = 0.5,
        window: int = 256,
        prior_wait_s: float | None = None,
    ) -> None:
        if mode not in PREDICT_MODES:
            raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(PREDICT_MODES)}")
        if not 0.0 <= quantile <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], got {quantile}")
        if prior_wait_s is not None and not prior_wait_s >= 0:
            raise ValueError(f"prior_wait_s must be >= 0, got {prior_wait_s}")
        self.mode = mode
        self.q = quantile
        self.window = window
        self.prior_wait_s = prior_wait_s
        self._tools: dict[str, ToolWaitStats] = {}

    def observe(self, tool_name: str, wait_s: float) -> None:
        """Record a finished tool call (called at tool return)."""
        stats = self._tools.get(tool_name)
        if stats is None:
            stats = self._tools[tool_name] = ToolWaitStats(self.window)
        stats.observe(wait_s)

    def stats(self, tool_name: str) -> ToolWaitStats | None:
        return self._tools.get(tool_name)

    def min_wait_s(self, tool_name: str) -> float | None:
        """The shortest wait seen (speculative prefetch timer), None when never seen."""
        stats = self._tools.get(tool_name)
        return None if stats is None else stats.min_s

    def predict(self, tool_name: str, true_wait_s: float | None = None) -> float | None:
        """The predicted wait; ``oracle`` mode needs and returns ``true_wait_s``."""
        if self.mode == "oracle":
            if true_wait_s is None:
                raise ValueError("oracle prediction needs the true wait")
            return true_wait_s
        stats = self._tools.get(tool_name)
        if stats is None:
            return self.prior_wait_s
        if self.mode == "mean":
            return stats.mean_s
        if self.mode == "min":
            return stats.min_s
        return stats.quantile(self.q)
