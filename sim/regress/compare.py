"""Comparing a run's metrics with a baseline: one verdict per declared metric.

Responsibility: the rules of a verdict. A metric passes when
``|now - baseline| <= max(abs, rel x |baseline|)``; beyond that a move in the bad direction
is a ``regression`` (fails), a move in the good direction an ``improvement`` (reported;
fails only for two-sided metrics or under ``--strict``). A metric the run did not report,
or that the baseline lacks, fails (``missing``, ``no baseline``); ``None`` (undefined, such
as phi_ext with nothing free) equals only ``None``, and so does NaN only NaN.

Invariant: pure functions of their inputs; no I/O, no printing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from sim.regress.runners import MetricValue
from sim.regress.suite import Case, MetricCheck

OK = "ok"
REGRESSION = "regression"
IMPROVEMENT = "improvement"
CHANGED = "changed"  # defined <-> undefined (None, NaN): no direction to judge
MISSING = "missing"  # the run did not report the metric
NO_BASELINE = "no baseline"  # the baseline file lacks the metric (or the case)

VERDICTS = (OK, REGRESSION, IMPROVEMENT, CHANGED, MISSING, NO_BASELINE)


@dataclass(frozen=True)
class MetricOutcome:
    """The comparison of one metric of one case."""

    metric: str
    check: MetricCheck
    has_baseline: bool
    baseline: MetricValue
    has_now: bool
    now: MetricValue
    verdict: str  # one of VERDICTS
    fails: bool
    delta: float | None = None  # now - baseline, where both are numbers
    allowed: float | None = None  # the |delta| that still passes
    note: str = ""  # why it fails (or why an improvement does not)

    @property
    def rel_delta(self) -> float | None:
        if self.delta is None or not self.baseline:
            return None
        return self.delta / abs(self.baseline)


@dataclass(frozen=True)
class CaseOutcome:
    """All the metric verdicts of one case, or the error that stopped its run."""

    name: str
    runner: str
    metrics: tuple[MetricOutcome, ...] = ()
    error: str | None = None  # the run failed: nothing was compared
    not_checked: tuple[str, ...] = ()  # in the baseline file but no longer in the suite
    now: Mapping[str, MetricValue] = field(default_factory=dict)  # declared metrics, run

    @property
    def status(self) -> str:
        if self.error is not None:
            return "error"
        return "fail" if any(m.fails for m in self.metrics) else "pass"

    @property
    def failures(self) -> tuple[MetricOutcome, ...]:
        return tuple(m for m in self.metrics if m.fails)


def compare_metric(
    metric: str,
    check: MetricCheck,
    baseline: Mapping[str, MetricValue] | None,
    now: Mapping[str, MetricValue],
    *,
    strict: bool = False,
) -> MetricOutcome:
    """The verdict for ``metric`` (see the module docstring)."""
    has_b = baseline is not None and metric in baseline
    has_n = metric in now
    b = baseline[metric] if has_b else None
    n = now.get(metric)
    out = dict(metric=metric, check=check, has_baseline=has_b, baseline=b, has_now=has_n, now=n)
    if not has_n:
        return MetricOutcome(**out, verdict=MISSING, fails=True, note="the run did not report it")
    if not has_b:
        note = "not in the baseline; run with --update to record it"
        return MetricOutcome(**out, verdict=NO_BASELINE, fails=True, note=note)
    if _undefined(b) or _undefined(n):
        if _undefined(b) and _undefined(n):
            return MetricOutcome(**out, verdict=OK, fails=False)
        return MetricOutcome(**out, verdict=CHANGED, fails=True, note="defined <-> undefined")
    if n == b:
        return MetricOutcome(**out, verdict=OK, fails=False, delta=0, allowed=check.allowed(b))
    delta = n - b
    allowed = check.allowed(b)
    if abs(delta) <= allowed:
        return MetricOutcome(**out, verdict=OK, fails=False, delta=delta, allowed=allowed)
    worse = delta > 0 if check.better == "lower" else delta < 0
    if worse:
        note = f"{check.better} is better"
        return MetricOutcome(
            **out, verdict=REGRESSION, fails=True, delta=delta, allowed=allowed, note=note
        )
    if check.two_sided:
        note = "two-sided: any change beyond tolerance fails"
    elif strict:
        note = "--strict: improvements beyond tolerance fail"
    else:
        note = "update the baseline to keep it"
    fails = check.two_sided or strict
    return MetricOutcome(
        **out, verdict=IMPROVEMENT, fails=fails, delta=delta, allowed=allowed, note=note
    )


def compare_case(
    case: Case,
    baseline: Mapping[str, MetricValue] | None,
    now: Mapping[str, MetricValue],
    *,
    strict: bool = False,
) -> CaseOutcome:
    """Every declared metric of ``case`` against its baseline (None = no baseline file)."""
    outcomes = tuple(
        compare_metric(name, check, baseline, now, strict=strict)
        for name, check in case.metrics.items()
    )
    extra = tuple(sorted(set(baseline or {}) - set(case.metrics)))
    declared = {k: now[k] for k in case.metrics if k in now}
    return CaseOutcome(case.name, case.runner, outcomes, not_checked=extra, now=declared)


def _undefined(value: MetricValue) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
