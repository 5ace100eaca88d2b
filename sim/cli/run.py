"""``kvsim run FILE --out DIR [--force] [--quiet] [--set KEY=VALUE ...]``: simulate a scenario.

Invariant: the command parses flags, shows progress on stderr and a short result table on
stdout (``--quiet``: nothing but errors and the WARNING block of a pathological run), and
writes only under ``--out``, all of the run folder or nothing (``sim.run.output``): a
non-empty ``--out`` is refused before the run unless ``--force``, and Ctrl-C prints
``interrupted: nothing written`` and exits 130. All simulation logic is in ``sim.run``;
``summary.json`` records this command line.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

HELP = """Run a scenario and write the run folder: config.resolved.yaml, summary.json,
requests.parquet, steps.parquet, memory.parquet, trajectories.parquet, pauses.parquet.

The folder is written whole once the run is done (nothing on an error or Ctrl-C); an
existing non-empty folder is refused unless --force, which replaces it whole.

Override any scenario field with dotted keys (values are YAML):

  kvsim run workloads/seed_chunked_prefill.yaml --out runs/e20 --set scheduler.chunked_prefill=false
  kvsim run workloads/agents_swarm.yaml --out runs/demo --set allocator.kind=static --set seed=3
"""

#: exit status after Ctrl-C (128 + SIGINT, the shell's convention)
EXIT_INTERRUPTED = 130


def register(app: typer.Typer) -> None:
    """Add ``run`` to the app."""
    app.command("run", help=HELP)(run)


def run(
    file: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    out: Annotated[
        str, typer.Option("--out", help="Output folder (created; must be empty or absent).")
    ],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a field: KEY=VALUE (dotted KEY).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="Print nothing but errors and warnings.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a non-empty --out folder whole.")
    ] = False,
) -> None:
    """Run and write; Ctrl-C leaves nothing behind and exits 130."""
    try:
        _run(file, out, set_ or [], quiet, force)
    except KeyboardInterrupt:
        typer.echo("interrupted: nothing written", err=True)
        raise typer.Exit(code=EXIT_INTERRUPTED) from None


def _run(file: Path, out: str, sets: list[str], quiet: bool, force: bool) -> None:
    """Check --out, build, run with a progress bar, write, print the headline numbers."""
    from sim.run import build
    from sim.run.output import check_out_dir
    from sim.scenario import parse_set

    out_dir = check_out_dir(out, force=force)  # before the run: refuse early
    sim = build(str(file), **parse_set(sets))
    if quiet:
        result = sim.run()
    else:
        result = _run_with_progress(sim)
    result.summary["command"] = command_line(file, out, sets, quiet, force)
    result.write(out_dir, force=force)
    if not quiet:
        _print_summary(result.summary, out_dir)
    _after_run(result)


def command_line(file: Path, out: str, sets: list[str], quiet: bool, force: bool) -> list[str]:
    """The argv that reproduces this run (recorded as ``summary.json``'s ``command``)."""
    argv = ["kvsim", "run", str(file), "--out", out]
    for item in sets:
        argv += ["--set", item]
    return argv + (["--quiet"] if quiet else []) + (["--force"] if force else [])


def _after_run(result) -> None:
    """A pathological run says so: its ``warnings`` as a WARNING block on stderr (also
    with ``--quiet``); the exit status stays 0, since the run folder is complete."""
    text = warning_block(result.summary.get("warnings") or [])
    if text:
        sys.stderr.write(text)


def warning_block(warnings: list[str]) -> str:
    """The WARNING block for a run's warnings ('' when there are none)."""
    if not warnings:
        return ""
    lines = [f"WARNING: this run looks pathological ({len(warnings)} warning(s)):"]
    lines += [f"WARNING:   - {w}" for w in warnings]
    lines.append("WARNING: see summary.json (warnings, rejected_by_reason, trajectories_by_status)")
    return "\n".join(lines) + "\n"


def _run_with_progress(sim):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    horizon = sim.resolved.scenario.duration_s
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("trajectories  sim {task.fields[sim_s]:>10.1f} s"),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(sim.resolved.scenario.name, total=sim.ctx.total, sim_s=0.0)
        last = [0.0]

        def progress(now: float, completed: int, total: int) -> None:
            t = time.monotonic()  # throttle redraws (wall clock, reporting only)
            if t - last[0] > 0.1:
                last[0] = t
                bar.update(task, completed=completed, sim_s=now)

        result = sim.run(progress)
        bar.update(
            task,
            completed=result.summary["trajectories_completed"],
            sim_s=result.summary["sim_time_s"],
        )
    if horizon is not None:
        console.print(f"stopped at duration_s = {horizon:g} s of simulated time")
    return result


def _fmt(x, unit: str = "s") -> str:
    if x is None:
        return "-"
    if unit == "s":
        return f"{x * 1e3:,.1f} ms" if x < 10 else f"{x:,.2f} s"
    return f"{x:.3f}"


def _print_summary(s: dict, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"{s['scenario']}: {s['requests_completed']:,} requests, "
        f"{s['trajectories_completed']:,} trajectories in {s['sim_time_s']:,.1f} s "
        f"simulated ({s['wall_time_s']:.2f} s wall)"
    )
    for col in ("metric", "mean", "p50", "p90", "p99"):
        t.add_column(col, justify="right")
    for key in ("ttft_s", "itl_s", "e2e_s", "queue_s"):
        d = s[key]
        t.add_row(key, *(_fmt(d[k]) for k in ("mean", "p50", "p90", "p99")))
    con = Console()
    con.print(t)
    hit = s["prefix_hit_rate"]
    con.print(
        f"max ITL {_fmt(s['max_itl_s'])}; output {s['output_tokens_per_s'] or 0:,.0f} tok/s; "
        f"prefix hit rate {'-' if hit is None else f'{hit:.1%}'}; eta_alloc "
        f"{_fmt(s['eta_alloc_mean'], '')}; eta_effective {_fmt(s['eta_effective_mean'], '')}; "
        f"peak allocated {s['peak_allocated_bytes'] / 1e9:,.2f} GB; preemptions "
        f"{s['preemptions']:,}; rejected {s['rejected']:,}"
    )
    con.print(f"wrote {out}/")
