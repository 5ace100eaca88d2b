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

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer

from sim.cli._common import command_argv, print_warnings

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

#: exit status after Ctrl-C (128 + SIGINT, the shell's convention)
EXIT_INTERRUPTED = 130


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
) -> None:
    """Run and write; Ctrl-C exits 130 and says whether the run folder is in place."""
    written: list[Path] = []  # the run folder, once it is complete
    said: list[str] = []  # the configuration's warnings, printed before the run
    try:
        if replications is not None:  # K seeds on a local pool (sim.cli.sweep)
            from sim.cli._startup_gc import started
            from sim.cli.sweep import run_replicated

            started()  # the collector on for the pool's work (sim.cli._startup_gc)

            return run_replicated(file, out, set_ or [], quiet, force, replications)
        extras = ReportOptions(report=not no_report, trace=trace)
        result = _run(file, out, set_ or [], quiet, force, command_argv(ctx), written.append,
                      extras, said)  # fmt: skip
        if not quiet:
            _print_summary(result.summary, written[0])
        _after_run(result, said)
    except KeyboardInterrupt:
        what = f"the run folder {written[0]} is complete" if written else "nothing written"
        typer.echo(f"interrupted: {what}", err=True)
        raise typer.Exit(code=EXIT_INTERRUPTED) from None


class ReportOptions(NamedTuple):
    """What ``kvsim run`` adds to the run folder besides the run's own files."""

    report: bool = True  # plot_*.png and report.html
    trace: bool = False  # trace.json


def report_hook(result, options: ReportOptions, worker=None) -> Callable[[Path], None]:
    """Renders the report (and trace) into the run's temporary folder; a rendering error
    leaves the report out and says so on stderr (the run itself is still written). With a
    started ``sim.report.worker.ReportWorker`` the report is drawn there from the folder's
    tables (the same files), the trace here."""

    def hook(folder: Path) -> None:
        from sim.report.render import render_extras

        in_worker = options.report and worker is not None and worker.started
        problems = [render_extras(result, folder, report=options.report and not in_worker,
                                  trace=options.trace)]  # fmt: skip
        if in_worker and not problems[0]:  # as in process: no report after a failed trace
            problems.append(worker.render(folder))
        for problem in filter(None, problems):
            typer.echo(f"kvsim: warning: {problem}", err=True)

    return hook


def _run(file: Path, out: str, sets: list[str], quiet: bool, force: bool, command: list[str],
         installed: Callable[[Path], object],
         extras: ReportOptions = ReportOptions(), said: list[str] | None = None) -> Any:  # fmt: skip
    """Check --out, build, run (with a progress bar unless quiet), write the folder
    (``installed(folder)`` once it is complete); the ``RunResult``. The configuration's
    warnings are printed before the run and added to ``said``."""
    from sim.cli._startup_gc import started
    from sim.run import build
    from sim.run.output import check_out_dir, write_run
    from sim.run.provenance import scenario_inputs
    from sim.scenario import parse_set

    inputs = scenario_inputs(file, parse_set(sets)) if force else []  # refuse early
    out_dir = check_out_dir(out, force=force, whole=True, inputs=inputs)
    sim = build(str(file), **parse_set(sets))
    started()  # the start-up's objects frozen, the collector on for the run (sim.cli._startup_gc)
    warned = _config_warnings(sim)
    print_warnings(warned)  # what vLLM would not run, said before the run
    if said is not None:
        said.extend(warned)
    with _report_worker(extras.report) as worker:  # warms up on the other core meanwhile
        result = sim.run() if quiet else _run_with_progress(sim)
        result.summary["command"] = command  # the argv as given (the issue: argv)
        hook = report_hook(result, extras, worker) if extras.report or extras.trace else None
        write_run(result, out_dir, force=force, installed=installed, before_install=hook)
    return result


@contextlib.contextmanager
def _report_worker(report: bool) -> Iterator[Any]:
    """A ``ReportWorker`` while the run goes on (None without a report or a second CPU);
    closed on every way out."""
    if not report:
        yield None
        return
    from sim.report.worker import ReportWorker, worth_a_worker

    if not worth_a_worker():
        yield None
        return
    with ReportWorker() as worker:
        yield worker


def _config_warnings(sim) -> list[str]:
    """What a run's scenario runs as that vLLM would not (``Resolved.warnings``): its
    own, or every node group's of a cluster, each once."""
    parts = [sim.resolved, *(p.resolved for p in getattr(sim, "parts", ()))]
    return list(dict.fromkeys(w for r in parts if r is not None for w in r.warnings))


def _after_run(result, said: Iterable[str] = ()) -> None:
    """A pathological run says so: its ``warnings`` as a WARNING block on stderr (also
    with ``--quiet``), less ``said`` (the configuration's, printed before the run: every
    node group's of a cluster, not pathological); the exit status stays 0, since the run
    folder is complete."""
    before = set(said)
    text = warning_block([w for w in result.summary.get("warnings") or [] if w not in before])
    if text:
        sys.stderr.write(text)
    from sim.cost.accuracy import accuracy_warning

    acc = result.summary.get("accuracy")
    extrapolated = accuracy_warning(acc) if acc else None  # a calibration outside its domain
    if extrapolated:
        sys.stderr.write(f"WARNING: {extrapolated}\n")


def warning_block(warnings: list[str]) -> str:
    """The WARNING block for a run's warnings ('' when there are none)."""
    if not warnings:
        return ""
    lines = [f"WARNING: this run looks pathological ({len(warnings)} warning(s)):"]
    lines += [f"WARNING:   - {w}" for w in warnings]
    lines.append("WARNING: see summary.json (warnings, rejected_by_reason, trajectories_by_status)")
    return "\n".join(lines) + "\n"


def _run_with_progress(sim):
    """Run with a progress bar on standard error where someone can see one (a terminal);
    elsewhere (a pipe, a file, CI) without one and without importing rich (~70 ms of a
    run's start), saying the same end line."""
    horizon = sim.resolved.scenario.duration_s
    if not _is_terminal(sys.stderr):
        result = sim.run()
        if horizon is not None:
            typer.echo(end_line(result.summary["sim_time_s"], horizon), err=True)
        return result
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn

    from sim.report.text import progress_fraction, progress_text

    console = Console(stderr=True)
    columns = [TextColumn("[bold]{task.description}"), BarColumn(),
               TextColumn("{task.fields[text]}")]  # fmt: skip
    t0 = time.monotonic()  # wall clock for the ETA only (reporting, never simulation)
    with Progress(*columns, console=console, transient=True) as bar:
        text = progress_text(0.0, 0, sim.ctx.total, 0.0, horizon)
        task = bar.add_task(sim.resolved.scenario.name, total=1.0, text=text)
        last = [0.0]

        def progress(now: float, completed: int, total: int) -> None:
            t = time.monotonic()  # throttle redraws
            if t - last[0] > 0.1:
                last[0] = t
                bar.update(task, completed=progress_fraction(now, completed, total, horizon),
                           text=progress_text(now, completed, total, t - t0, horizon))  # fmt: skip

        result = sim.run(progress)
        s = result.summary
        done = progress_text(s["sim_time_s"], s["trajectories_completed"], sim.ctx.total,
                             time.monotonic() - t0, horizon)  # fmt: skip
        bar.update(task, completed=1.0, text=done)
    if horizon is not None:
        console.print(end_line(result.summary["sim_time_s"], horizon))
    return result


def _is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (False for a pipe, a file, a closed stream)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except (OSError, ValueError):  # a closed or detached stream
        return False


def end_line(sim_time_s: float, horizon_s: float) -> str:
    """How a run with a ``duration_s`` ended: cut there only when the horizon was reached
    (work was still going on), else when all its work was done, so the reader knows
    whether the figures cover the whole workload."""
    if sim_time_s >= horizon_s:
        return f"stopped at duration_s = {horizon_s:g} s of simulated time (work was still going on)"
    return (f"finished at {sim_time_s:,.1f} s of simulated time: all work done before "
            f"duration_s = {horizon_s:g} s")  # fmt: skip


def _print_summary(s: dict, out: Path) -> None:
    """The end-of-run table (``sim.report.text.summary_table``) and where the run went."""
    from sim.report.text import summary_table

    typer.echo(summary_table(s) + f"wrote {out}/")
