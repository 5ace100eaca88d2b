"""Presenting a regression session: rich tables, a JSON object, JUnit XML.

Responsibility: turn a ``RegressReport`` into what people and CI systems read. The table
has one row per metric (metric / baseline / now / delta / tolerance / verdict); every
failure is also printed as one line naming the case and the metric, so a CI log shows
what moved without the table. JUnit XML is built with ``xml.etree`` (one test case per
metric, a run error as one ``<error>``).

Invariant: printers only read the report; they decide nothing about pass or fail.
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sim.errors import KvsimError
from sim.regress.compare import IMPROVEMENT, OK, REGRESSION, MetricOutcome
from sim.regress.runners import MetricValue
from sim.regress.session import RegressReport

_STYLE = {OK: "green", REGRESSION: "bold red", IMPROVEMENT: "cyan"}


def fmt_value(value: MetricValue, present: bool = True) -> str:
    if not present:
        return "(absent)"
    if value is None:
        return "null"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.10g}"


def fmt_delta(m: MetricOutcome) -> str:
    if m.delta is None:
        return ""
    if m.delta == 0:
        return "0"
    text = f"{m.delta:+,}" if isinstance(m.delta, int) else f"{m.delta:+.4g}"
    rel = m.rel_delta
    if rel is not None and math.isfinite(rel) and m.delta:
        text += f" ({100 * rel:+.3g}%)"
    return text


def fmt_tolerance(m: MetricOutcome) -> str:
    c = m.check
    if m.allowed is not None:
        text = "exact" if m.allowed == 0 else f"±{m.allowed:.4g}"
    elif c.abs_tol == 0 and c.rel_tol == 0:
        text = "exact"
    else:
        text = f"abs {c.abs_tol:g}, rel {c.rel_tol:g}"
    return text + (" 2-sided" if c.two_sided else "")


def fmt_verdict(m: MetricOutcome) -> str:
    if m.verdict == IMPROVEMENT:
        return "improvement (FAIL)" if m.fails else "improvement"
    return m.verdict if m.verdict == OK else f"{m.verdict} (FAIL)"


def failure_line(case: str, m: MetricOutcome) -> str:
    """One line per failing metric, e.g. ``FAIL paged-b16: eta_alloc regression ...``."""
    line = f"FAIL {case}: {m.metric} {m.verdict}: baseline {fmt_value(m.baseline, m.has_baseline)}"
    line += f" -> now {fmt_value(m.now, m.has_now)}"
    if m.delta is not None:
        line += f" (delta {fmt_delta(m)}, tolerance {fmt_tolerance(m)})"
    return line + (f"; {m.note}" if m.note else "")


# ---------------------------------------------------------------------- text
def print_report(report: RegressReport, console: Console) -> None:
    """Tables per case, then the failure lines and a one-line verdict."""
    for case in report.cases:
        if report.update:
            break  # an update prints what changed instead
        title = escape(f"{case.name} [{case.runner}]: {case.status.upper()}")
        if case.error is not None:
            console.print(f"[bold red]{title}[/]: {escape(case.error)}", highlight=False)
            continue
        table = Table(title=title, title_justify="left", show_edge=False)
        for col, justify in (("metric", "left"), ("baseline", "right"), ("now", "right"),
                             ("delta", "right"), ("tolerance", "right"), ("verdict", "left")):  # fmt: skip
            table.add_column(col, justify=justify, no_wrap=True)
        for m in case.metrics:
            style = "bold red" if m.fails else _STYLE.get(m.verdict, "yellow")
            table.add_row(escape(m.metric), fmt_value(m.baseline, m.has_baseline),
                          fmt_value(m.now, m.has_now), fmt_delta(m), fmt_tolerance(m),
                          f"[{style}]{fmt_verdict(m)}[/]")  # fmt: skip
        console.print(table)
        if case.not_checked:
            console.print(f"  (baseline also holds, unchecked: {', '.join(case.not_checked)})")
    _print_footer(report, console)


def _print_footer(report: RegressReport, console: Console) -> None:
    out = console.print
    for path in report.stale:
        out(f"note: {path} has no case in the suite (delete it if the case was removed)")
    if report.update:
        _print_update(report, console)
        return
    for case in report.cases:
        if case.error is not None:
            out(f"ERROR {case.name}: {case.error}", highlight=False, markup=False)
        for m in case.failures:
            out(failure_line(case.name, m), highlight=False, markup=False)
    c = report.counts()
    verdict = "[bold green]PASSED[/]" if report.passed else "[bold red]FAILED[/]"
    tally = ", ".join(f"{k.replace('_', ' ')} {c.get(k, 0)}" for k in _TALLY)
    out(f"regress: {c['cases']} cases, {c['metrics']} metrics ({tally}) -> {verdict}")


_TALLY = ("ok", "regression", "improvement", "changed", "missing", "no_baseline", "errors")


def _print_update(report: RegressReport, console: Console) -> None:
    out = console.print
    changes = report.changes()
    if changes:
        table = Table(title="baseline changes", title_justify="left", show_edge=False)
        for col in ("case", "metric", "old", "new", "delta", "verdict before update"):
            table.add_column(col, no_wrap=True)
        for case, m in changes:
            table.add_row(case, m.metric, fmt_value(m.baseline, m.has_baseline),
                          fmt_value(m.now), fmt_delta(m), m.verdict)  # fmt: skip
        out(table)
    for case in report.cases:
        if case.error is not None:
            out(f"ERROR {case.name}: {case.error} (baseline not written)", markup=False)
        for m in case.metrics:
            if not m.has_now:
                out(f"FAIL {case.name}: {m.metric} missing: the run did not report it "
                    "(baseline not written)", markup=False)  # fmt: skip
    out(f"updated {len(report.written)} baseline files in {report.baseline_dir} "
        f"({len(report.unchanged)} unchanged, {len(changes)} metric values changed); "
        "review the diff before committing", highlight=False)  # fmt: skip


# ---------------------------------------------------------------------- JSON
def report_dict(report: RegressReport) -> dict[str, Any]:
    """The session as one JSON-ready object."""
    return {
        "suite": str(report.suite_path),
        "baseline_dir": str(report.baseline_dir),
        "strict": report.strict,
        "update": report.update,
        "passed": report.passed,
        "counts": report.counts(),
        "cases": [
            {
                "name": c.name,
                "runner": c.runner,
                "status": c.status,
                "error": c.error,
                "metrics": [_metric_dict(m) for m in c.metrics],
                "unchecked_baseline_metrics": list(c.not_checked),
            }
            for c in report.cases
        ],
        "stale_baselines": [str(p) for p in report.stale],
        "written": list(report.written),
        "changes": [{"case": c, **_metric_dict(m)} for c, m in report.changes()]
        if report.update
        else [],
    }


def _metric_dict(m: MetricOutcome) -> dict[str, Any]:
    return {
        "metric": m.metric,
        "baseline": m.baseline if m.has_baseline else None,
        "has_baseline": m.has_baseline,
        "now": m.now if m.has_now else None,
        "has_now": m.has_now,
        "delta": m.delta,
        "rel_delta": m.rel_delta,
        "allowed": m.allowed,
        "abs": m.check.abs_tol,
        "rel": m.check.rel_tol,
        "better": m.check.better,
        "two_sided": m.check.two_sided,
        "verdict": m.verdict,
        "fails": m.fails,
        "note": m.note,
    }


# ---------------------------------------------------------------------- JUnit
def junit_tree(report: RegressReport) -> ET.ElementTree:
    """JUnit XML: a <testsuite> per case, a <testcase> per metric."""
    c = report.counts()
    root = ET.Element("testsuites", name="kvsim regress", tests=str(c["metrics"] + c["errors"]),
                      failures=str(c["failed_metrics"]), errors=str(c["errors"]))  # fmt: skip
    for case in report.cases:
        fails = len(case.failures)
        errs = 1 if case.error is not None else 0
        suite = ET.SubElement(root, "testsuite", name=case.name, tests=str(len(case.metrics) + errs),
                              failures=str(fails), errors=str(errs), skipped="0")  # fmt: skip
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="runner", value=case.runner)
        classname = f"kvsim.regress.{case.name}"
        if case.error is not None:
            tc = ET.SubElement(suite, "testcase", classname=classname, name="run")
            err = ET.SubElement(tc, "error", message=case.error, type="run error")
            err.text = report.errors_detail.get(case.name, case.error)
            continue
        for m in case.metrics:
            tc = ET.SubElement(suite, "testcase", classname=classname, name=m.metric)
            if m.fails:
                msg = failure_line(case.name, m)
                ET.SubElement(tc, "failure", message=msg, type=m.verdict).text = msg
            elif m.verdict != OK:
                ET.SubElement(tc, "system-out").text = failure_line(case.name, m).replace(
                    "FAIL", "NOTE", 1
                )
    ET.indent(root)
    return ET.ElementTree(root)


def check_junit_path(path: Path) -> None:
    """Refuse a JUnit path that cannot be written, before the suite runs (one line)."""
    from sim.run.output import writable_parent

    path = Path(path)
    if path.is_dir():
        raise KvsimError(f"--junit {path}: is a folder; give a file name")
    writable_parent(path, "--junit")  # the folders write_junit would create go here
    if path.exists() and not os.access(path, os.W_OK):
        raise KvsimError(f"--junit {path}: {path} is not writable")


def write_junit(report: RegressReport, path: Path) -> None:
    """Write JUnit XML; a path that cannot be written is a one-line ``KvsimError``."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        junit_tree(report).write(path, encoding="utf-8", xml_declaration=True)
    except OSError as exc:
        raise KvsimError(f"--junit {path}: cannot write: {exc.strerror or exc}") from None
