"""``kvsim run FILE --out DIR [--force] [--quiet] [--set KEY=VALUE ...]``: simulate a scenario.

Invariant: the command parses flags, shows progress on stderr (a bar where stderr is a
terminal; elsewhere only the end line of a run with ``duration_s``) and a short result
table on stdout (``--quiet``: nothing but errors and the WARNING block of a pathological run), and
writes only into a temporary sibling of ``--out`` (``.NAME.PID.N.partial``) and ``--out``
itself, all of the run folder or nothing (``sim.run.output``): a non-empty ``--out`` is
refused before the run unless ``--force``. Ctrl-C exits 130 and says what is on disk:
``interrupted: nothing written`` before the folder is in place, ``interrupted: the run
folder DIR is complete`` after. All simulation logic is in ``sim.run``; ``summary.json``'s
``command`` is the argv ``sim.cli.main`` received, after ``kvsim``. The report
(``plot_*.png``, ``report.html``; ``--no-report`` skips it) and ``--trace``'s
``trace.json`` are rendered into the temporary folder before it is renamed into place
(``sim.report``; the report by a worker process that imports matplotlib while the run
simulates, ``sim.report.worker``, where a second CPU is free); a report that fails to render is left out with a one-line note, never
losing the run. The progress line's text is ``sim.report.text.progress_text``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli._common import command_argv
from sim.cli._run import (  # noqa: F401  (the names this module had: the run's own code is sim.cli._run)
    EXIT_INTERRUPTED,
    ReportOptions,
    _after_run,
    _config_warnings,
    _is_terminal,
    _print_summary,
    _run,
    _run_with_progress,
    command,
    end_line,
    report_hook,
    warning_block,
)

HELP = """Run a scenario and write the run folder: config.resolved.yaml, summary.json,
requests.parquet, steps.parquet, memory.parquet, trajectories.parquet, pauses.parquet,
and the report: plot_*.png and a self-contained report.html (--no-report skips it;
--trace adds trace.json for ui.perfetto.dev).

The folder is written whole once the run is done (nothing on an error or Ctrl-C); an
existing non-empty folder is refused unless --force, which replaces a previous run's folder whole.

Override any scenario field with dotted keys (values are YAML):

  kvsim run workloads/seed_chunked_prefill.yaml --out runs/e20 --set scheduler.chunked_prefill=false
  kvsim run workloads/agent_swarm.yaml --out runs/demo --set allocator.kind=static --set seed=3
"""

def register(app: typer.Typer) -> None:
    """Add ``run`` to the app."""
    app.command("run", help=HELP)(run)


def run(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    out: Annotated[
        str, typer.Option("--out", help="Output folder (created; must be empty or absent).")
    ],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a field: KEY=VALUE (dotted KEY).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="Print nothing but errors and warnings.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a previous run's --out folder whole.")
    ] = False,
    replications: Annotated[
        int | None,
        typer.Option(
            "--replications",
            help="Run K seeds (s, s+1, ...): DIR/replications/seed-<S>/ run folders and a "
            "mean DIR/summary.json with ci95 (sim.sweep.replicate).",
        ),
    ] = None,
    no_report: Annotated[
        bool, typer.Option("--no-report", help="Skip the plots and report.html.")
    ] = False,
    trace: Annotated[
        bool,
        typer.Option("--trace", help="Also write trace.json (Chrome/Perfetto trace events)."),
    ] = False,
    no_memory_guard: Annotated[
        bool,
        typer.Option(
            "--no-memory-guard",
            help="Run on even when the run's memory, projected from its growth so far, "
            "exceeds the machine's available memory (by default it stops with one line).",
        ),
    ] = False,
) -> None:
    """Run and write; Ctrl-C exits 130 and says whether the run folder is in place
    (``sim.cli._run.command``, which ``sim.cli.main``'s quick path calls as well)."""
    if replications is not None:  # K seeds on a local pool (sim.cli.sweep)
        from sim.cli._startup_gc import started
        from sim.cli.sweep import run_replicated

        started()  # the collector on for the pool's work (sim.cli._startup_gc)
        try:
            return run_replicated(file, out, set_ or [], quiet, force, replications)
        except KeyboardInterrupt:
            typer.echo("interrupted: nothing written", err=True)
            raise typer.Exit(code=EXIT_INTERRUPTED) from None
    code = command(file, out, set_ or [], quiet, force, command_argv(ctx), no_report, trace,
                   no_memory_guard)  # fmt: skip
    if code:
        raise typer.Exit(code=code)


