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
    from sim.sweep.spec import is_sweep_file
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
        f"{resolved.pool_bytes / GB:,.2f} GB ({resolved.pool_bytes / resolved.kv_bytes_per_token:,.0f}"
        f" tokens), allocator {resolved.allocator_kind}, scheduler {sc.scheduler.kind}, "
        f"workload {sc.workload.kind}"
    )


def cluster_line(resolved) -> str:
    """What a cluster scenario resolved to: its node groups (count x accelerator, tp
    when above 1; equal groups merged), the router, the model and the KV pool in all."""
    from sim.cluster.config import node_groups
    from sim.run.cluster import preflight_cluster
    from sim.units import GB

    sc = resolved.scenario
    groups = preflight_cluster(resolved.loaded)
    counts: dict[str, int] = {}
    for i, g in enumerate(sc.cluster.nodes):
        r = groups[i]
        tp = r.scenario.hardware.tp
        name = r.accelerator.name + (f" (tp {tp})" if tp > 1 else "")
        counts[name] = counts.get(name, 0) + g.count
    pool = sum(groups[g].pool_bytes for g in node_groups(sc.cluster))
    n = sc.cluster.n_nodes
    nodes = ", ".join(f"{c} x {name}" for name, c in counts.items())
    allocators = "+".join(dict.fromkeys(r.allocator_kind for r in groups))  # every group's
    schedulers = "+".join(dict.fromkeys(r.scenario.scheduler.kind for r in groups))
    dp = sc.cluster.data_parallel
    if dp is not None:  # one engine's data-parallel ranks
        if resolved.model.num_experts:
            how = "expert parallel" if dp.expert_parallel else "experts sharded as TP"
            how += ", stepping in lockstep"
        else:
            how = "a dense model: each rank steps alone"
        return (
            f"one engine of {n} data-parallel rank{'s' if n > 1 else ''} ({nodes}; {how}), "
            f"router {sc.cluster.router.kind}, {resolved.model.name}, KV pool "
            f"{pool / GB:,.2f} GB in all, allocator {allocators}, scheduler {schedulers}, "
            f"workload {sc.workload.kind}"
        )
    return (
        f"cluster of {n} node{'s' if n > 1 else ''} ({nodes}), router {sc.cluster.router.kind}, "
        f"{resolved.model.name}, KV pool {pool / GB:,.2f} GB in all, allocator "
        f"{allocators}, scheduler {schedulers}, workload {sc.workload.kind}"
    )


def check(file: Path, sets: list[str] | None) -> tuple[list[KvsimError], object]:
    """(every problem found, the resolved scenario when there is none): loading, then the
    checks a run makes before it starts (``sim.run.runner.preflight``)."""
    from sim.errors import ConfigError
    from sim.run.runner import preflight
    from sim.scenario import load_scenario, parse_set

    try:
        return [], preflight(load_scenario(str(file), parse_set(sets)))
    except ConfigError as exc:
        return exc.problems or [exc], None
    except KvsimError as exc:
        return [exc], None
