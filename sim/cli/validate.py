"""``kvsim validate FILE [--set KEY=VALUE ...]``: check a scenario without running it.

Invariant: a valid scenario prints one ``ok`` line with what it resolved to; an invalid
one raises a one-line ``file:line: field: message`` error (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add ``validate`` to the app."""
    app.command("validate", help="Check a scenario file (schema, profiles, KV pool, allocator).")(
        validate
    )


def validate(
    file: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a field: KEY=VALUE.")
    ] = None,
) -> None:
    """Load, resolve and build the allocator; print one line."""
    from sim.scenario import load_scenario, make_allocator_for, parse_set, resolve
    from sim.units import GB

    resolved = resolve(load_scenario(str(file), parse_set(set_)))
    make_allocator_for(resolved)
    sc = resolved.scenario
    typer.echo(
        f"{file}: ok: {sc.name}: {resolved.model.name} on {resolved.num_gpus} x "
        f"{resolved.accelerator.name} (tp {sc.hardware.tp}, pp {sc.hardware.pp}), KV pool "
        f"{resolved.pool_bytes / GB:,.2f} GB ({resolved.pool_bytes / resolved.kv_bytes_per_token:,.0f}"
        f" tokens), allocator {resolved.allocator_kind}, scheduler {sc.scheduler.kind}, "
        f"workload {sc.workload.kind}"
    )
