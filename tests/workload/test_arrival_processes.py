"""Arrival processes: gamma, diurnal (hourly and sinusoidal), fixed and trace at a rate.

Sample statistics are checked against tolerances set from the sample size: a count with
expectation m has standard deviation sqrt(m) (Poisson), a mean of n gaps with coefficient
of variation c has relative standard error c / sqrt(n); every tolerance below is at
least 4 such standard errors, and the draws are seeded, so a pass is reproducible.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from sim.errors import ConfigError
from sim.workload import Streams, arrival_strategy
from sim.workload.arrivals import trace_times
from sim.workload.config import Arrival
from sim.workload.rng import stream_key

ROOT = Path(__file__).resolve().parents[2]
AZURE = ROOT / "workloads/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
ARRIVAL = TypeAdapter(Arrival)


def times(spec: dict, n: int, seed: int = 7) -> np.ndarray:
    cfg = ARRIVAL.validate_python(spec)
    ctx = SimpleNamespace(streams=Streams(seed), resolve=lambda p: Path(p))
    return arrival_strategy(cfg.kind).times(cfg, ctx, n)


def test_gamma_gaps_are_numpy_gamma_draws_from_the_arrivals_stream():
    t = times({"kind": "gamma", "rate_per_s": 4.0, "cv": 2.0, "start_s": 1.5}, 5, seed=3)
    shape = 1 / 2.0**2
    gaps = np.random.default_rng([3, stream_key("arrivals")]).gamma(shape, 1 / (4.0 * shape), 5)
    assert t.tolist() == pytest.approx((1.5 + np.cumsum(gaps)).tolist(), rel=1e-15)


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_gamma_mean_rate_and_cv(cv):
    n, rate = 200_000, 5.0
    gaps = np.diff(times({"kind": "gamma", "rate_per_s": rate, "cv": cv}, n), prepend=0.0)
    # mean: relative s.e. cv/sqrt(n) <= 0.0045; cv: s.e. of s^2/sigma^2 is
    # sqrt((kurtosis - 1)/n) with gamma kurtosis 3 + 6 cv^2, i.e. <= 0.0114 (cv 2)
    assert gaps.mean() == pytest.approx(1 / rate, rel=4.5 * cv / np.sqrt(n))
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.04)
    assert (gaps >= 0).all()


def test_gamma_is_deterministic_per_seed_and_validated():
    spec = {"kind": "gamma", "rate_per_s": 2.0, "cv": 3.0}
    assert times(spec, 50, seed=1).tolist() == times(spec, 50, seed=1).tolist()
    assert times(spec, 50, seed=1).tolist() != times(spec, 50, seed=2).tolist()
    for bad, message in (
        ({"cv": 0.0}, "greater than or equal to 0.01"),
        ({"cv": 1000.0}, "less than or equal to 100"),
        ({"cv": float("nan")}, "finite number"),
        ({"rate_per_s": 0.0}, "greater than 0"),
    ):
        with pytest.raises(ValidationError, match=message):
            ARRIVAL.validate_python({**spec, **bad})
    with pytest.raises(ValidationError, match="cv"):
        ARRIVAL.validate_python({"kind": "gamma", "rate_per_s": 2.0})  # cv is required


HOURLY = [0.0] * 6 + [1.0] * 6 + [3.0] * 6 + [2.0] * 6  # mean 1.5


def test_diurnal_hourly_counts_per_hour_follow_the_curve():
    n, rate, day_s = 120_000, 2.0, 2400.0  # a compressed day: 100 s per hour
    t = times({"kind": "diurnal", "rate_per_s": rate, "hourly": HOURLY, "day_s": day_s}, n)
    assert (np.diff(t) >= 0).all() and t[0] >= 0
    days = np.floor(t[-1] / day_s)
    whole = t[t < days * day_s]
    counts = np.bincount((whole % day_s // 100).astype(int), minlength=24)
    expected = rate * 100.0 * np.array(HOURLY) / 1.5 * days
    assert (counts[:6] == 0).all()  # a zero hour never gets an arrival
    tol = 5 * np.sqrt(expected[6:])  # Poisson counts: 5 standard deviations
    assert np.all(np.abs(counts[6:] - expected[6:]) <= tol)
    # the mean over whole days is rate_per_s (s.e. 1/sqrt(count))
    assert len(whole) / (days * day_s) == pytest.approx(rate, rel=5 / np.sqrt(len(whole)))


def test_diurnal_start_hour_shifts_the_curve():
    spec = {"kind": "diurnal", "rate_per_s": 1.0, "hourly": HOURLY, "day_s": 2400.0}
    late = times({**spec, "start_hour": 6.0}, 1000)
    early = times(spec, 1000)
    # from hour 6 on the curve the first arrivals come at once; from hour 0, after 600 s
    assert early[0] >= 600.0 and late[0] < 600.0
    # the same unit-rate draws, mapped through the curve shifted by six hours
    assert late.tolist() == pytest.approx((early - 600.0).tolist(), abs=1e-6)


def test_diurnal_sinusoid_follows_its_rate():
    n, rate, a, period, phase = 100_000, 2.0, 0.8, 1000.0, 250.0
    spec = {
        "kind": "diurnal",
        "rate_per_s": rate,
        "sinusoid": {"amplitude": a, "period_s": period, "phase_s": phase},
    }
    t = times(spec, n)
    assert (np.diff(t) >= 0).all()
    periods = np.floor(t[-1] / period)
    whole = t[t < periods * period]
    x = (whole + phase) % period  # position in the sine's cycle
    counts = np.bincount((x // 100).astype(int), minlength=10)
    w = 2 * np.pi / period
    edges = np.arange(11) * 100.0
    integral = rate * (100.0 - a / w * (np.cos(w * edges[1:]) - np.cos(w * edges[:-1])))
    expected = integral * periods
    assert np.all(np.abs(counts - expected) <= 5 * np.sqrt(expected))
    assert len(whole) / (periods * period) == pytest.approx(rate, rel=5 / np.sqrt(len(whole)))


def test_diurnal_is_deterministic_and_validated():
    spec = {"kind": "diurnal", "rate_per_s": 1.0, "sinusoid": {"amplitude": 0.5}}
    assert times(spec, 100, seed=4).tolist() == times(spec, 100, seed=4).tolist()
    base = {"kind": "diurnal", "rate_per_s": 1.0}
    for bad, message in (
        ({}, "exactly one curve"),
        ({"hourly": HOURLY, "sinusoid": {"amplitude": 0.5}}, "exactly one curve"),
        ({"hourly": HOURLY[:23]}, "24 values"),
        ({"hourly": [0.0] * 24}, "not all be zero"),
        ({"hourly": [-1.0] + HOURLY[1:]}, "greater than or equal to 0"),
        ({"sinusoid": {"amplitude": 1.5}}, "less than or equal to 1"),
        ({"sinusoid": {"amplitude": 0.5}, "day_s": 100.0}, "day_s and start_hour"),
        ({"hourly": HOURLY, "start_hour": 24}, "less than 24"),
    ):
        with pytest.raises(ValidationError, match=message):
            ARRIVAL.validate_python({**base, **bad})


def test_fixed_takes_a_rate_instead_of_an_interval():
    t = times({"kind": "fixed", "rate_per_s": 4.0, "start_s": 1.0}, 4)
    assert t.tolist() == [1.0, 1.25, 1.5, 1.75]
    with pytest.raises(ValidationError, match="interval_s or rate_per_s"):
        ARRIVAL.validate_python({"kind": "fixed", "rate_per_s": 4.0, "interval_s": 2.0})


def test_trace_rescaled_to_a_mean_rate_keeps_the_shape():
    raw = times({"kind": "trace", "path": str(AZURE)}, 1000)
    t = times({"kind": "trace", "path": str(AZURE), "rate_per_s": 10.0}, 1000)
    assert t[0] == 0.0 and t[-1] / 999 == pytest.approx(0.1, rel=1e-12)  # mean gap 1/rate
    assert t.tolist() == pytest.approx((raw * (t[-1] / raw[-1])).tolist(), rel=1e-12)
    with pytest.raises(ValidationError, match="time_scale or rate_per_s"):
        ARRIVAL.validate_python({"kind": "trace", "rate_per_s": 1.0, "time_scale": 2.0})
    with pytest.raises(ConfigError, match="all equal"):
        trace_times(np.zeros(3), 3, 1.0, 5.0, "t.csv")
    assert trace_times(np.zeros(1), 1, 1.0, 5.0, "t.csv").tolist() == [0.0]


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "poisson", "rate_per_s": 2.0},
        {"kind": "fixed", "rate_per_s": 2.0},
        {"kind": "gamma", "rate_per_s": 2.0, "cv": 1.5},
        {"kind": "diurnal", "rate_per_s": 2.0, "hourly": HOURLY},
        {"kind": "diurnal", "rate_per_s": 2.0, "sinusoid": {"amplitude": 0.3}},
        {"kind": "trace", "rate_per_s": 2.0},
    ],
)
def test_every_open_loop_kind_has_rate_per_s_and_its_dump_validates_again(spec):
    """config.resolved.yaml writes every default; reading it back must give the same."""
    cfg = ARRIVAL.validate_python(spec)
    assert cfg.rate_per_s == 2.0
    assert ARRIVAL.validate_python(cfg.model_dump(mode="json")) == cfg
