"""One regression session: run the suite's cases, compare with (or rewrite) the baselines.

Responsibility: the lifecycle load -> run each case -> compare -> (update) -> report
object. A case whose run fails is recorded as an error and the session goes on, so one
broken layer does not hide the verdicts of the others.

A runner's return is checked where the session receives it (``run_case``): a mapping
whose declared metrics are numbers or None; anything else is that case's one-line error.

Invariants: ``--update`` writes a baseline only for a case that ran and reported every
declared metric, and records exactly the declared metrics; the comparison with the old
baseline is kept, so what changed can be printed and reviewed.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sim.errors import KvsimError
from sim.regress.baseline import read_baseline, stale_baselines, write_baseline
from sim.regress.compare import CaseOutcome, MetricOutcome, compare_case
from sim.regress.runners import MetricValue, RunContext, get_runner
from sim.regress.suite import Case, Suite


@dataclass
class RegressReport:
    """Everything a session found; the printers read only this."""

    suite_path: Path
    baseline_dir: Path
    strict: bool
    update: bool
    cases: list[CaseOutcome] = field(default_factory=list)
    stale: list[Path] = field(default_factory=list)  # baseline files with no case
    written: list[str] = field(default_factory=list)  # --update: files that changed
    unchanged: list[str] = field(default_factory=list)  # --update: files kept as they were
    errors_detail: dict[str, str] = field(default_factory=dict)  # case -> traceback

    @property
    def passed(self) -> bool:
        if self.update:  # an update succeeds when every case could be recorded
            return all(c.error is None and all(m.has_now for m in c.metrics) for c in self.cases)
        return all(c.status == "pass" for c in self.cases)

    def changes(self) -> list[tuple[str, MetricOutcome]]:
        """(case, outcome) for every metric whose value is not the baseline's."""
        return [
            (c.name, m)
            for c in self.cases
            for m in c.metrics
            if m.has_now and (not m.has_baseline or not _same(m.baseline, m.now))
        ]

    def counts(self) -> dict[str, int]:
        metrics = [m for c in self.cases for m in c.metrics]
        out = {"cases": len(self.cases), "metrics": len(metrics)}
        out["errors"] = sum(1 for c in self.cases if c.error is not None)
        out["failed_metrics"] = sum(1 for m in metrics if m.fails)
        for m in metrics:
            key = m.verdict.replace(" ", "_")
            out[key] = out.get(key, 0) + 1
        return out


def run_case(case: Case, ctx: RunContext) -> dict[str, MetricValue]:
    """The metrics a case's runner reports: a mapping whose declared metrics are numbers or
    None, else a one-line ``KvsimError`` naming the runner and the case (a case error)."""
    runner = get_runner(case.runner)
    now = runner.run(case.inputs, ctx)
    if not isinstance(now, Mapping):
        raise KvsimError(
            f"regress runner {case.runner!r} returned {_shown(now)} for case {case.name!r}; "
            "run must return a mapping of metric names to numbers or None (docs/regression.md)"
        )
    for name in case.metrics:
        value = now.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise KvsimError(
                f"regress runner {case.runner!r} returned {_shown(value)} for metric "
                f"{name!r} of case {case.name!r}; a metric is an int, a float or None "
                "(docs/regression.md)"
            )
    return dict(now)


def _shown(value: object) -> str:
    """A returned value in a message: its type and a short repr (never a long line)."""
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{type(value).__name__} {text}"


def run_session(
    suite: Suite,
    baseline_dir: Path,
    *,
    cases: list[str] | None = None,
    update: bool = False,
    strict: bool = False,
) -> RegressReport:
    """Run the selected cases of ``suite`` and compare (or update) their baselines."""
    selected = suite.select(cases)
    report = RegressReport(suite.path, Path(baseline_dir), strict, update)
    ctx = RunContext(base_dir=suite.base_dir)
    for case in selected:
        outcome = _one_case(case, ctx, report, strict)
        report.cases.append(outcome)
        if update and outcome.error is None and all(m.has_now for m in outcome.metrics):
            changed = write_baseline(report.baseline_dir, case.name, case.runner, outcome.now)
            (report.written if changed else report.unchanged).append(case.name)
    if not cases:
        report.stale = stale_baselines(report.baseline_dir, {c.name for c in suite.cases})
    return report


def _one_case(case: Case, ctx: RunContext, report: RegressReport, strict: bool) -> CaseOutcome:
    try:
        baseline = read_baseline(report.baseline_dir, case.name)
    except KvsimError as exc:
        if not report.update:  # a broken file is overwritten by --update
            return CaseOutcome(case.name, case.runner, error=str(exc))
        baseline = None
    try:
        now = run_case(case, ctx)
    except KvsimError as exc:
        return CaseOutcome(case.name, case.runner, error=str(exc))
    except Exception as exc:  # a bug in a layer: report it, run the other cases
        report.errors_detail[case.name] = traceback.format_exc()
        return CaseOutcome(case.name, case.runner, error=f"{type(exc).__name__}: {exc}")
    return compare_case(case, baseline, now, strict=strict)


def _same(a: MetricValue, b: MetricValue) -> bool:
    if a is None or b is None:
        return a is b
    return a == b or (a != a and b != b)  # NaN equals NaN here
