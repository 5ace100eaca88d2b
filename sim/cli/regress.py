"""``kvsim regress``: run a suite of canonical cases and compare them with golden baselines.

Invariant: the command only parses flags and prints; the rules live in ``sim.regress``.
Exit status: 0 all checks pass (or every baseline was written), 1 a regression, missing
metric, failing improvement or case error, 2 a user error (bad suite, bad flag).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from sim.cli._common import print_json

_PARAGRAPHS = [
    "Run a regression suite and compare each metric with its golden baseline.",
    "The suite (a YAML file, or a folder holding suite.yaml) lists cases; each case names a "
    "runner (scenario, allocator, trace_replay) with its inputs and the metrics it checks, "
    "each with a tolerance (passes when |now - baseline| <= max(abs, rel x |baseline|)), "
    "its good direction (better: lower or higher) and whether the check is two-sided. A move "
    "in the bad direction beyond tolerance is a regression; a move in the good direction is "
    "reported as an improvement and fails only for two-sided metrics or with --strict. A "
    "metric that the run or the baseline lacks fails. Wall-clock figures are never compared.",
    "Baselines are one JSON file per case, BASELINE_DIR/CASE.json. --update rewrites them "
    "from this run and prints what changed: review the diff before committing it.",
    "Defaults: ./tests/golden/suite.yaml if the current folder has one, else that of the "
    "source checkout kvsim runs from; baselines in the suite's baselines/ folder. An "
    "installed kvsim without a checkout needs --suite. The suite and baselines used are "
    "printed on stderr.",
    "Exit status: 0 pass, 1 a failing check or case, 2 a bad suite or flag.",
    "Example: kvsim regress --suite ci/kvsim --junit reports/kvsim-regress.xml",
]
HELP = "\n\n".join(_PARAGRAPHS)


def register(app: typer.Typer) -> None:
    """Add ``regress`` to the app."""
    app.command("regress", help=HELP)(regress)


def regress(
    suite: Annotated[
        Path | None,
        typer.Option(help="Suite folder (with suite.yaml) or file (default: tests/golden/)."),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(help="Baseline folder (default: SUITE_FOLDER/baselines)."),
    ] = None,
    update: Annotated[
        bool, typer.Option("--update", help="Rewrite the baselines from this run.")
    ] = False,
    junit: Annotated[
        Path | None, typer.Option(help="Also write JUnit XML to this file.", dir_okay=False)
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of tables.")
    ] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Improvements beyond tolerance fail too.")
    ] = False,
    case: Annotated[
        list[str] | None, typer.Option("--case", help="Run only this case (repeatable).")
    ] = None,
) -> None:
    """Parse the flags, run the session, print, exit 0/1."""
    from rich.console import Console

    from sim.regress.locate import describe, resolve_baseline_dir, resolve_suite
    from sim.regress.report import check_junit_path, print_report, report_dict, write_junit
    from sim.regress.session import run_session
    from sim.regress.suite import load_suite

    if junit is not None:
        check_junit_path(junit)  # before the suite runs, not after
    suite_file = resolve_suite(suite)
    baseline_dir = resolve_baseline_dir(baseline, suite_file)
    loaded = load_suite(suite_file)
    typer.echo(describe(suite_file, baseline_dir), err=True)  # stderr: --json stays one object
    report = run_session(loaded, baseline_dir, cases=case, update=update, strict=strict)
    if junit is not None:
        write_junit(report, junit)
    if json_out:
        print_json(report_dict(report))
    else:
        wide = Console().is_terminal or "COLUMNS" in os.environ
        print_report(report, Console(width=None if wide else 160, highlight=False))
    if not report.passed:
        raise typer.Exit(code=1)
