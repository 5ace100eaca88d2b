"""Arrival processes, registered by name: when trajectories start.

Responsibility: a strategy object per ``arrival.kind`` whose ``run(cfg, ctx, n, start)``
returns a SimPy generator (anything slow, such as reading a trace, happens before it is
returned) that starts trajectories ``0 .. n-1`` by calling
``start(i, on_end)``; ``on_end()`` must be called when trajectory ``i`` ends (the
closed loop waits for it). Open-loop kinds pre-sample every arrival time at once.

Invariant: exactly ``n`` trajectories are started, in index order, at non-decreasing
times; the ``arrivals`` RNG stream is the only randomness used for open-loop times and
``think`` for closed-loop think times.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim.errors import UnknownNameError
from sim.workload import traces

Start = Callable[[int, Callable[[], None]], None]


def _noop() -> None:
    return None


class _OpenLoop:
    """Start trajectory i at ``times[i]`` (absolute seconds)."""

    def times(self, cfg, ctx, n: int) -> np.ndarray:
        raise NotImplementedError

    def run(self, cfg, ctx, n: int, start: Start):
        """The arrival generator (times are computed now, before the simulation runs)."""
        return self._arrive(ctx.env, self.times(cfg, ctx, n).tolist(), start)

    @staticmethod
    def _arrive(env, times: list[float], start: Start):
        for i, t in enumerate(times):
            if t > env.now:
                yield env.timeout(t - env.now)
            start(i, _noop)


class Poisson(_OpenLoop):
    name = "poisson"

    def times(self, cfg, ctx, n):
        gaps = ctx.streams("arrivals").exponential(1.0 / cfg.rate_per_s, n)
        return cfg.start_s + np.cumsum(gaps)


class Fixed(_OpenLoop):
    name = "fixed"

    def times(self, cfg, ctx, n):
        return cfg.start_s + cfg.interval_s * np.arange(n, dtype=np.float64)


class Trace(_OpenLoop):
    name = "trace"

    def times(self, cfg, ctx, n):
        path = ctx.resolve(cfg.path)
        cols = traces.read_columns(path, [cfg.time_column])
        t = traces.time_column(path, cols[cfg.time_column], cfg.time_column)
        return traces.cycle_times(t, n) * cfg.time_scale


class ClosedLoop:
    """``concurrency`` agents; each starts the next trajectory when its previous one ends."""

    name = "closed_loop"

    def run(self, cfg, ctx, n: int, start: Start):
        """Start the agents' processes; returns a generator that ends at once."""
        env = ctx.env
        counter = iter(range(n))
        think = ctx.streams("think")

        def agent(a: int):
            if cfg.stagger_s and a:
                yield env.timeout(a * cfg.stagger_s)
            for i in counter:
                ended = env.event()
                start(i, ended.succeed)
                yield ended
                pause = float(cfg.think_s.sample(think, 1)[0])
                if pause > 0:
                    yield env.timeout(pause)

        def launch():
            for a in range(min(cfg.concurrency, n)):
                env.process(agent(a))
            return
            yield  # a generator like the open-loop kinds

        return launch()


ARRIVALS = {cls.name: cls() for cls in (Poisson, Fixed, Trace, ClosedLoop)}


def arrival_strategy(kind: str):
    try:
        return ARRIVALS[kind]
    except KeyError:
        raise UnknownNameError("arrival process", kind, list(ARRIVALS)) from None
