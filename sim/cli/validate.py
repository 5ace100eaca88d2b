"""``kvsim validate FILE [--set KEY=VALUE ...]``: check a scenario without running it.

Invariant: a valid scenario prints one ``ok`` line with what it resolved to (for a
cluster: its node groups, router and KV pool in all); an invalid one prints every problem
found (schema errors all at once; then missing trace files, the profiles, the KV pool and
the allocator), one ``kvsim: error: file:line: field: message``
line each on stderr, at most ``MAX_PROBLEMS`` of them then ``... and N more``, and exits 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli._common import cluster_line, print_warnings
from sim.errors import KvsimError

#: problems listed before the rest are only counted
MAX_PROBLEMS = 20


def register(app: typer.Typer) -> None:
    """Add ``validate`` to the app."""
    app.command(
        "validate", help="Check a scenario file (schema, trace files, profiles, KV pool, allocator)."
    )(validate)


def validate(
    file: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a field: KEY=VALUE.")
    ] = None,
) -> None:
    """Load, check trace files, resolve and build the allocator; print one line or the
    problems."""
    from sim.sweep.kind import is_sweep_file
    from sim.units import GB

    if is_sweep_file(file):  # a sweep file: its base with every point (sim.cli.sweep)
        from sim.cli.sweep import validate_sweep

        return validate_sweep(file, set_, MAX_PROBLEMS)
    problems, resolved = check(file, set_)
    if problems:
        for err in problems[:MAX_PROBLEMS]:
            typer.echo(f"kvsim: error: {err}", err=True)
        if len(problems) > MAX_PROBLEMS:
            typer.echo(f"kvsim: error: ... and {len(problems) - MAX_PROBLEMS} more", err=True)
        raise typer.Exit(code=2)
    sc = resolved.scenario
    if sc.cluster is not None:
        typer.echo(f"{file}: ok: {sc.name}: {cluster_line(resolved)}")
        return
    typer.echo(
        f"{file}: ok: {sc.name}: {resolved.model.name} on {resolved.num_gpus} x "
        f"{resolved.accelerator.name} (tp {sc.hardware.tp}, pp {sc.hardware.pp}), KV pool "
        f"{resolved.pool_bytes / GB:,.2f} GB ({_pool_tokens(resolved):,.0f}"
        f" tokens), allocator {resolved.allocator_kind}, scheduler {sc.scheduler.kind}, "
        f"workload {sc.workload.kind}"
    )
    print_warnings(list(resolved.warnings))  # what vLLM would not run (exit 0)


def _pool_tokens(resolved) -> float:
    """The pool in tokens of what the allocator charges per token (a hybrid model's block
    table, saved states and drafter included), not the model's KV bytes per token."""
    return resolved.pool_bytes / resolved.allocator_kv_bytes_per_token


def check(file: Path, sets: list[str] | None) -> tuple[list[KvsimError], object]:
    """(every problem found, the resolved scenario when there is none): loading, then the
    checks a run makes before it starts (``sim.run.checks.preflight``)."""
    from sim.errors import ConfigError
    from sim.run.checks import preflight
    from sim.scenario import load_scenario, parse_set

    try:
        return [], preflight(load_scenario(str(file), parse_set(sets)))
    except ConfigError as exc:
        return exc.problems or [exc], None
    except KvsimError as exc:
        return [exc], None
