"""``kvsim report RUN_DIR [--trace]``: render a run folder's report again.

Invariant: thin: everything is ``sim.report``; only the report's own files
(``report.html``, ``plot_*.png``, with ``--trace`` ``trace.json``) are rewritten, each
renamed into place whole; a folder that is not a run is a one-line error (exit 2).
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

    written = rebuild_report(run_dir)
    if trace:
        from sim.report.trace import write_trace

        written.append(write_trace(run_dir, run_dir))
    typer.echo(f"wrote {written[0]} ({len(written)} files)")
