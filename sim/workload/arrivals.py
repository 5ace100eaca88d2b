"""Arrival processes, registered by name: when trajectories start.

Responsibility: a strategy object per ``arrival.kind`` whose ``run(cfg, ctx, n, start)``
returns a SimPy generator (anything slow, such as reading a trace, happens before it is
returned) that starts trajectories ``0 .. n-1`` by calling
``start(i, on_end)``; ``on_end()`` must be called when trajectory ``i`` ends (the
closed loop waits for it). Open-loop kinds pre-sample every arrival time at once:

- ``poisson``: exponential gaps, mean ``1 / rate_per_s``;
- ``fixed``: one every ``interval_s`` (or ``1 / rate_per_s``);
- ``gamma``: gamma gaps, mean ``1 / rate_per_s``, coefficient of variation ``cv``
  (shape ``1 / cv^2``);
- ``diurnal``: a non-homogeneous Poisson process of rate ``rate_per_s x curve(t)`` (24
  hourly values normalised to mean 1, or ``1 + a sin(2 pi (t + phase) / period)``), drawn
  by time rescaling: ``t_i = Lambda^-1(E_i)`` with ``E_i`` the arrival times of a unit-rate
  Poisson process and ``Lambda`` the integrated rate (exact, no rejected draws);
- ``trace``: a trace's timestamps from its first row, times ``time_scale``, or rescaled so
  that the replayed arrivals have mean rate ``rate_per_s``.

Invariant: exactly ``n`` trajectories are started, in index order, at non-decreasing
times; the ``arrivals`` RNG stream is the only randomness used for open-loop times (each
random kind draws exactly ``n`` variates from it) and ``think`` for closed-loop think times.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from sim.errors import ConfigError, UnknownNameError
from sim.workload import traces

Start = Callable[[int, Callable[[], None]], None]

#: bisection steps inverting the sinusoid's integrated rate (the bracket is 4 a P / 2 pi
#: wide; 2^-64 of it is below float64 resolution)
_BISECTION_STEPS = 64


def _noop() -> None:
    return None


def arrive_at(env, times: list[float], start: Start):
    """The generator that starts trajectory i at ``times[i]`` (absolute seconds)."""
    for i, t in enumerate(times):
        if t > env.now:
            yield env.timeout(t - env.now)
        start(i, _noop)


class _OpenLoop:
    """Start trajectory i at ``times[i]`` (absolute seconds)."""

    def times(self, cfg, ctx, n: int) -> np.ndarray:
        raise NotImplementedError

    def run(self, cfg, ctx, n: int, start: Start):
        """The arrival generator (times are computed now, before the simulation runs)."""
        return arrive_at(ctx.env, self.times(cfg, ctx, n).tolist(), start)


class Poisson(_OpenLoop):
    name = "poisson"

    def times(self, cfg, ctx, n):
        gaps = ctx.streams("arrivals").exponential(1.0 / cfg.rate_per_s, n)
        return cfg.start_s + np.cumsum(gaps)


class Fixed(_OpenLoop):
    name = "fixed"

    def times(self, cfg, ctx, n):
        return cfg.start_s + cfg.gap_s * np.arange(n, dtype=np.float64)


class Gamma(_OpenLoop):
    name = "gamma"

    def times(self, cfg, ctx, n):
        shape = 1.0 / (cfg.cv * cfg.cv)
        gaps = ctx.streams("arrivals").gamma(shape, 1.0 / (cfg.rate_per_s * shape), n)
        return cfg.start_s + np.cumsum(gaps)


class Diurnal(_OpenLoop):
    name = "diurnal"

    def times(self, cfg, ctx, n):
        unit = np.cumsum(ctx.streams("arrivals").exponential(1.0, n))  # unit-rate Poisson
        if cfg.hourly is not None:
            t = hourly_inverse(unit, cfg.rate_per_s, cfg.hourly, cfg.day_s, cfg.start_hour)
        else:
            s = cfg.sinusoid
            t = sinusoid_inverse(unit, cfg.rate_per_s, s.amplitude, s.period_s, s.phase_s)
        return np.maximum.accumulate(np.maximum(t, 0.0))  # rounding never reorders


def hourly_inverse(
    lam: np.ndarray, rate_per_s: float, hourly, day_s: float, start_hour: float
) -> np.ndarray:
    """Times t with ``Lambda(t) = lam`` for the piecewise-constant hourly curve.

    The curve is normalised to mean 1, so a day integrates to ``rate_per_s x day_s``; t = 0
    is ``start_hour`` into the curve.
    """
    w = np.asarray(hourly, dtype=np.float64)
    w = w / w.mean()
    hour_s = day_s / 24.0
    cum = np.concatenate([[0.0], np.cumsum(rate_per_s * hour_s * w)])  # at hour boundaries
    per_day = cum[-1]

    def integrated(t_day: float) -> float:  # Lambda from the day's start to t_day
        k = min(int(t_day // hour_s), 23)
        return cum[k] + rate_per_s * w[k] * (t_day - k * hour_s)

    t0 = start_hour * hour_s
    u = lam + integrated(t0)
    days = np.floor(u / per_day)
    rem = u - days * per_day
    # the first hour whose end reaches rem has a positive rate (unless rem is 0)
    k = np.minimum(np.searchsorted(cum[1:], rem, side="left"), 23)
    rate = rate_per_s * w[k]
    into = np.divide(rem - cum[k], rate, out=np.zeros_like(rem), where=rate > 0)
    return days * day_s + k * hour_s + np.clip(into, 0.0, hour_s) - t0


def sinusoid_inverse(
    lam: np.ndarray, rate_per_s: float, amplitude: float, period_s: float, phase_s: float
) -> np.ndarray:
    """Times t >= 0 with ``Lambda(t) = lam`` for ``rate x (1 + a sin(w (t + phase)))``.

    ``Lambda(t) = rate (t + a/w (cos(w phase) - cos(w (t + phase))))`` is non-decreasing
    and within ``rate x 2a/w`` of ``rate x t``, which brackets the root for bisection.
    """
    w = 2.0 * np.pi / period_s
    c0 = np.cos(w * phase_s)
    spread = 2.0 * amplitude / w

    def integrated(t: np.ndarray) -> np.ndarray:
        return rate_per_s * (t + amplitude / w * (c0 - np.cos(w * (t + phase_s))))

    center = lam / rate_per_s
    lo = np.maximum(center - spread, 0.0)
    hi = center + spread
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        below = integrated(mid) < lam
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return hi


def trace_times(
    t_s: np.ndarray, n: int, time_scale: float, rate_per_s: float | None, where: str
) -> np.ndarray:
    """``n`` arrival times from a trace's times (s from its first row, repeated after its
    span): scaled by ``time_scale``, or so that their mean rate is ``rate_per_s``."""
    t = traces.cycle_times(t_s, n)
    if rate_per_s is None:
        return t * time_scale
    if n < 2:
        return t
    span = t[-1] - t[0]
    if span <= 0:
        raise ConfigError(
            f"the {n} replayed timestamps are all equal: there is no rate to rescale to rate_per_s",
            location=where,
        )
    return (t - t[0]) * ((n - 1) / span / rate_per_s)


class Trace(_OpenLoop):
    name = "trace"

    def times(self, cfg, ctx, n):
        path, t = trace_seconds(cfg, ctx)
        return trace_times(t, n, cfg.time_scale, cfg.rate_per_s, str(path))


def trace_seconds(cfg, ctx) -> tuple[Path, np.ndarray]:
    """(the file, its ``time_column`` in seconds from its first row) of a ``trace``
    arrival with a ``path`` (the run's reader: ``kvsim validate`` reads it the same way)."""
    path = ctx.resolve(cfg.path)
    cols = traces.read_columns(path, [cfg.time_column])
    return path, traces.time_column(path, cols[cfg.time_column], cfg.time_column)


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


ARRIVALS = {cls.name: cls() for cls in (Poisson, Fixed, Gamma, Diurnal, Trace, ClosedLoop)}


def arrival_strategy(kind: str):
    try:
        return ARRIVALS[kind]
    except KeyError:
        raise UnknownNameError("arrival process", kind, list(ARRIVALS)) from None
