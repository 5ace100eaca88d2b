"""``kvsim sweep FILE --out DIR [--executor local|dask] [--workers N] [--scheduler-address ADDR]``.

Invariant: thin: flags are parsed here and everything else is ``sim.sweep.run_sweep``;
progress (one bar over the runs, on a terminal only: rich would leave a blank line on a
pipe) goes to stderr, one closing line to stdout. An invalid
point refuses the whole sweep before any run (one line at the sweep file's line, exit 2,
nothing written); a run that fails once it runs is a row with its ``error`` and the exit
status stays 0; a dead worker ends the command
with a one-line error (exit 2) after every finished run is in ``results.parquet``, and
rerunning the same command completes the rest.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sim.cli._common import cluster_line, command_line, print_error
from sim.errors import EXIT_INTERRUPTED

HELP = """Run every point of a sweep file (a base scenario, a grid and/or points,
replications) into DIR: DIR/results.parquet (one row per point and replication, rewritten
after each finished run) and DIR/runs/<config_sha256>/ run folders.

Every point is validated first: one invalid point refuses the whole sweep (nothing
written). Rerunning into the same DIR skips the finished runs (it resumes); a DIR of
another sweep is refused.

  kvsim sweep workloads/coding_agents_sweep.yaml --out runs/sweep --workers 2
  kvsim sweep workloads/coding_agents_sweep.yaml --out runs/sweep --executor dask --workers 2
"""


def register(app: typer.Typer) -> None:
    """Add ``sweep`` to the app."""
    app.command("sweep", help=HELP)(sweep)


def sweep(
    file: Annotated[Path, typer.Argument(help="Sweep YAML file (a top-level 'sweep:').")],
    out: Annotated[str, typer.Option("--out", help="Output folder (created, or resumed).")],
    executor: Annotated[
        str, typer.Option("--executor", help="local (a process pool) or dask.")
    ] = "local",
    workers: Annotated[
        int | None, typer.Option("--workers", help="Worker processes (default: the CPUs).")
    ] = None,
    scheduler_address: Annotated[
        str | None,
        typer.Option("--scheduler-address", help="A running Dask scheduler (tcp://HOST:PORT)."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Run or resume a sweep."""
    from sim.errors import KvsimError
    from sim.sweep import WorkerLost, run_sweep

    try:
        with _bar(quiet) as progress:
            table = run_sweep(
                file, out, executor=executor, workers=workers,
                scheduler_address=scheduler_address, progress=progress,
            )  # fmt: skip
    except WorkerLost as exc:
        raise KvsimError(
            f"{exc}; the finished runs are in {out}/results.parquet: rerun the same command "
            "to complete the rest"
        ) from None
    except KeyboardInterrupt:
        table = Path(out) / "results.parquet"
        what = f"the finished runs are in {table}" if table.is_file() else "no run finished"
        typer.echo(f"interrupted: {what}", err=True)
        raise typer.Exit(code=EXIT_INTERRUPTED) from None
    failed = int(table["error"].notna().sum()) if len(table) else 0
    note = f" ({failed} failed: see the error column)" if failed else ""
    typer.echo(f"wrote {out}/results.parquet: {len(table)} runs{note}")
    from sim.sweep.results import warnings_text

    warned = warnings_text(table)  # the pathological runs' warnings, as compare says them
    if warned:
        typer.echo(warned, err=True, nl=False)


class _bar:
    """A rich progress bar over the runs (stderr); a no-op with ``quiet`` or when stderr
    is not a terminal (a pipe, a file: rich draws nothing there but the blank line it ends
    a bar with, which would stand before an error line)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._progress = None
        self._task = None

    def __enter__(self):
        from sim.cli._run import _is_terminal

        if self.quiet or not _is_terminal(sys.stderr):
            return None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"),
            TimeElapsedColumn(), console=Console(stderr=True), transient=True,
        )  # fmt: skip
        self._progress.__enter__()
        return self.update

    def update(self, done: int, total: int) -> None:
        if self._task is None:
            self._task = self._progress.add_task("sweep", total=total)
        self._progress.update(self._task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)


def validate_sweep(file: Path, sets: list[str] | None, max_problems: int) -> int:
    """``kvsim validate`` of a sweep file: the file, its base, and the base with each
    point's overrides; one ``ok`` line and 0, or every problem (one line each) and 2 (the
    exit status)."""
    from sim.errors import KvsimError
    from sim.sweep.check import check_sweep
    from sim.sweep.spec import load_sweep

    if sets:
        raise KvsimError("--set: a sweep file's points set its keys; --set applies to scenarios")
    try:
        sweep = load_sweep(file)
        problems, base = check_sweep(sweep)
    except KvsimError as exc:
        problems, base = [exc], None
    if problems:
        for err in problems[:max_problems]:
            print_error(err)
        if len(problems) > max_problems:
            print_error(f"... and {len(problems) - max_problems} more")
        return 2
    n = len(sweep.points)
    if base.scenario.cluster is not None:  # the cluster it is, as `kvsim validate SCENARIO`
        what = cluster_line(base)
    else:
        what = (f"{base.model.name} on {base.num_gpus} x {base.accelerator.name}, workload "
                f"{base.scenario.workload.kind}")  # fmt: skip
    typer.echo(
        f"{file}: ok: sweep {sweep.name}: {n} point{'s' if n != 1 else ''} x "
        f"{sweep.replications} replication{'s' if sweep.replications != 1 else ''} = "
        f"{n * sweep.replications} runs of {sweep.base_path.name} ({base.scenario.name}: {what})"
    )
    return 0


def run_replicated(
    file: Path, out: str, sets: list[str], quiet: bool, force: bool, replications: int
) -> None:
    """``kvsim run --replications K``: the K run folders and the mean summary, written into
    a hidden sibling of ``out`` and renamed to it once all are done (nothing on an error)."""
    import os
    import shutil

    from sim.run.output import check_out_dir
    from sim.run.provenance import scenario_inputs
    from sim.scenario import parse_set
    from sim.sweep import run_replications

    inputs = scenario_inputs(file, parse_set(sets)) if force else []
    out_dir = check_out_dir(out, force=force, whole=True, inputs=inputs)
    argv = [*command_line(file, out, sets, quiet, force), "--replications", str(replications)]
    tmp = out_dir.with_name(f".{out_dir.name}.{os.getpid()}.replications.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with _bar(quiet) as progress:
            summary = run_replications(
                str(file), tmp, replications, overrides=parse_set(sets), command=argv,
                progress=progress,
            )  # fmt: skip
        if out_dir.exists():
            shutil.rmtree(out_dir)  # empty, or --force: replaced whole
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not quiet:
        _print_replicated(summary, out_dir)
    from sim.cli._run import warning_block

    warned = warning_block(summary.get("warnings") or [])  # as kvsim run, also with --quiet
    if warned:
        sys.stderr.write(warned)


def _print_replicated(s: dict, out: Path) -> None:
    from sim.sweep.replicate import replication_lines

    for line in replication_lines(s):
        typer.echo(line)
    from sim.report.text import accuracy_line

    typer.echo(f"  {accuracy_line(s)}")
    typer.echo(f"wrote {out}/")
