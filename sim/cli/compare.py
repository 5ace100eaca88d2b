"""``kvsim compare (RUN_DIR... | SCENARIO --vary KEY=V1,V2 [--vary ...]) --out DIR``.

Invariant: thin: variants, runs, the table and the figures are ``sim.report.compare``;
a variant that sets ``seed`` (``--vary seed=1,2``) runs that seed, and its replications
never run another variant's seed (``sim.sweep.spec.seed_stride``);
the runs go through ``sim.sweep``'s executor (a local process pool with ``--workers`` >
1, else this process). Every variant's overrides are validated before anything runs (a
bad value is a one-line error, exit 2); a variant whose run fails is a row with its error
and the command still writes the comparison. Writes only under ``--out``: a non-empty one
is refused unless ``--force``. Ctrl-C exits 130 and says which runs are complete and kept;
the same command with ``--force`` then runs only the rest (``sim.report.compare.finished``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sim.errors import EXIT_INTERRUPTED

HELP = """Compare variants side by side: run a scenario under each combination of --vary
values (or read existing run folders), print one table with deltas against the first
variant, and write DIR/compare.html (+ PNGs), DIR/compare.parquet (one row per variant)
and DIR/<variant>/ run folders. After Ctrl-C, the same command with --force runs only the
variants not yet complete.

  kvsim compare workloads/agent_swarm.yaml --vary pause_policy.kind=hold,offload_host --out runs/cmp
  kvsim compare workloads/chat_azure.yaml --vary 'allocator={kind: buddy, reservation: pow2},{kind: paged}' --out runs/alloc
  kvsim compare runs/a runs/b --out runs/a-vs-b
"""


def register(app: typer.Typer) -> None:
    """Add ``compare`` to the app."""
    app.command("compare", help=HELP)(compare)


def compare(
    inputs: Annotated[list[Path], typer.Argument(help="Run folders, or one scenario with --vary.")],
    out: Annotated[str, typer.Option("--out", help="Output folder for the comparison.")],
    vary: Annotated[
        list[str] | None, typer.Option("--vary", help="KEY=V1,V2[,...]: values to compare.")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override for every variant: KEY=VALUE.")
    ] = None,
    replications: Annotated[
        int, typer.Option("--replications", help="Seeds per variant (s, s+1, ...); rows are means.")
    ] = 1,
    workers: Annotated[
        int | None, typer.Option("--workers", help="Worker processes (default: the CPUs).")
    ] = None,
    no_report: Annotated[
        bool, typer.Option("--no-report", help="No report in the variants' run folders.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Write into a non-empty --out.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="Print nothing but errors.")] = False,
) -> None:
    """Run or read the variants, then write and print the comparison."""
    from sim.errors import KvsimError
    from sim.report.compare import (
        compare_frame,
        compare_text,
        config_differences,
        variant_row,
        warnings_text,
        write_compare,
    )
    from sim.report.data import load_run
    from sim.run.output import check_out_dir

    out_dir = check_out_dir(out, force=force)
    if not 1 <= replications <= 1000:
        raise KvsimError(f"--replications must be in [1, 1000], got {replications}")
    differs = ""
    if vary:
        named, errors, overrides = _run_variants(inputs, out_dir, vary, set_ or [],
                                                 replications, workers, not no_report, quiet)  # fmt: skip
    else:
        scenarios = [str(d) for d in inputs if d.is_file()]
        if scenarios:
            raise KvsimError(f"{scenarios[0]}: a scenario file: give --vary KEY=V1,V2 to compare "
                             "variants of it (or give run folders to compare runs)")  # fmt: skip
        if set_ or replications != 1:
            raise KvsimError("--set and --replications need a scenario and --vary")
        named = {}
        for d in inputs:
            name = d.name or str(d)
            while name in named:
                name += "'"
            named[name] = [load_run(d)]
        errors, overrides = {n: [] for n in named}, {n: {} for n in named}
        # run folders: no --vary names what differs between them, so their configs say it
        differs = config_differences({n: runs[0].config for n, runs in named.items()})
    rows = [variant_row(n, runs, overrides[n], errors[n]) for n, runs in named.items()]
    frame = compare_frame(rows)
    write_compare(out_dir, named, frame)
    warned = warnings_text(frame)  # each pathological variant's warnings, after the table
    if not quiet:
        typer.echo(compare_text(frame) + differs + warned + _accuracy_lines(named)
                   + f"wrote {out_dir}/compare.html")  # fmt: skip
    elif warned:
        typer.echo(warned, err=True, nl=False)  # as kvsim run says them under --quiet


def _accuracy_lines(named: dict) -> str:
    """How far to trust each variant's latencies (``accuracy_line`` of its first run) and
    where its dollars' price comes from (``price_line``): one line each when every variant
    rests on the same basis, else one per variant."""
    from sim.report.text import accuracy_line, price_line

    lines = {n: accuracy_line(runs[0].summary) for n, runs in named.items() if runs}
    return _one_or_each(lines) + _one_or_each(
        {n: price_line(runs[0].summary) for n, runs in named.items() if runs}
    )


def _one_or_each(lines: dict) -> str:
    """One line when every variant's is the same, else one per variant (``name: line``);
    variants without one (None) are left out."""
    lines = {n: line for n, line in lines.items() if line is not None}
    if not lines:
        return ""
    if len(set(lines.values())) == 1:
        return f"{next(iter(lines.values()))}\n"
    return "".join(f"{n}: {line}\n" for n, line in lines.items())


def _run_variants(inputs, out_dir, vary, sets, replications, workers, report, quiet):
    """Validate, run (in parallel through sim.sweep's executor) and read every variant."""
    from sim.errors import KvsimError
    from sim.report.compare import parse_vary, run_variants, variant_tasks, variants_from_vary
    from sim.report.data import load_run
    from sim.run.checks import preflight
    from sim.scenario import load_scenario, parse_set
    from sim.sweep import make_executor
    from sim.sweep.spec import seed_stride

    if len(inputs) != 1 or not inputs[0].is_file():
        raise KvsimError("--vary needs exactly one scenario file (got "
                         f"{', '.join(map(str, inputs))})")  # fmt: skip
    scenario = str(inputs[0])
    fixed = parse_set(sets)
    variants = variants_from_vary(parse_vary(vary))
    if len(variants) > 256:
        raise KvsimError(f"--vary: {len(variants)} variants; at most 256")
    base_seed = load_scenario(scenario, fixed).scenario.seed
    for v in variants:  # one-line errors (schema, profiles, pool, options) before any run
        labels = {k: f"--vary {k}={value}" for k, value in v.overrides.items()}
        preflight(load_scenario(scenario, {**fixed, **v.overrides}, labels=labels))
    # --vary seed=1,2: each variant's own first seed, its replications never another's
    stride = seed_stride([int(v.overrides.get("seed", base_seed)) for v in variants], replications)
    tasks = variant_tasks(scenario, variants, out_dir, fixed, replications, base_seed, report,
                          seed_stride=stride)  # fmt: skip
    n = workers if workers is not None else None
    executor = make_executor("local", n) if len(tasks) > 1 and (n is None or n > 1) else None
    try:
        results = run_variants(tasks, executor, None if quiet else _progress)
    except KeyboardInterrupt:
        if executor is not None:
            executor.close()
            executor = None
        _interrupted(tasks, out_dir)
    finally:
        if executor is not None:
            executor.close()
    named = {v.name: [] for v in variants}
    errors = {v.name: [] for v in variants}
    for task, res in zip(tasks, results, strict=True):
        if res["error"]:
            errors[task["variant"]].append(res["error"])
        else:
            named[task["variant"]].append(load_run(Path(res["dir"])))
    return named, errors, {v.name: v.overrides for v in variants}


def _interrupted(tasks: list[dict], out_dir: Path) -> None:
    """Ctrl-C while the variants run: say what is kept (each run folder is complete or
    absent: ``sim.run.output``) and how to finish; exit 130."""
    from sim.report.compare import finished

    kept = sum(finished(t) for t in tasks)
    # on a terminal the progress line has no newline until the end
    end_progress = "\n" if kept and _is_terminal(sys.stderr) else ""
    typer.echo(f"{end_progress}interrupted: {kept} of {len(tasks)} runs are complete in {out_dir}/ and kept; "
               "no comparison written: rerun the same command with --force to run the rest "
               "(complete runs are skipped)", err=True)  # fmt: skip
    raise typer.Exit(code=EXIT_INTERRUPTED)


def _progress(done: int, total: int) -> None:
    """``3/4 runs`` on stderr: one line rewritten in place on a terminal, a line each
    otherwise (a log file read ``1/4 runs2/4 runs3/4 runs4/4 runs``)."""
    if _is_terminal(sys.stderr):
        typer.echo(f"\r{done}/{total} runs", err=True, nl=done == total)
    else:
        typer.echo(f"{done}/{total} runs", err=True)


def _is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except ValueError:  # a closed stream
        return False
