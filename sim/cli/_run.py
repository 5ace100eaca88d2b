"""``kvsim run`` without its command line parser: the run, the folder and what is printed.

Responsibility: ``command(...)`` runs a scenario with the flags of ``kvsim run`` (all but
``--replications``) and prints what the command prints; ``sim.cli.run.run`` (the typer
command) and ``sim.cli.main``'s quick path for a plain ``kvsim run FILE --out DIR`` with
only ``--set``, ``--quiet``, ``--force``, ``--no-report``, ``--trace`` and
``--no-memory-guard`` (``plain_argv``) both call it, so the two print the same lines,
write the same folder and return the same status. Nothing here imports typer (the quick
path's gain: ~45 ms CPU of a run's start, the parser's import and build;
docs/performance.md, "Session 25: start-up").

Invariant: as ``sim.cli.run``'s: output only into a temporary sibling of ``--out`` and
``--out`` itself, all of the run folder or nothing; Ctrl-C prints ``interrupted: ...``
(what is on disk) and the status is 130; a ``KvsimError`` propagates to ``sim.cli.main``,
which prints it in one line (status 2).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from sim.cli._argv import plain_words
from sim.cli._common import echo, print_warnings
from sim.errors import EXIT_INTERRUPTED


def command(file: Path, out: str, sets: list[str], quiet: bool, force: bool, argv: list[str],
            no_report: bool = False, trace: bool = False,
            no_memory_guard: bool = False) -> int:  # fmt: skip
    """``kvsim run`` with these flags (``argv``: the command line as given, ``kvsim``
    first, recorded in summary.json): the exit status, 0 or 130 after Ctrl-C (said on
    stderr with what is on disk). A run projected past the machine's available memory
    stops with ``sim.cli.memory_guard.RunTooLarge`` unless ``no_memory_guard``."""
    written: list[Path] = []  # the run folder, once it is complete
    said: list[str] = []  # the configuration's warnings, printed before the run
    try:
        extras = ReportOptions(report=not no_report, trace=trace)
        result = _run(file, out, sets, quiet, force, argv, written.append, extras, said,
                      guard=not no_memory_guard)  # fmt: skip
        if not quiet:
            _print_summary(result.summary, written[0])
        _after_run(result, said)
    except KeyboardInterrupt:
        what = f"the run folder {written[0]} is complete" if written else "nothing written"
        echo(f"interrupted: {what}", sys.stderr)
        return EXIT_INTERRUPTED
    return 0


#: the on/off flags of a plain ``kvsim run`` (``plain_argv``) -> ``command``'s argument
_FLAGS = {"--quiet": "quiet", "--force": "force", "--no-report": "no_report", "--trace": "trace",
          "--no-memory-guard": "no_memory_guard"}  # fmt: skip


def plain_argv(argv: list[str]) -> dict[str, Any] | None:
    """``command``'s arguments (but ``argv``) when ``argv`` is ``run FILE --out DIR`` with
    no other flag than ``--set VALUE`` (repeated), ``--quiet``, ``--force``,
    ``--no-report``, ``--trace`` and ``--no-memory-guard`` (each at most once), a flag's
    value given as ``--flag VALUE`` or ``--flag=VALUE``; None for anything else (help, ``--replications``,
    ``--``, a flag repeated or misspelt, a value that looks like a flag: typer's parser
    answers those)."""
    words = plain_words(argv, "run", ("--set", "--out"), tuple(_FLAGS))
    if words is None or len(words.files) != 1 or len(words.values["--out"]) != 1:
        return None
    return {"file": Path(words.files[0]), "out": words.values["--out"][0],
            "sets": words.values["--set"],
            **{arg: flag in words.switches for flag, arg in _FLAGS.items()}}  # fmt: skip


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
            echo(f"kvsim: warning: {problem}", sys.stderr)

    return hook


def _run(file: Path, out: str, sets: list[str], quiet: bool, force: bool, command: list[str],
         installed: Callable[[Path], object],
         extras: ReportOptions = ReportOptions(), said: list[str] | None = None,
         guard: bool = True) -> Any:  # fmt: skip
    """Check --out, build, run (with a progress bar unless quiet; under a
    ``sim.cli.memory_guard.MemoryGuard`` when ``guard``), write the folder
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
        watch = _memory_guard(sim) if guard else None
        result = sim.run(watch) if quiet else _run_with_progress(sim, watch)
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


def _memory_guard(sim):
    """The run's ``MemoryGuard`` (its memory projected against the machine's)."""
    from sim.cli.memory_guard import MemoryGuard, count_field

    ctx = sim.ctx
    return MemoryGuard(sim.resolved.scenario.duration_s, count_field(sim),
                       started=lambda: ctx.started)  # fmt: skip


def _run_with_progress(sim, watch=None):
    """Run with a progress bar on standard error where someone can see one (a terminal);
    elsewhere (a pipe, a file, CI) without one and without importing rich (~70 ms of a
    run's start), saying the same end line. ``watch`` (a ``MemoryGuard``) sees every
    progress call first."""
    horizon = sim.resolved.scenario.duration_s
    if not _is_terminal(sys.stderr):
        result = sim.run(watch)
        if horizon is not None:
            echo(end_line(result.summary["sim_time_s"], horizon), sys.stderr)
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

        if watch is not None:
            watch.then = progress
        result = sim.run(watch if watch is not None else progress)
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

    echo(summary_table(s) + f"wrote {out}/", sys.stdout)
