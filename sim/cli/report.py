"""``kvsim report RUN_DIR [--trace]``: render a run folder's report again.

Invariant: thin: everything is ``sim.report``; only the report's own files
(``report.html``, ``plot_*.png``, with ``--trace`` ``trace.json``) are rewritten, each
renamed into place whole; a folder that is not a run, or that lacks a record table the
run wrote (``steps.parquet`` deleted), is a one-line error naming it (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

HELP = """Render a run folder's plots and report.html again (after a run with --no-report,
or with a newer kvsim). Only the report's files are rewritten.

  kvsim report runs/demo
  kvsim report runs/demo --trace      # also trace.json (open it in ui.perfetto.dev)
"""


def register(app: typer.Typer) -> None:
    """Add ``report`` to the app."""
    app.command("report", help=HELP)(report)


def report(
    run_dir: Annotated[Path, typer.Argument(help="A run folder written by kvsim run.")],
    trace: Annotated[
        bool, typer.Option("--trace", help="Also write trace.json (Chrome/Perfetto events).")
    ] = False,
) -> None:
    """Rebuild the report of RUN_DIR."""
    from sim.report import rebuild_report
    from sim.run.output import utf8_path

    utf8_path(run_dir, "RUN_DIR:")  # named as the other commands name theirs (--out: DIR: ...)
    missing_tables(run_dir)
    written = rebuild_report(run_dir)
    if trace:
        from sim.report.trace import write_trace

        written.append(write_trace(run_dir, run_dir))
    typer.echo(f"wrote {written[0]} ({len(written)} files)")


def missing_tables(run_dir: Path) -> None:
    """A one-line error naming the first record table ``kvsim run`` writes that the folder
    lacks (a report drawn without it would say "no engine steps", blaming the run, not the
    missing file). ``pauses.parquet`` is needed only by runs whose summary counts pauses
    (``pause_count``): folders of older versions have none."""

    from sim.errors import KvsimError
    from sim.run.output import TABLES
    from sim.yamlio import json_value, read_bytes_bounded

    try:
        summary = json_value(read_bytes_bounded(run_dir / "summary.json"), "summary.json", lines=True)
    except KvsimError:
        return  # not a run folder, or a damaged summary: load_run says so in one line
    needed = [t for t in TABLES if (t != "pauses" or "pause_count" in summary)
              and (t != "memory_groups" or "peak_allocated_bytes_by_group" in summary)]
    for name in needed:
        if not (run_dir / f"{name}.parquet").is_file():
            raise KvsimError(f"{run_dir}: {name}.parquet is missing (the run folder is "
                             "incomplete: run the scenario again with kvsim run)")  # fmt: skip
