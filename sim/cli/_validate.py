"""``kvsim validate`` without its command line parser: the checks and the lines printed.

Responsibility: ``report(file, sets)`` loads a scenario (or a sweep file), makes every
check a run makes before it starts (``sim.run.checks.preflight``) and prints the outcome;
``sim.cli.validate`` (the typer command) and ``sim.cli.main``'s quick path for a plain
``kvsim validate FILE [--set KEY=VALUE ...]`` both call it, so the two print the same
lines and return the same status. Nothing here imports typer for a scenario file (the
quick path's gain: docs/performance.md, "Start-up"); a sweep file's check does
(``sim.cli.sweep``).

Invariant: a valid scenario prints one ``ok`` line with what it resolved to (for a
cluster: its node groups, router and KV pool in all) and returns 0; an invalid one prints
every problem found (schema errors all at once; then missing trace files, the profiles,
the KV pool and the allocator; then the rows of the traces and the fit the workload names), one ``kvsim: error: file:line: field: message`` line each
on stderr, at most ``MAX_PROBLEMS`` of them then ``... and N more``, and returns 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sim.cli._argv import plain_words
from sim.cli._common import echo, print_error, print_warnings
from sim.errors import InvariantError, KvsimError

if TYPE_CHECKING:
    from sim.scenario import Resolved

#: problems listed before the rest are only counted
MAX_PROBLEMS = 20


def report(file: Path, sets: list[str] | None) -> int:
    """Check ``file`` (``--set`` overrides applied) and print the outcome; the exit status
    (0 or 2). A sweep file is checked as ``sim.cli.sweep.validate_sweep`` does."""
    from sim.sweep.kind import is_sweep_file

    if is_sweep_file(file):  # a sweep file: its base with every point (sim.cli.sweep)
        from sim.cli._startup_gc import started
        from sim.cli.sweep import validate_sweep

        started()  # each point's check makes garbage of its own: the collector on for them

        return validate_sweep(file, sets, MAX_PROBLEMS)
    problems, resolved, too_long = _checked(file, sets)
    if problems:
        for err in problems[:MAX_PROBLEMS]:
            print_error(err)
        if len(problems) > MAX_PROBLEMS:
            print_error(f"... and {len(problems) - MAX_PROBLEMS} more")
        return 2
    if resolved is None:  # every failure is one of the problems above
        raise InvariantError("validate: no problem and no resolved scenario")
    echo(f"{file}: ok: {ok_line(resolved)}", sys.stdout)
    print_warnings([*resolved.warnings, *too_long])  # what vLLM would not run (exit 0)
    return 0


def ok_line(resolved: Resolved) -> str:
    """What a valid scenario resolved to, after ``FILE: ok: ``."""
    sc = resolved.scenario
    if sc.cluster is not None:
        from sim.cli._common import cluster_line

        return f"{sc.name}: {cluster_line(resolved)}"
    from sim.sizing.plan import pool_note
    from sim.units import GB

    hw = sc.hardware  # a pool given in bytes is what it says; a sized one says what it lacks
    note = "" if hw.kv_pool_bytes_per_gpu is not None else (
        "; " + pool_note(hw.reserve_bytes_per_gpu, "hardware.reserve_bytes_per_gpu"))
    return (
        f"{sc.name}: {resolved.model.name} on {resolved.num_gpus} x "
        f"{resolved.accelerator.name} (tp {sc.hardware.tp}, pp {sc.hardware.pp}), KV pool "
        f"{resolved.pool_bytes / GB:,.2f} GB ({resolved.pool_tokens:,.0f}"
        f" tokens{note}), allocator {resolved.allocator_kind}, scheduler {sc.scheduler.kind}, "
        f"workload {sc.workload.kind}"
    )


def check(file: Path, sets: list[str] | None) -> tuple[list[KvsimError], Resolved | None]:
    """``_checked`` without its warnings (the callers that only need the verdict)."""
    problems, resolved, _ = _checked(file, sets)
    return problems, resolved


def _checked(
    file: Path, sets: list[str] | None
) -> tuple[list[KvsimError], Resolved | None, list[str]]:
    """(every problem found, the resolved scenario when there is none, warnings about the
    trace's rows: ``too_long_warning``): loading, then the
    checks a run makes before it starts (``sim.run.checks.preflight``), then, when those
    pass, the rows of every trace file and the fitted-parameters file (``params: {path:
    ...}``) the workload names, read by the run's own readers with its bounds
    (``sim.workload.trace_files``, whose readers are imported only for a workload that
    names one)."""
    from sim.errors import ConfigError
    from sim.run.checks import preflight
    from sim.scenario import load_scenario, parse_set
    from sim.workload.trace_files import read_traces, too_long_warning

    try:
        resolved = preflight(load_scenario(str(file), parse_set(sets)))
        prompts = read_traces(resolved.scenario.workload, resolved.loaded.base_dir)
    except ConfigError as exc:
        return exc.problems or [exc], None, []
    except KvsimError as exc:
        return [exc], None, []
    warning = too_long_warning(prompts, resolved.context_window_tokens)
    return [], resolved, [warning] if warning else []


def plain_argv(argv: list[str]) -> tuple[Path, list[str] | None] | None:
    """(FILE, the ``--set`` values or None) when ``argv`` is ``validate FILE`` with no
    other flag than ``--set VALUE`` / ``--set=VALUE``; None for anything else (help, other
    flags, a value that looks like a flag: typer's parser answers those)."""
    words = plain_words(argv, "validate", ("--set",))
    if words is None or len(words.files) != 1:
        return None
    return Path(words.files[0]), words.values["--set"] or None
