"""``kvsim workload sample|fit``: look at what a workload generates; fit one from logs.

- ``kvsim workload sample SCENARIO|KIND --n N --seed S [--set K=V] [--json | --out FILE]``
  lists the LLM calls ``N`` trajectories would make (``sim.workload.sample``: the same plan
  samplers and trajectory processes as a run, served at once by a dry node). A KIND alone
  samples its defaults (the fitted ones) with no model window; a SCENARIO applies its
  model's window (``scheduler.max_model_len``). ``--json`` prints only
  ``{"kind", "seed", "trajectories": [{"id", "turns": [...]}]}``; ``--out`` writes that
  JSON to a file; neither prints a short summary.
- ``kvsim workload fit FILE --kind KIND --out PARAMS.yaml`` fits a kind's parameters from
  a source in its documented schema (``sim.workload.fit``); a workload uses them with
  ``params: {path: PARAMS.yaml}``.

Invariant: user errors are one line (exit 2); ``--json`` output is the JSON object alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from sim.errors import ConfigError, KvsimError

workload_app = typer.Typer(
    help="Sample a workload's calls without the engine; fit a workload from logs.",
    no_args_is_help=True,
)

#: a sample may list at most this many trajectories
MAX_SAMPLE = 100_000


def register(app: typer.Typer) -> None:
    """Add the ``workload`` command group to the app."""
    app.add_typer(workload_app, name="workload")


@workload_app.command("sample")
def sample(
    source: Annotated[str, typer.Argument(help="A scenario YAML file, or a workload kind.")],
    n: Annotated[int, typer.Option("--n", help="Trajectories to sample.")] = 10,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Seed (default: the scenario's, or 0).")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a field: KEY=VALUE (dotted KEY).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the JSON sample.")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write the JSON sample here.")] = None,
) -> None:
    """List the calls of N trajectories (prompt, completion, tool after each call)."""
    from sim.workload.sample import sample_workload

    if as_json and out is not None:
        raise KvsimError("give --json or --out, not both")
    if not 1 <= n <= MAX_SAMPLE:
        raise KvsimError(f"--n must be in [1, {MAX_SAMPLE:,}], got {n}")
    if seed is not None and seed < 0:
        raise KvsimError(f"--seed must be >= 0, got {seed}")
    kind, cfg, base, window, seed = _workload(source, n, seed, set_ or [])
    result = sample_workload(kind, cfg, seed, base, window)
    if as_json:
        typer.echo(json.dumps(result))
    elif out is not None:
        try:
            out.write_text(json.dumps(result) + "\n")
        except OSError as exc:
            raise KvsimError(f"--out {out}: cannot write: {exc.strerror}") from None
        typer.echo(f"wrote {out}: {_summary(result)}")
    else:
        typer.echo(_summary(result))


def _workload(source: str, n: int, seed: int | None, sets: list[str]):
    """(kind, config, base folder, window, seed) of a KIND or a scenario file."""
    from sim.scenario import parse_set
    from sim.workload import WORKLOADS

    overrides = parse_set(sets)
    if source in WORKLOADS and not Path(source).exists():
        return (source, *_kind_config(source, n, overrides), None, seed or 0)
    from sim.scenario import load_scenario, resolve
    from sim.workload.agent_config import TrajectoryWorkload

    if not Path(source).is_file():
        raise KvsimError(
            f"{source!r} is neither a scenario file nor a workload kind; kinds: "
            + ", ".join(sorted(WORKLOADS))
        )
    loaded = load_scenario(source, overrides)
    if not isinstance(loaded.scenario.workload, TrajectoryWorkload):
        kind = loaded.scenario.workload.kind
        raise KvsimError(f"kvsim workload sample lists agent trajectories; {kind!r} is not one")
    overrides["workload.num_trajectories"] = n
    if seed is not None:
        overrides["seed"] = seed
    loaded = load_scenario(source, overrides)
    resolved = resolve(loaded)
    sc = loaded.scenario
    return sc.workload.kind, sc.workload, loaded.base_dir, resolved.context_window_tokens, sc.seed


def _kind_config(kind: str, n: int, overrides: dict[str, Any]):
    """A KIND's config: its defaults, ``n`` trajectories arriving at once, the overrides."""
    from pydantic import TypeAdapter, ValidationError

    from sim.workload import WORKLOADS
    from sim.workload.agent_config import TrajectoryWorkload
    from sim.workload.kind_models import plugin_kinds
    from sim.workload.mix_config import workload_union
    from sim.yamlio import format_validation_error

    if not issubclass(WORKLOADS[kind].config, TrajectoryWorkload):
        raise KvsimError(f"kvsim workload sample lists agent trajectories; {kind!r} is not one")
    data: dict[str, Any] = {"kind": kind, "num_trajectories": n, "arrival": {"kind": "fixed"}}
    for key, value in overrides.items():
        path = key.removeprefix("workload.").split(".")
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{part!r} is not a section", field=f"--set {key}")
        node[path[-1]] = value
    try:
        cfg = TypeAdapter(workload_union(plugin_kinds())).validate_python(data)
    except ValidationError as exc:
        first = format_validation_error(exc, "--set", {}, ("workload",), data).splitlines()[0]
        # a whole-model check is located at the union's tag: name the section instead
        raise KvsimError(first.replace(f"workload.{kind}: ", "workload: ")) from None
    return cfg, Path.cwd()


def _summary(result: dict) -> str:
    import numpy as np

    trajs = result["trajectories"]
    calls = [c for t in trajs for c in t["turns"]]
    if not calls:
        return f"{result['kind']}: no calls (this kind is not sampled call by call)"
    prompts = np.array([c["prompt_tokens"] for c in calls])
    tools = [c["tool_s"] for c in calls if c["tool_s"] is not None]
    p50, p90, p99 = np.percentile(prompts, [50, 90, 99]).round().astype(int).tolist()
    tool = ""
    if tools:
        t50, t90, t99 = np.percentile(tools, [50, 90, 99]).tolist()
        tool = f"; tool s p50 {t50:.2f} p90 {t90:.2f} p99 {t99:.2f} max {max(tools):.1f}"
    return (
        f"{result['kind']} seed {result['seed']}: {len(trajs)} trajectories, {len(calls)} calls"
        f"; prompt tokens p50 {p50:,} p90 {p90:,} p99 {p99:,} max {prompts.max():,}{tool}"
    )


@workload_app.command("fit")
def fit(
    file: Annotated[Path, typer.Argument(help="The source: a file (or a folder of logs).")],
    kind: Annotated[str, typer.Option("--kind", help="The workload kind to fit.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the parameters (YAML).")],
    licence: Annotated[
        str, typer.Option("--licence", help="The data's licence, recorded in the file.")
    ] = "unknown",
    data: Annotated[
        str | None, typer.Option("--data", help="How to name the source in the file.")
    ] = None,
) -> None:
    """Fit a kind's parameters from recorded data (docs/workloads.md "Your own logs")."""
    from sim.workload.fit import dump_params
    from sim.workload.fit import fit as fit_kind

    params = fit_kind(kind, file, licence=licence, data=data)
    try:
        out.write_text(dump_params(params))
    except OSError as exc:
        raise KvsimError(f"--out {out}: cannot write: {exc.strerror}") from None
    src = params["source"]
    typer.echo(
        f"wrote {out}: {kind} fitted on {src['trajectories']:,} trajectories, "
        f"{src['calls']:,} calls"
    )
